"""One reader for plugin and action arguments, with Volcano's ``framework.Arguments`` semantics.

Every plugin and action used to parse its own arguments, and the parsers
disagreed (``predicateErrorCacheEnable: "yes"`` turned the predicate error cache
on for allocate and backfill and left preempt and reclaim at their default).
Now all of them read through `Arguments`, which answers as Volcano does:

- a missing key gives the default, silently;
- a value of the wrong type gives the default and a warning (Volcano logs and
  keeps the default; it never stops for these getters);
- the configuration arrives as YAML, so a bool may be a real bool or a string:
  ``get_bool`` takes a bool or a string Go's ``strconv.ParseBool`` accepts
  (``"true"``, ``"1"``, ``"t"``, ``"F"``... but not ``"yes"``: that keeps the
  default, for every plugin and action alike); ``get_int`` takes only an
  integer (not a bool, a float or a string of digits: Volcano's ``GetInt``
  type-asserts ``int``); ``get_float`` an integer or a float (``GetFloat64``);
  ``get_str`` only a string.

``get_duration`` (a Go duration string such as ``"5m"``) and ``get_mapping``
(Volcano's ``GetArguments``: a nested mapping with string keys) cover what the
plugins need besides.

A plugin whose arguments are a structured document (resource-strategy-fit)
decodes them strictly instead, as Volcano's ``framework.Get[T]`` does with
mapstructure: the ``decode_*`` functions take a value (None: the zero value)
and raise `ArgumentError` naming the field when its type is wrong (Volcano
stops the scheduler on these).  Build one with ``Arguments.of(mapping)``: it is the
mapping itself, so plain ``args["key"]`` and iteration still work.

Declared arguments.  Every plugin and action names the arguments it reads in a
class attribute ``reads_arguments`` (exact names, or a prefix ending in ``*``
for a family such as ``binpack.resources.*``); the configuration check
(busched.framework.argcheck) reads it to tell an argument we use from one we
ignore.  So that the declaration cannot drift from the code, the registries hand
a plugin (and the session an action) an `Arguments` that knows the declaration:
a getter, ``args[key]``, ``args.get(key)`` or ``key in args`` asking for an
undeclared name raises `UndeclaredArgument` at once -- in the first test that
runs that line (the test suite sets `STRICT`) -- and every key asked for is
recorded in ``asked``.  Outside the tests such a read is logged as an error once
and answered: a declaration missed on a rare path must not fail a live cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from busched.api.duration import DurationError, parse_duration
from busched.api.task import parse_bool

__all__ = ["Arguments", "ArgumentError", "UndeclaredArgument", "declares", "declared_of", "decode_int",
           "decode_float", "decode_str", "decode_bool",
           "decode_mapping", "decode_field"]

log = logging.getLogger(__name__)


STRICT = False  # raise on an undeclared read (tests/conftest.py sets it); else log it once and answer
_logged: set[tuple[str, str]] = set()


class UndeclaredArgument(RuntimeError):  # noqa: N818 - a programming error, named for what it is
    """Code read an argument its plugin or action does not list in ``reads_arguments``."""


def declares(declared: Iterable[str], key: str) -> bool:
    """Whether ``declared`` (names, or prefixes ending in ``*``) covers the argument ``key``."""
    return any(d == key or (d.endswith("*") and key.startswith(d[:-1])) for d in declared)


def declared_of(obj: Any) -> tuple[str, ...] | None:
    """The ``reads_arguments`` of a plugin or action class (or instance); None when it has none."""
    names = getattr(obj, "reads_arguments", None)
    return None if names is None else tuple(names)


class Arguments(Mapping[str, Any]):
    """A plugin's or action's ``arguments`` mapping with typed getters (read once, at construction).

    ``declared`` (the owner's ``reads_arguments``; None: not checked) and ``owner`` (its name, for
    the error) make every read of an undeclared name raise `UndeclaredArgument`."""

    __slots__ = ("_values", "declared", "owner", "asked")

    def __init__(self, values: Mapping[str, Any] | None = None, *, declared: Iterable[str] | None = None,
                 owner: str = "") -> None:
        self._values: dict[str, Any] = dict(values or {})
        self.declared: tuple[str, ...] | None = None if declared is None else tuple(declared)
        self.owner = owner
        self.asked: set[str] = set()

    @classmethod
    def of(cls, values: Mapping[str, Any] | None) -> Arguments:
        """``values`` as Arguments (the same object when it already is one)."""
        return values if isinstance(values, Arguments) else cls(values)

    def _ask(self, key: str) -> None:
        self.asked.add(key)
        if self.declared is not None and not declares(self.declared, key):
            message = (f"{self.owner or 'this plugin'} reads the argument {key!r} but does not "
                       f"declare it in reads_arguments {sorted(self.declared)}")
            if STRICT:
                raise UndeclaredArgument(message)
            if (self.owner, key) not in _logged:
                _logged.add((self.owner, key))
                log.error("%s (a busched bug: the argument is read, the configuration check does not know it)",
                          message)

    # -- the mapping --------------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        self._ask(key)
        return self._values[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._ask(key)
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Arguments({self._values!r})"

    def _refuse(self, key: str, kind: str) -> None:
        log.warning("Could not parse argument: %r for key %s to %s", self._values[key], key, kind)

    # -- the getters --------------------------------------------------------------------------------
    def get_bool(self, key: str, default: bool) -> bool:
        self._ask(key)
        if key not in self._values:
            return default
        v = self._values[key]
        if isinstance(v, bool):
            return v
        if isinstance(v, str):
            parsed = parse_bool(v)
            if parsed is not None:
                return parsed
        self._refuse(key, "bool")
        return default

    def get_int(self, key: str, default: int) -> int:
        self._ask(key)
        if key not in self._values:
            return default
        v = self._values[key]
        if isinstance(v, int) and not isinstance(v, bool):  # a YAML bool is no integer in Go
            return v
        self._refuse(key, "int")
        return default

    def get_float(self, key: str, default: float) -> float:
        self._ask(key)
        if key not in self._values:
            return default
        v = self._values[key]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        self._refuse(key, "float64")
        return default

    def get_str(self, key: str, default: str) -> str:
        self._ask(key)
        if key not in self._values:
            return default
        v = self._values[key]
        if isinstance(v, str):
            return v
        self._refuse(key, "string")
        return default

    def get_duration(self, key: str, default: float) -> float:
        """Seconds from a Go duration string (``"1m30s"``); anything else keeps the default."""
        self._ask(key)
        if key not in self._values:
            return default
        v = self._values[key]
        if isinstance(v, str):
            try:
                return parse_duration(v)
            except DurationError:
                pass
        self._refuse(key, "duration")
        return default

    def get_mapping(self, key: str) -> Arguments | None:
        """A nested mapping with string keys (Volcano's ``GetArguments``), or None."""
        self._ask(key)
        if key not in self._values:
            return None
        v = self._values[key]
        if isinstance(v, Mapping) and all(isinstance(k, str) for k in v):
            return Arguments.of(v)
        self._refuse(key, "Arguments")
        return None


# -- strict decoding (Volcano's framework.Get[T], mapstructure) -----------------------------------------
class ArgumentError(ValueError):
    """An argument that cannot be decoded into the type it must have."""


def decode_int(v: Any, where: str) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ArgumentError(f"{where}: expected an integer, got {v!r}")
    return int(v)


def decode_float(v: Any, where: str) -> float:
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ArgumentError(f"{where}: expected a number, got {v!r}")
    return float(v)


def decode_str(v: Any, where: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ArgumentError(f"{where}: expected a string, got {v!r}")
    return v


def decode_bool(v: Any, where: str) -> bool:
    if v is None:
        return False
    if not isinstance(v, bool):
        raise ArgumentError(f"{where}: expected true or false, got {v!r}")
    return v


def decode_mapping(v: Any, where: str) -> Mapping[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise ArgumentError(f"{where}: expected a mapping, got {v!r}")
    return v


def decode_field(m: Mapping[str, Any], name: str) -> Any:
    """A struct field's value: the key itself, else a key equal to it ignoring case (as mapstructure)."""
    if name in m:
        return m[name]
    low = name.lower()
    for k, v in m.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None
