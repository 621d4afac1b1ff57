"""A small aiohttp server: ``/metrics`` (Prometheus), ``/healthz`` (the process is up and connected),
``/readyz`` (caught up with the state stream and scheduling), and the status page: ``/`` (HTML,
`busched.web.status`) and ``/status.json`` (the same, as data).  Bound to 127.0.0.1 unless told otherwise."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web
from prometheus_client import CollectorRegistry

from busched.metrics import CONTENT_TYPE, render
from busched.web import status as page

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


def _refresh(request: web.Request) -> int:
    """``?refresh=SECONDS`` (0: never), bounded; anything else: the default."""
    text = request.query.get("refresh", "")
    if text.isdigit() and len(text) <= 6:
        return min(int(text), page.MAX_REFRESH)
    return page.DEFAULT_REFRESH


async def start_http(host: str, port: int, registry: CollectorRegistry, *, ready: Callable[[], bool],
                     healthy: Callable[[], bool] = lambda: True,
                     status: Callable[[], Awaitable[dict[str, Any]]] | None = None,
                     role: Callable[[], str] | None = None) -> HttpServer:
    """Serve on ``host:port`` (0: a free port, see ``HttpServer.port``).  ``status`` gives the status
    page's data (`busched.scheduler.overview.build`); without it ``/`` says that no scheduler runs in
    this process and ``/status.json`` is 404.  ``role`` (leader or standby, `overview.role`) is said in
    ``/readyz``'s body: a standby caught up with the stream is ready (it takes over warm)."""
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=render(registry), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(_: web.Request) -> web.Response:
        ok = healthy()
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "unhealthy\n")

    async def readyz(_: web.Request) -> web.Response:
        ok = ready()
        text = "ready" if ok else "not ready"
        if role is not None:
            text += f": {role()}"
        return web.Response(status=200 if ok else 503, text=text + "\n")

    async def index(request: web.Request) -> web.Response:
        refresh = _refresh(request)
        text = page.render(await status(), refresh=refresh) if status is not None else page.render_absent()
        return web.Response(text=text, content_type="text/html", charset="utf-8")

    async def status_json(_: web.Request) -> web.Response:
        if status is None:
            return web.Response(status=404, text="no scheduler in this process\n")
        return web.Response(body=msgspec.json.encode(await status()), content_type="application/json")

    app = web.Application()
    app.router.add_get("/", index)
    app.router.add_get("/status.json", status_json)
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
