"""The NATS side of busched: wire messages, subjects and streams, and the `Bus` client.

This is the only package that imports ``nats``.
"""

from busched.bus.client import Ack, Bus, BusError, Delivery, StreamSettings
from busched.bus.connect import NatsOptions

__all__ = ["Bus", "BusError", "Ack", "Delivery", "StreamSettings", "NatsOptions"]
