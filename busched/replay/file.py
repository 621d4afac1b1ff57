"""The record file of `busched record` (docs/bus.md, "History"): JSON lines, versioned.

The first line is the header ``{"format": "busched-record", "version": 1, "created": <epoch s>}``;
every other line is one stream message, ``{"k": "state"|"cycle", "q": <stream sequence>, "s":
<subject>, "d": <payload text>}`` (``"b": <base64>`` instead of ``d`` for a payload that is not UTF-8,
so a malformed message is kept byte for byte and refused by the replay as it was live).  State
messages are in state-stream order, cycle records in history-stream order; a reader takes both
kinds from anywhere in the file.
"""

from __future__ import annotations

import base64
import json
import time
from typing import IO, Any

__all__ = ["FORMAT", "VERSION", "write_header", "write_entries", "read_file"]

FORMAT = "busched-record"
VERSION = 1


def write_header(f: IO[str]) -> None:
    f.write(json.dumps({"format": FORMAT, "version": VERSION, "created": time.time()}) + "\n")


def write_entries(f: IO[str], kind: str, items: list[tuple[str, int, bytes]]) -> None:
    for subject, seq, data in items:
        e: dict[str, Any] = {"k": kind, "q": seq, "s": subject}
        try:
            e["d"] = data.decode()
        except UnicodeDecodeError:
            e["b"] = base64.b64encode(data).decode()
        f.write(json.dumps(e, separators=(",", ":"), ensure_ascii=False) + "\n")


def read_file(path: str) -> tuple[list[tuple[str, int, bytes]], list[bytes]]:
    """``(state messages in sequence order, cycle record payloads in order)``."""
    state: list[tuple[str, int, bytes]] = []
    cycles: list[tuple[int, bytes]] = []
    with open(path, encoding="utf-8") as f:
        head = json.loads(f.readline() or "{}")
        if head.get("format") != FORMAT:
            raise ValueError(f"{path}: not a busched record file")
        if head.get("version") != VERSION:
            raise ValueError(f"{path}: record format version {head.get('version')} (this busched reads {VERSION})")
        for line in f:
            if not line.strip():
                continue
            e = json.loads(line)
            data = e["d"].encode() if "d" in e else base64.b64decode(e["b"])
            if e["k"] == "state":
                state.append((e["s"], int(e["q"]), data))
            else:
                cycles.append((int(e["q"]), data))
    state.sort(key=lambda it: it[1])
    cycles.sort(key=lambda it: it[0])
    return state, [d for _, d in cycles]
