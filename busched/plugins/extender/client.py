"""A synchronous HTTP POST with a deadline, for a session that must not wait on the caller's loop.

The session is synchronous, and it runs either in a worker thread or on the scheduler's event
loop itself.  A call made with the caller's loop (``run_until_complete``, or awaiting it) would
deadlock in the second case: the loop that must deliver the answer is the one blocked waiting
for it.  So every call goes to one loop of this process's own, running in a daemon thread
(`Runner`): the session submits the request with ``asyncio.run_coroutine_threadsafe`` and waits on
the future with the extender's ``httpTimeout``.  On the scheduler's loop that wait blocks the
loop for at most the timeout per call (an extender is a synchronous hook in Volcano too:
``httpTimeout`` is what bounds it, and ``ignorable`` what makes a slow one harmless).

One `aiohttp.ClientSession` (one connection pool, kept alive between calls) serves every
extender of the process.  At shutdown (`atexit`, or `Runner.close` in tests) the session is closed
on its loop and the loop stopped; a call after that fails at once with `ExtenderError`, and one in
flight at that moment ends by its own timeout (the session's wait is always bounded).  Should the
thread die, the next call starts a fresh loop and client session.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import aiohttp

from busched.plugins.extender.wire import MAX_BODY

__all__ = ["ExtenderError", "Runner", "post", "shared_runner"]


class ExtenderError(Exception):
    """A call that did not get a usable answer: unreachable, slow, not 200, too large, malformed."""


class Runner:
    """An event loop in a daemon thread with one aiohttp client session, for synchronous callers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise ExtenderError("the extender client is closed (the process is stopping)")
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name="busched-extender-client", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
                self._session = None  # (one made on a former loop cannot serve this one)
            return self._loop

    async def _post(self, url: str, body: bytes, timeout: float) -> bytes:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.post(url, data=body, headers={"Content-Type": "application/json"},
                                          timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                if resp.status != 200:
                    raise ExtenderError(f"extender at {url} answered HTTP {resp.status}")
                data = await resp.content.read(MAX_BODY + 1)
                if len(data) > MAX_BODY:
                    raise ExtenderError(f"extender at {url} answered more than {MAX_BODY} bytes")
                return data
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise ExtenderError(f"extender at {url}: {type(e).__name__}: {e}") from None

    def post(self, url: str, body: bytes, timeout: float) -> bytes:
        """POST ``body`` to ``url`` and return the answer's body; `ExtenderError` past ``timeout`` seconds
        or on any failure."""
        loop = self._start()
        fut: Future[bytes] = asyncio.run_coroutine_threadsafe(self._post(url, body, timeout), loop)
        try:
            return fut.result(timeout + 0.5)  # (the request's own timeout fires first; this is the backstop)
        except FutureTimeout:
            fut.cancel()
            raise ExtenderError(f"extender at {url}: no answer within {timeout:g}s") from None

    def close(self, timeout: float = 2.0) -> None:
        """Close the client session and stop the loop; later calls fail at once."""
        with self._lock:
            self._closed = True
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None or not thread.is_alive():
            return

        async def shut() -> None:
            if self._session is not None and not self._session.closed:
                await self._session.close()

        try:
            asyncio.run_coroutine_threadsafe(shut(), loop).result(timeout)
        except Exception:  # noqa: BLE001 - best effort at exit: the thread is a daemon either way
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()


_SHARED: list[Runner] = []
_SHARED_LOCK = threading.Lock()


def shared_runner() -> Runner:
    """The process's one runner, closed at exit."""
    with _SHARED_LOCK:
        if not _SHARED:
            _SHARED.append(Runner())
            atexit.register(_SHARED[0].close)
        return _SHARED[0]


def post(url: str, body: bytes, timeout: float) -> Any:
    return shared_runner().post(url, body, timeout)
