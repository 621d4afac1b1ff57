"""The connection's messages read without nats-py's regular expression (busched/bus/parse.py): against nats-py's
own parser as the oracle, on random protocol streams cut at random places; on the installed nats-py and a real
nats-server."""

from __future__ import annotations

import random
from typing import Any

import pytest
from nats.protocol.parser import Parser

from busched.bus import Bus
from busched.bus import subjects as S
from busched.bus.direct import direct, direct_raw
from busched.bus.parse import usable


class _Conn:
    """What nats-py's parser calls on its connection, each call written down."""

    def __init__(self) -> None:
        self.stats: dict[str, int] = {"in_msgs": 0, "in_bytes": 0}
        self.calls: list[tuple[Any, ...]] = []
        self._ps = Parser(self)

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any) -> None:
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        self.calls.append(("msg", sid, subject, reply, data, headers))

    async def _process_ping(self) -> None:
        self.calls.append(("ping",))

    async def _process_pong(self) -> None:
        self.calls.append(("pong",))

    async def _process_info(self, info: Any) -> None:
        self.calls.append(("info", info))

    async def _process_err(self, err: str) -> None:
        self.calls.append(("err", err))


def _stream(rng: random.Random, n: int) -> bytes:
    out = bytearray()
    for i in range(n):
        r = rng.random()
        if r < 0.05:
            out += rng.choice([b"PING\r\n", b"PONG\r\n", b"+OK\r\n", b'INFO {"max_payload":1048576}\r\n',
                               b"-ERR 'Slow Consumer'\r\n"])
            continue
        sid = rng.choice([1, 2, 3])
        subject = f"s.{i}.x".encode()
        reply = rng.choice([b"", f"$JS.ACK.ST.c.1.{i}.{i}.0.0".encode(), b"_INBOX.abc"])
        data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 5, 300, 5000])))
        head = b""
        if rng.random() < 0.3:
            head = rng.choice([b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % i,
                               b"NATS/1.0 100 FlowControl Request\r\n\r\n"])
        sep = rng.choice([b" ", b"  ", b"\t"])
        if head:
            line = b"HMSG " + subject + sep + b"%d" % sid + (sep + reply if reply else b"") + \
                b" %d %d\r\n" % (len(head), len(head) + len(data))
        else:
            line = b"MSG " + subject + sep + b"%d" % sid + (sep + reply if reply else b"") + b" %d\r\n" % len(data)
        out += line + head + data + b"\r\n"
    return bytes(out)


async def _feed(conn: _Conn, data: bytes, cuts: list[int]) -> None:
    at = 0
    for c in sorted(cuts) + [len(data)]:
        await conn._ps.parse(data[at:c])
        at = c


def _routed_conn() -> tuple[_Conn, list[tuple[Any, ...]]]:
    """A connection whose sid 1 has a plain route and sid 2 a raw one (headers: nats-py's path)."""
    ours = _Conn()
    routed: list[tuple[Any, ...]] = []
    assert direct(ours, 1, lambda subject, payload: routed.append(("msg", 1, subject, payload)))
    original: Any = None

    def raw(sid: int, subject: bytes, reply: bytes, payload: bytes, headers: Any) -> Any:
        if headers is not None:
            return original(sid, subject, reply, payload, headers)
        routed.append(("msg", sid, subject, reply, payload, headers))
        return None

    original = direct_raw(ours, 2, raw)
    assert ours.__dict__.get("_busched_parse")  # (direct installs it)
    return ours, routed


async def test_the_same_messages_as_nats_pys_parser_on_random_streams() -> None:
    for seed in range(30):
        rng = random.Random(seed)
        data = _stream(rng, 120)
        cuts = [rng.randrange(len(data)) for _ in range(rng.choice([0, 5, 60, 400]))]
        oracle = _Conn()
        await _feed(oracle, data, cuts)
        ours, routed = _routed_conn()
        await _feed(ours, data, cuts)
        # sid 1 without headers and sid 2 without headers went to their routes; everything else to _process_msg
        expected_routed = [("msg", 1, c[2], c[4]) if c[1] == 1 else c for c in oracle.calls
                           if c[0] == "msg" and c[1] in (1, 2) and c[5] is None]
        assert routed == expected_routed, seed
        assert ours.calls == [c for c in oracle.calls if not (c[0] == "msg" and c[1] in (1, 2) and c[5] is None)], seed
        assert ours.stats["in_msgs"] + sum(1 for r in routed if r[1] == 2) == oracle.stats["in_msgs"]
        assert not ours._ps.buf and ours._ps.state == oracle._ps.state


async def test_a_message_split_anywhere_is_read_once_whole() -> None:
    data = b"MSG a.b 1 r.s 5\r\nhello\r\nHMSG c 1 18 20\r\nNATS/1.0\r\nK: v\r\n\r\nhi\r\n"
    for cut in range(len(data) + 1):
        conn, got = _routed_conn()
        await _feed(conn, data, [cut])
        assert got == [("msg", 1, b"a.b", b"hello")], cut
        assert conn.calls == [("msg", 1, b"c", b"", b"hi", b"NATS/1.0\r\nK: v\r\n\r\n")], cut


@pytest.mark.parametrize("bad", [b"HMSG a\r\n", b"MSG \r\n", b"MSG a\r\n", b"MSG foo 1 -3\r\nhi\r\n",
                                 b"MSG foo 1 +2\r\nhi\r\n", b"MSG foo 1 1_0\r\nhi\r\n",
                                 b"HMSG c 1 -1 2\r\nhi\r\n", b"HMSG c 1 +0 2\r\nhi\r\n",
                                 # whitespace before the CRLF; a bare LF or CR between the reply and the size
                                 b"MSG a 1 5 \r\nhello\r\n", b"MSG a 1 r\n5\r\nhello\r\n",
                                 b"MSG a 1 r\r5\r\nhello\r\n", b"HMSG a 1 5 10 \r\nNATS/hello\r\n"])
async def test_a_malformed_message_line_is_refused_as_nats_py_refuses_it(bad: bytes) -> None:
    """A short or signed control line raises what nats-py's parser raises (ProtocolError: the client reconnects at
    once), after the same messages; never a message of its own, nor an exception the read loop would die of."""
    data = b"MSG a 1 2\r\nhi\r\n" + bad + b"MSG a 1 2\r\nho\r\n"
    oracle = _Conn()
    with pytest.raises(Exception) as theirs:
        await _feed(oracle, data, [])
    ours, routed = _routed_conn()
    with pytest.raises(Exception) as mine:
        await _feed(ours, data, [])
    assert type(mine.value) is type(theirs.value), (mine.value, theirs.value)
    assert routed == [("msg", 1, b"a", b"hi")] and ours.calls == oracle.calls[1:]


@pytest.mark.parametrize("odd", [b"HMSG a 2 0 2\r\n12\r\nMSG a 1 2\r\nhi\r\n", b"HMSG a 2 0 2\r\n \r\n12\r\n",
                                 b"MSG a\n1 2\r\nhi\r\n", b"MSG a 1\r\n2\r\nhi\r\n", b"HMSG a 2 2 2\r\nhi\r\n"])
async def test_an_odd_line_nats_py_reads_is_read_as_it_reads_it(odd: bytes) -> None:
    """Lines no server sends that nats-py's regular expression still reads, some across their CRLF (a ``\\s+``
    matches it: a header size and a size, then digits on the next line, are read as a reply, a header size and a
    size): the same messages as nats-py's parser."""
    data = b"MSG a 1 2\r\nhi\r\n" + odd + b"MSG b 3 2\r\nho\r\n"

    async def raised(conn: _Conn) -> type | None:
        try:
            await _feed(conn, data, [])
        except Exception as e:  # noqa: BLE001 - what nats-py raises (a ProtocolError) is compared below
            return type(e)
        return None

    oracle = _Conn()
    ours, routed = _routed_conn()
    assert await raised(ours) is await raised(oracle)
    assert routed == [("msg", 1, c[2], c[4]) if c[1] == 1 else c for c in oracle.calls
                      if c[0] == "msg" and c[1] in (1, 2) and c[5] is None]
    assert ours.calls == [c for c in oracle.calls if not (c[0] == "msg" and c[1] in (1, 2) and c[5] is None)]
    assert ours._ps.buf == oracle._ps.buf and ours._ps.state == oracle._ps.state


async def test_the_installed_nats_py_is_one_parse_knows(nats_server) -> None:
    bus = await Bus.connect(nats_server.url)
    try:
        assert usable(bus.nc)  # else every message silently takes nats-py's slower parse
        await bus.ensure_streams()
        acks = await bus.publish_all((S.podgroup_subject(f"p/j{i}"), b"x" * (i * 97 % 70000), None) for i in range(300))
        assert all(a.ok for a in acks)
        assert bus.nc.__dict__.get("_busched_parse") and bus._publisher._sub._received == 0
        await bus.nc.flush()  # a PING answered by a PONG: nats-py's own parse
        assert bus.nc.is_connected
    finally:
        await bus.close()


async def test_a_big_message_arriving_in_many_reads_is_copied_once_it_is_all_there(monkeypatch) -> None:
    """The frames are cut from one copy of the buffer (`bytes(buf)`): a payload of 2 MB that comes in 64 reads
    (nats-py reads 32 KB at a time) is copied when it is all there, not at every read."""
    import busched.bus.parse as parse_mod

    copies: list[int] = []

    def counted(x: Any = b"") -> bytes:
        copies.append(len(x))
        return builtins_bytes(x)

    builtins_bytes = bytes
    conn, got = _routed_conn()
    monkeypatch.setattr(parse_mod, "bytes", counted, raising=False)
    big = b"x" * (2 << 20)
    data = b"MSG a.b 1 %d\r\n" % len(big) + big + b"\r\nMSG c 1 2\r\nhi\r\n"
    await _feed(conn, data, list(range(32768, len(data), 32768)))
    assert got == [("msg", 1, b"a.b", big), ("msg", 1, b"c", b"hi")]
    assert len(copies) <= 3 and sum(copies) < 3 * len(data), (len(copies), sum(copies))
    assert not conn._ps.buf


async def test_frames_nats_py_processes_in_32_kb_reads_are_copied_once_each(monkeypatch) -> None:
    """A frame the parser does not route is awaited (nats-py's ``_process_msg``); reading on after it must not copy
    what is still buffered again: small frames in 32 KB reads (nats-py's read size) were copied ~280 times each."""
    import busched.bus.parse as parse_mod

    copies: list[int] = []

    def counted(x: Any = b"") -> bytes:
        copies.append(len(x))
        return builtins_bytes(x)

    builtins_bytes = bytes
    monkeypatch.setattr(parse_mod, "bytes", counted, raising=False)
    for size in (20, 100, 400):
        conn, got = _routed_conn()
        frame = b"MSG dec.n1.bind.x 9 _INBOX.abc.1 %d\r\n" % size + b"x" * size + b"\r\n"
        mixed = frame + b"MSG a 1 2\r\nhi\r\n"  # (one routed frame between them: read on at once, not awaited)
        data = mixed * (8 * 32768 // len(mixed))
        copies.clear()
        await _feed(conn, data, list(range(32768, len(data), 32768)))
        n = len(data) // len(mixed)
        assert len(conn.calls) == n and len(got) == n
        assert sum(copies) < 2 * len(data), (size, sum(copies) / len(data))
        assert not conn._ps.buf


class _Resetting(_Conn):
    """A connection whose processing of sid 9 resets the parser (as a reconnect does: a new buffer) and finds
    ``fresh`` in the new buffer."""

    fresh = b""

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any) -> None:
        await super()._process_msg(sid, subject, reply, data, headers)
        if sid == 9:
            self._ps.reset()
            self._ps.buf.extend(self.fresh)


async def test_after_a_reset_meanwhile_the_new_buffer_is_read_not_the_old_copy() -> None:
    """The copy read on after an awaited frame belongs to the old buffer: a reset meanwhile (a reconnect) is read from
    its new buffer, also when that holds as many bytes as were left in the old one."""
    rest = b"MSG old 1 3\r\nold\r\n"
    fresh = b"MSG new 1 3\r\nnew\r\n"
    assert len(rest) == len(fresh)
    data = b"MSG x 9 1\r\nx\r\n" + rest
    oracle = _Resetting()
    oracle.fresh = fresh
    await _feed(oracle, data, [])
    ours = _Resetting()
    ours.fresh = fresh
    routed: list[tuple[Any, ...]] = []
    assert direct(ours, 1, lambda subject, payload: routed.append(("msg", 1, subject, payload)))
    await _feed(ours, data, [])
    assert ours.calls == [c for c in oracle.calls if c[1] != 1] and ours.calls[0][1] == 9
    assert routed == [("msg", 1, c[2], c[4]) for c in oracle.calls if c[1] == 1] == [("msg", 1, b"new", b"new")]
    assert not ours._ps.buf and not oracle._ps.buf
