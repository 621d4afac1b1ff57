"""Go duration strings ("1h2m3s4ms5us6ns", "3m", "1.5h") to seconds."""

from __future__ import annotations

import re

__all__ = ["parse_duration", "DurationError"]


class DurationError(ValueError):
    pass


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    s = text.strip()
    sign = 1.0
    if s[:1] in "+-" and s:
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise DurationError(f"invalid duration {text!r}")
    total, pos = 0.0, 0
    for m in _PART.finditer(s):
        if m.start() != pos:
            raise DurationError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise DurationError(f"invalid duration {text!r}")
    return sign * total
