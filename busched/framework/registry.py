"""Plugin and action registries: plain values mapping a name to a constructor.

A plugin is anything with ``name`` and ``on_session_open(ssn)`` (and optionally
``on_session_close(ssn)``), built from its ``arguments``.  It declares what it
needs besides as class attributes: ``reads_clock = True`` when its decisions
depend on the session's clock or on state kept from cycle to cycle (so a cycle
is never skipped as quiet while it is configured).  The registry answers that
from the builder (`Registry.reads_clock`), so no list of plugin names is kept
anywhere else.  Likewise ``reads_arguments``: the names of the arguments it
reads (busched.framework.arguments explains the check that keeps it true).
An action has ``name`` and ``execute(ssn)``.  Registries refuse
duplicate names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from busched.framework.arguments import declared_of

__all__ = ["Plugin", "Action", "Registry", "PluginBuilder"]


class Plugin(Protocol):
    name: str
    reads_clock: bool

    def on_session_open(self, ssn: Any) -> None: ...


class Action(Protocol):
    name: str

    def execute(self, ssn: Any) -> None: ...


PluginBuilder = Callable[[Mapping[str, Any]], Plugin]


class Registry(Mapping[str, Callable[..., Any]]):
    def __init__(self, kind: str, entries: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, Callable[..., Any]] = {}
        for k, v in (entries or {}).items():
            self.register(k, v)

    def register(self, name: str, builder: Callable[..., Any]) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = builder

    def with_entries(self, entries: Mapping[str, Callable[..., Any]]) -> Registry:
        """A new registry with more entries (the scenario runner adds its test-only plugins)."""
        r = Registry(self.kind, self._entries)
        for k, v in entries.items():
            r.register(k, v)
        return r

    def reads_arguments(self, name: str) -> tuple[str, ...] | None:
        """The argument names the plugin or action ``name`` declares it reads (``reads_arguments`` on
        its builder or the class it builds; busched.framework.arguments), None when it declares none."""
        return declared_of(self._entries[name])

    def reads_clock(self, name: str) -> bool:
        """Whether the plugin ``name`` declares ``reads_clock`` (its builder, or the class it builds, says so)."""
        return bool(getattr(self._entries[name], "reads_clock", False))

    def __getitem__(self, name: str) -> Callable[..., Any]:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
