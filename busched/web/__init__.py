"""HTTP endpoints of a busched process: the status page (/, /status.json), /metrics, /healthz, /readyz."""

from busched.web.server import HttpServer, start_http

__all__ = ["HttpServer", "start_http"]
