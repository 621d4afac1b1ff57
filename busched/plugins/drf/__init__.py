"""drf: dominant resource fairness between jobs (and, with ``enableHierarchy``, between queues).

The plugin is in `plugin`, its per-job share records and a first open's table of them in `share_table`.
"""

from busched.plugins.drf.plugin import DrfPlugin

__all__ = ["DrfPlugin"]
