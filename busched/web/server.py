"""A small aiohttp server: ``/metrics`` (Prometheus), ``/healthz`` (the process is up and connected) and
``/readyz`` (caught up with the state stream and scheduling).  Bound to 127.0.0.1 unless told otherwise."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry

from busched.metrics import CONTENT_TYPE, render

__all__ = ["HttpServer", "start_http", "parse_listen"]


def parse_listen(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT``."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    try:
        p = int(port)
    except ValueError:
        raise ValueError(f"expected HOST:PORT, got {text!r}") from None
    return (host.strip("[]") or default_host), p


@dataclass
class HttpServer:
    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_http(host: str, port: int, registry: CollectorRegistry, *, ready: Callable[[], bool],
                     healthy: Callable[[], bool] = lambda: True) -> HttpServer:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=render(registry), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(_: web.Request) -> web.Response:
        ok = healthy()
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "unhealthy\n")

    async def readyz(_: web.Request) -> web.Response:
        ok = ready()
        return web.Response(status=200 if ok else 503, text="ready\n" if ok else "not ready\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = port
    server = getattr(site, "_server", None)
    if server is not None and server.sockets:
        bound = server.sockets[0].getsockname()[1]
    return HttpServer(runner, host, bound)
