"""The NATS side of busched: wire messages, subjects and streams, and the `Bus` client.

This is the only package that imports ``nats``.  `Bus` (`client`) is the one object the rest of
busched uses; its parts are `streams` (which streams, how configured), `publish` (stream publishing
with acknowledgements in flight), `feeds` (the state watch, a node's decision feed) and `reads`
(one-off reads); `errors` has `BusError`.
"""

from busched.bus.client import Ack, Bus, BusError, Delivery, StreamSettings
from busched.bus.connect import NatsOptions

__all__ = ["Bus", "BusError", "Ack", "Delivery", "StreamSettings", "NatsOptions"]
