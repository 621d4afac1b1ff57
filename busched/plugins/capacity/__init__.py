"""capacity: queues get what they deserve, up to their capability (flat or as a tree of queues).

The plugin is in `plugin`, the queue tree it keeps in `tree`.
"""

from busched.plugins.capacity.plugin import CapacityPlugin

__all__ = ["CapacityPlugin"]
