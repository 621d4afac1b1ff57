"""A big catch-up read by a second process.

Reading the state stream costs nats-py about 6 µs of CPU per message (protocol parsing, a message
object, the ordered consumer's bookkeeping, a queue and a coroutine per message): 1.4 s of the 6 s a
scheduler took to catch up with 232,000 events, on the same core as its own handling of them.  A
catch-up that big is read instead by a child process (``python -m busched.bus.bulk``) running
nats-py on another core; it hands the messages over a pipe in large frames, which the parent
decodes in one msgspec call each.  The child only reads: it delivers the latest message of every
subject up to a target sequence, in stream order, exactly what the parent's own ordered consumer
would have delivered, and exits.  The parent then follows the stream itself from the next sequence.

Frames on the child's stdout: a 4-byte big-endian length, then a msgpack `Batch`, `Done` or
`Failed`.  The request (connection options, stream, subject, target) goes to its stdin as JSON, so
credentials never show in a process list.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from busched.bus.connect import NatsOptions

log = logging.getLogger("busched.bus")

_HEADER = struct.Struct(">I")
FRAME_MESSAGES = 4096  # messages per frame, at most


class ReadRequest(msgspec.Struct, frozen=True):
    options: NatsOptions
    stream: str
    subject: str
    target: int  # stop once the message with this stream sequence (or the stream's end) is delivered


class Batch(msgspec.Struct, tag="batch", array_like=True):
    items: list[tuple[str, bytes, int]]  # (subject, data, stream sequence), in stream order


class Done(msgspec.Struct, tag="done", array_like=True):
    last_seq: int
    count: int


class Failed(msgspec.Struct, tag="failed", array_like=True):
    error: str


Frame = Batch | Done | Failed


class BulkReadError(RuntimeError):
    pass


# == the parent's side =================================================================================================
class BulkRead:
    """One child reading up to ``request.target``; `run` hands each batch to ``on_batch`` as it comes."""

    def __init__(self, request: ReadRequest, on_batch: Callable[[list[tuple[str, bytes, int]]], None], *,
                 idle_timeout: float = 30.0, command: list[str] | None = None) -> None:
        self.request = request
        self.on_batch = on_batch
        self.idle_timeout = idle_timeout
        self.command = command or [sys.executable, "-m", "busched.bus.bulk"]
        self.proc: asyncio.subprocess.Process | None = None
        self.last_seq = 0  # of the last message handed over
        self.count = 0

    async def run(self) -> Done:
        """Read to the end.  Raises `BulkReadError` when the child cannot start, fails, or goes
        silent; what it handed over until then (``last_seq``) stays valid."""
        env = dict(os.environ)
        # the child imports this package from wherever the parent did
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env)
        except OSError as e:
            raise BulkReadError(f"cannot start the bulk reader: {e}") from None
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(msgspec.json.encode(self.request))
            await proc.stdin.drain()
            proc.stdin.close()
            decode = msgspec.msgpack.Decoder(Frame).decode
            while True:
                try:
                    head = await asyncio.wait_for(proc.stdout.readexactly(_HEADER.size), self.idle_timeout)
                    body = await asyncio.wait_for(proc.stdout.readexactly(_HEADER.unpack(head)[0]),
                                                  self.idle_timeout)
                except asyncio.IncompleteReadError:
                    raise BulkReadError(f"the bulk reader ended early{await self._why()}") from None
                except asyncio.TimeoutError:
                    raise BulkReadError(f"the bulk reader sent nothing for {self.idle_timeout:g}s") from None
                frame = decode(body)
                if isinstance(frame, Batch):
                    if frame.items:
                        self.on_batch(frame.items)
                        self.last_seq = frame.items[-1][2]
                        self.count += len(frame.items)
                elif isinstance(frame, Done):
                    return frame
                else:
                    raise BulkReadError(f"the bulk reader failed: {frame.error}")
        finally:
            await self.stop()

    async def _why(self) -> str:
        assert self.proc is not None and self.proc.stderr is not None
        try:
            err = await asyncio.wait_for(self.proc.stderr.read(4000), 2.0)
        except (asyncio.TimeoutError, OSError):
            err = b""
        text = err.decode(errors="replace").strip().splitlines()
        return f": {text[-1]}" if text else ""

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.returncode is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except asyncio.TimeoutError:
            log.warning("the bulk reader (pid %d) did not exit", proc.pid)


# == the child's side ==================================================================================================
def _position(reply: str) -> tuple[int, int]:
    """(stream sequence, messages pending) from a JetStream delivery's reply subject (see client.py)."""
    t = reply.split(".")
    if len(t) == 9 and t[0] == "$JS" and t[1] == "ACK":
        return int(t[5]), int(t[8])
    if len(t) >= 12 and t[0] == "$JS" and t[1] == "ACK":  # with domain and account hash
        return int(t[7]), int(t[10])
    return -1, 0


async def _read(req: ReadRequest, out: asyncio.StreamWriter) -> Done:
    import nats
    from nats.js import api

    kw = req.options.connect_kwargs()
    kw["name"] = f"{req.options.name}-bulk"
    nc = await nats.connect(max_reconnect_attempts=3, reconnect_time_wait=0.5, allow_reconnect=True, **kw)
    done = asyncio.get_running_loop().create_future()
    buf: list[tuple[str, bytes, int]] = []
    state = {"last": 0, "count": 0, "scheduled": False}
    encode = msgspec.msgpack.Encoder().encode

    def flush() -> None:
        state["scheduled"] = False
        if buf:
            body = encode(Batch(list(buf)))
            buf.clear()
            out.write(_HEADER.pack(len(body)) + body)

    async def cb(m: Any) -> None:
        if done.done():
            return
        seq, pending = _position(m.reply or "")
        if seq < 0:
            return
        buf.append((m.subject, m.data, seq))
        state["last"], state["count"] = seq, state["count"] + 1
        if seq >= req.target or pending == 0:
            flush()
            done.set_result(None)
        elif len(buf) >= FRAME_MESSAGES:
            flush()
        elif not state["scheduled"]:
            state["scheduled"] = True
            asyncio.get_running_loop().call_soon(flush)

    try:
        js = nc.jetstream(timeout=10)
        cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT)
        sub = await js.subscribe(req.subject, stream=req.stream, cb=cb, ordered_consumer=True, config=cfg,
                                 pending_msgs_limit=1_000_000, pending_bytes_limit=1024 * 1024 * 1024)
        # what the parent has not read yet waits in the pipe's transport: at most the catch-up itself
        await done
        await sub.unsubscribe()
    finally:
        await nc.close()
    return Done(last_seq=state["last"], count=state["count"])


async def _child_main() -> int:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout.buffer)
    out = asyncio.StreamWriter(transport, protocol, None, loop)
    encode = msgspec.msgpack.Encoder().encode
    try:
        req = msgspec.json.decode(sys.stdin.buffer.read(), type=ReadRequest)
        frame: Frame = await _read(req, out)
        rc = 0
    except Exception as e:  # noqa: BLE001 - whatever went wrong goes to the parent as a frame
        frame, rc = Failed(f"{type(e).__name__}: {e}"), 1
    body = encode(frame)
    out.write(_HEADER.pack(len(body)) + body)
    await out.drain()
    transport.close()
    return rc


if __name__ == "__main__":
    sys.exit(asyncio.run(_child_main()))
