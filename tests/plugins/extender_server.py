"""A real aiohttp extender on loopback, in a thread with its own event loop, for the extender tests.

Each verb's behaviour is a function of the request's JSON returning what to answer: a dict (sent
as JSON), bytes (sent as they are), a `web.Response`, or `HANG` (the handler waits until the
request is cancelled: what a slow extender looks like, without a sleep).  Every request is kept in
``requests`` as (verb, body)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

HANG = object()


class ExtenderServer:
    def __init__(self) -> None:
        self.behaviour: dict[str, Callable[[Any], Any]] = {}
        self.requests: list[tuple[str, Any]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        verb = request.match_info["verb"]
        body = json.loads(await request.read() or b"null")
        self.requests.append((verb, body))
        fn = self.behaviour.get(verb)
        answer = fn(body) if fn is not None else {}
        if answer is HANG:
            await asyncio.Event().wait()  # until the client gives up and the request is cancelled
        if isinstance(answer, web.StreamResponse):
            return answer
        if isinstance(answer, bytes):
            return web.Response(body=answer, content_type="application/json")
        return web.json_response(answer)

    async def _start(self) -> str:
        app = web.Application()
        app.router.add_post("/{verb}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    def start(self) -> ExtenderServer:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        async def shut() -> None:
            if self._runner is not None:
                await self._runner.cleanup()
            for t in asyncio.all_tasks():
                if t is not asyncio.current_task():
                    t.cancel()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def verbs(self) -> list[str]:
        return [v for v, _ in self.requests]
