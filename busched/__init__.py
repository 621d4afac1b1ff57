"""busched: a Volcano-compatible batch scheduler for fleets over a NATS bus."""

__version__ = "0.1.0"
