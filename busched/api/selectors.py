"""Label selectors as kubectl's ``-l`` writes them: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``,
``k in (a,b)``, ``k notin (a,b)``, joined by commas (AND).

The text parses into the requirements `busched.api.k8s` already matches (``(key, operator, values)``
with In, NotIn, Exists, DoesNotExist), so ``busched apply --prune -l`` selects objects by the same rule
as a PodDisruptionBudget's selector: ``k!=v`` and ``notin`` also match an object without the key, as
in Kubernetes.  An empty text selects everything (kubectl's ``-l ''``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from busched.api import k8s

__all__ = ["SelectorError", "parse_selector", "matches"]

# a label key (optional DNS prefix "/" name) and a label value, as Kubernetes validates them
_KEY = r"(?:[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
_SET = re.compile(rf"\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*")
_EQ = re.compile(rf"\s*(?P<key>{_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>{_VALUE})\s*")
_EXISTS = re.compile(rf"\s*(?P<not>!?)\s*(?P<key>{_KEY})\s*")
_VALUE_RE = re.compile(_VALUE)


class SelectorError(ValueError):
    """A selector kubectl would refuse; the message names the part."""


def _split(text: str) -> list[str]:
    """The comma-separated requirements, commas inside ``( )`` kept."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_selector(text: str) -> tuple[k8s.Requirement, ...]:
    """The requirements of a selector text; raises `SelectorError`."""
    if not text.strip():
        return ()
    out: list[k8s.Requirement] = []
    for part in _split(text):
        if m := _SET.fullmatch(part):
            values = tuple(v.strip() for v in m["values"].split(","))
            if not all(_VALUE_RE.fullmatch(v) for v in values) or values == ("",):
                raise SelectorError(f"invalid values in {part.strip()!r}")
            out.append((m["key"], "In" if m["op"] == "in" else "NotIn", values))
        elif m := _EQ.fullmatch(part):
            out.append((m["key"], "NotIn" if m["op"] == "!=" else "In", (m["value"],)))
        elif m := _EXISTS.fullmatch(part):
            out.append((m["key"], "DoesNotExist" if m["not"] else "Exists", ()))
        else:
            raise SelectorError(f"cannot parse {part.strip()!r} (k=v, k!=v, k, !k, k in (a,b), k notin (a,b))")
    return tuple(out)


def matches(selector: tuple[k8s.Requirement, ...], labels: Mapping[str, str]) -> bool:
    return k8s.selector_matches(selector, labels)
