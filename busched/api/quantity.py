"""Kubernetes quantity strings parsed exactly.

A quantity is ``<sign><digits>[.<digits>][<suffix>]`` where the suffix is a
binary SI suffix (Ki Mi Gi Ti Pi Ei), a decimal SI suffix (n u m "" k M G T P
E) or a decimal exponent (``e3``/``E3``).  We keep the value as a `Fraction`
so that ``4G`` vs ``4Gi`` and ``"1.5"`` vs ``"1500m"`` compare exactly, then
round up the way Kubernetes' ``Value()`` and ``MilliValue()`` do.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

__all__ = ["QuantityError", "parse_quantity", "value", "milli_value", "binary_units"]


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_RE = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?\d+))?$")


def parse_quantity(raw: str | int | float) -> Fraction:
    """Return the exact value of a quantity (``"500m"`` -> 1/2)."""
    if isinstance(raw, bool):
        raise QuantityError(f"quantity must be a string or number, not {raw!r}")
    if isinstance(raw, int):
        return Fraction(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise QuantityError(f"quantity {raw!r} is not finite")
        # Through the decimal text, so 0.1 stays one tenth.
        return parse_quantity(repr(raw))
    if not isinstance(raw, str):
        raise QuantityError(f"quantity must be a string or number, not {type(raw).__name__}")
    text = raw.strip()
    if len(text) > 64:  # (a longer number is no quantity; parsing one costs time)
        raise QuantityError(f"quantity of {len(text)} characters (at most 64)")
    m = _RE.match(text)
    if not m:
        raise QuantityError(f"invalid quantity {raw!r}")
    sign, number, suffix, exponent = m.groups()
    v = Fraction(number)
    if exponent is not None:
        if len(exponent) > 4 or abs(int(exponent)) > 64:  # (10^1e9 would take the process)
            raise QuantityError(f"quantity {raw!r}: exponent out of range (at most 64)")
        v *= Fraction(10) ** int(exponent)
    elif suffix in _BINARY:
        v *= _BINARY[suffix]
    else:
        v *= _DECIMAL[suffix or ""]
    return -v if sign == "-" else v


def value(raw: str | int | float) -> int:
    """Kubernetes ``Quantity.Value()``: the value rounded up to an integer."""
    if isinstance(raw, str):
        return _value_of_text(raw)
    return math.ceil(parse_quantity(raw))


def milli_value(raw: str | int | float) -> int:
    """Kubernetes ``Quantity.MilliValue()``: thousandths, rounded up."""
    if isinstance(raw, str):
        return _milli_value_of_text(raw)
    return math.ceil(parse_quantity(raw) * 1000)


# A cluster repeats a handful of quantity strings ("1", "4Gi") across many objects: parse each once.
@functools.lru_cache(maxsize=4096)
def _value_of_text(raw: str) -> int:
    return math.ceil(parse_quantity(raw))


@functools.lru_cache(maxsize=4096)
def _milli_value_of_text(raw: str) -> int:
    return math.ceil(parse_quantity(raw) * 1000)


def binary_units(text: str) -> str:
    """A count of bytes (what the scheduler computes, e.g. a node's used memory) in binary units, as the
    quantities people write ("4Gi"); anything else (a quantity as written, "8Gi") as it is.  For display."""
    if not text.isdigit():
        return text
    n = float(text)
    for unit in ("", "Ki", "Mi", "Gi", "Ti", "Pi"):
        if n < 1024 or unit == "Pi":
            return f"{n:.0f}{unit}" if n == int(n) else f"{n:.1f}{unit}"
        n /= 1024
    return text  # (not reached)
