"""The memos of parsed resource lists that spec conversion (`busched.api.build`) keeps.

A big cluster has a few request shapes for many tasks, and a catch-up or a cold snapshot converts
every one of them: parsing quantities is most of a task's conversion.  These bounded maps, keyed by a
resource list's items (`_memo_key`), let `build.resources` and `build._task_requests` parse each shape
once.  They live apart from the conversions so that `build` reads as the spec -> domain rules alone.
"""

from __future__ import annotations

from typing import Any

from busched.api.resource import Resource
from busched.api.shared import SharedResource

__all__: list[str] = []


# Parsed resource lists by their items: a big cluster has a few request shapes for many tasks, and a
# catch-up or a cold snapshot converts every one of them (parsing quantities is most of a task's
# conversion).  Each caller gets its own copy; bounded, it starts over when full.
_PARSED: dict[tuple[Any, ...], Resource] = {}
_PARSED_MAX = 4096


def _memo_key(rl: dict[str, Any]) -> tuple[Any, ...]:
    """A resource list's key in the memos here.  The items alone when every value is a string (as
    specs give them; a string never equals a number), else with the values' types (1, 1.0 and
    True are equal keys).  Hashing it raises TypeError for an unhashable value."""
    items = tuple(rl.items())
    for _, v in items:
        if type(v) is not str:
            return items, tuple(type(v) for _, v in items)
    return items


def _remember(memo: dict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any) -> None:
    if len(memo) >= _PARSED_MAX:
        memo.clear()
    memo[key] = value


# Requests as a task converts them, by `_memo_key`: (the request with its pod slot, best effort?).
# Every task with the same requests holds the same one (busched.api.shared).
_REQUESTS: dict[tuple[Any, ...], tuple[SharedResource, bool]] = {}
