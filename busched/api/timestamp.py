"""Times on the wire -> float epoch seconds in the domain.

Specs carry a time (a scenario's ``now``, an object's ``created``, a task's
``startTime``, a node usage's ``time``) as an RFC 3339 string, as Kubernetes
writes ``metav1.Time`` (``2026-03-01T10:30:00Z``, fractional seconds and numeric
offsets allowed), or as epoch seconds (an int or a float).  Absent is the epoch:
every object without a creation time has the same one, so identity decides.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

__all__ = ["TimeError", "Timestamp", "parse_time"]

Timestamp = str | int | float  # the wire type of a time field

# RFC 3339's date-time (Go's time.RFC3339 parser accepts the same): date, "T" (or "t"/" "), time,
# optional fraction, then "Z" or a numeric offset.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


class TimeError(ValueError):
    """A time that is neither RFC 3339 nor epoch seconds; the message names the field."""


def parse_time(v: Timestamp | None, where: str = "time") -> float:
    """Epoch seconds of an RFC 3339 string or a number; 0.0 (the epoch) for None."""
    if v is None:
        return 0.0
    if isinstance(v, bool):
        raise TimeError(f"{where}: expected an RFC 3339 time or epoch seconds, got {v!r}")
    if isinstance(v, (int, float)):
        if not math.isfinite(v):
            raise TimeError(f"{where}: expected a finite number of seconds, got {v!r}")
        return float(v)
    if not isinstance(v, str) or not _RFC3339.fullmatch(v):
        raise TimeError(f"{where}: expected an RFC 3339 time such as '2026-03-01T10:30:00Z' "
                        f"or epoch seconds, got {v!r}")
    text = v.replace("t", "T").replace(" ", "T")
    if text[-1] in "Zz":
        text = text[:-1] + "+00:00"
    frac = ""
    m = re.search(r"\.(\d+)", text)
    if m:  # datetime takes at most microseconds; keep the rest as a fraction of its own
        frac, text = m.group(1), text[:m.start()] + text[m.end():]
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as e:
        raise TimeError(f"{where}: {v!r}: {e}") from None
    return dt.timestamp() + (int(frac) / 10 ** len(frac) if frac else 0.0)
