"""Scheduler configuration in the shape of Volcano's ``volcano-scheduler.conf``.

::

    actions: "enqueue, allocate, backfill"
    tiers:
    - plugins:
      - name: priority
      - name: gang
        enablePreemptable: false
    configurations:
    - name: allocate
      arguments: {predicateErrorCacheEnable: true}
    nodeSearch:                        # busched's place for vc-scheduler's flags
      minimumFeasibleNodes: 100        # --minimum-feasible-nodes
      minimumPercentageNodesToFind: 5  # --minimum-percentage-nodes-to-find
      percentageNodesToFind: 0         # --percentage-nodes-to-find (0: by cluster size; 100: every node)

A plugin switch that is absent means enabled (Volcano's ApplyPluginConfDefaults).
Errors name the offending field, e.g. ``tiers[0].plugins[1].enableJobOrder``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from busched.framework import points
from busched.framework.arguments import Arguments

__all__ = ["ConfigError", "SchedulerConfig", "PluginOption", "Tier", "SearchOptions", "SWITCHES", "parse_config",
           "load_config", "DEFAULT_CONFIG"]


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the field."""


# YAML switch name -> attribute name: built from the points table (busched.framework.points)
SWITCHES: dict[str, str] = points.SWITCHES

# Volcano's ApplyPluginConfDefaults leaves these nil when absent, and nil means disabled.
DEFAULT_OFF: frozenset[str] = frozenset({"hierarchy", "cluster_order"})


@dataclass(frozen=True)
class PluginOption:
    """One plugin in a tier: its name, arguments and which extension points are on."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    switches: frozenset[str] = frozenset(SWITCHES.values())  # attribute names that are enabled

    def enabled(self, point: str) -> bool:
        return point in self.switches


@dataclass(frozen=True)
class Tier:
    plugins: tuple[PluginOption, ...]


@dataclass(frozen=True)
class SearchOptions:
    """Feasible-node sampling: how many feasible nodes a task's search stops at (Volcano's
    ``CalculateNumOfFeasibleNodesToFind``).  A cluster of at most ``min_nodes_to_find`` nodes, or
    ``percentage_of_nodes_to_find`` >= 100, is searched exhaustively; otherwise the search stops at
    that percentage of the nodes (0: 50% less 1% per 125 nodes, at least
    ``min_percentage_of_nodes_to_find``), and never below ``min_nodes_to_find``."""

    min_nodes_to_find: int = 100
    min_percentage_of_nodes_to_find: int = 5
    percentage_of_nodes_to_find: int = 0  # 0: adaptive; >= 100: exhaustive


# nodeSearch key -> SearchOptions field
SEARCH_KEYS: dict[str, str] = {
    "minimumFeasibleNodes": "min_nodes_to_find",
    "minimumPercentageNodesToFind": "min_percentage_of_nodes_to_find",
    "percentageNodesToFind": "percentage_of_nodes_to_find",
}


@dataclass(frozen=True)
class SchedulerConfig:
    actions: tuple[str, ...]
    tiers: tuple[Tier, ...]
    configurations: dict[str, dict[str, Any]] = field(default_factory=dict)
    node_search: SearchOptions = SearchOptions()
    # what the argument check (busched.framework.argcheck) found odd but not wrong: arguments no plugin
    # or action reads; logged when the file is loaded and shown on the status page
    warnings: tuple[str, ...] = ()

    def action_arguments(self, action: str, declared: Iterable[str] | None = None) -> Arguments:
        """The action's ``configurations`` entry, read through `Arguments` (empty when there is none);
        ``declared``: the action's ``reads_arguments`` (a read of any other name raises)."""
        return Arguments(self.configurations.get(action), declared=declared, owner=f"action {action}")

    def has_action(self, name: str) -> bool:
        return name in self.actions


DEFAULT_CONFIG = """
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def _as_mapping(obj: Any, where: str) -> dict[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(obj).__name__}")
    return obj


def parse_config(raw: Any, *, known_actions: Iterable[str] | None = None,
                 known_plugins: Iterable[str] | None = None, where: str = "config") -> SchedulerConfig:
    """Validate a decoded YAML/JSON document into a `SchedulerConfig`."""
    doc = _as_mapping(raw, where)
    for k in doc:
        if k not in ("actions", "tiers", "configurations", "nodeSearch"):
            raise ConfigError(f"{where}.{k}: unknown field")
    actions_raw = doc.get("actions", "")
    if not isinstance(actions_raw, str):
        raise ConfigError(f"{where}.actions: expected a comma-separated string, got {type(actions_raw).__name__}")
    actions = tuple(a.strip() for a in actions_raw.split(",") if a.strip())
    if known_actions is not None:
        known = set(known_actions)
        for a in actions:
            if a not in known:
                raise ConfigError(f"{where}.actions: unknown action {a!r} (known: {', '.join(sorted(known))})")
    known_p = set(known_plugins) if known_plugins is not None else None
    tiers_raw = doc.get("tiers")
    tiers_raw = [] if tiers_raw is None else tiers_raw
    if not isinstance(tiers_raw, list):
        raise ConfigError(f"{where}.tiers: expected a list")
    tiers = []
    for ti, tier in enumerate(tiers_raw):
        tw = f"{where}.tiers[{ti}]"
        tier = _as_mapping(tier, tw)
        plugins_raw = tier.get("plugins") or []
        if not isinstance(plugins_raw, list):
            raise ConfigError(f"{tw}.plugins: expected a list")
        plugins = []
        for pi, p in enumerate(plugins_raw):
            pw = f"{tw}.plugins[{pi}]"
            p = _as_mapping(p, pw)
            name = p.get("name")
            if not isinstance(name, str) or not name:
                raise ConfigError(f"{pw}.name: required string")
            if known_p is not None and name not in known_p:
                raise ConfigError(f"{pw}.name: unknown plugin {name!r}")
            switches = set(SWITCHES.values()) - DEFAULT_OFF
            arguments: dict[str, Any] = {}
            for k, v in p.items():
                if k == "name":
                    continue
                if k == "arguments":
                    arguments = dict(_as_mapping(v, f"{pw}.arguments"))
                elif k in SWITCHES:
                    if not isinstance(v, bool):
                        raise ConfigError(f"{pw}.{k}: expected true or false, got {v!r}")
                    if not v:
                        switches.discard(SWITCHES[k])
                    else:
                        switches.add(SWITCHES[k])
                else:
                    raise ConfigError(f"{pw}.{k}: unknown field")
            plugins.append(PluginOption(name=name, arguments=arguments, switches=frozenset(switches)))
        tiers.append(Tier(plugins=tuple(plugins)))
    confs: dict[str, dict[str, Any]] = {}
    confs_raw = doc.get("configurations")
    confs_raw = [] if confs_raw is None else confs_raw
    if not isinstance(confs_raw, list):
        raise ConfigError(f"{where}.configurations: expected a list")
    for ci, c in enumerate(confs_raw):
        cw = f"{where}.configurations[{ci}]"
        c = _as_mapping(c, cw)
        name = c.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{cw}.name: required string")
        confs[name] = dict(_as_mapping(c.get("arguments"), f"{cw}.arguments"))
    return SchedulerConfig(actions=actions, tiers=tuple(tiers), configurations=confs,
                           node_search=_node_search(doc.get("nodeSearch"), f"{where}.nodeSearch"))


def _node_search(raw: Any, where: str) -> SearchOptions:
    doc = _as_mapping(raw, where)
    values: dict[str, int] = {}
    for k, v in doc.items():
        attr = SEARCH_KEYS.get(k)
        if attr is None:
            raise ConfigError(f"{where}.{k}: unknown field (known: {', '.join(SEARCH_KEYS)})")
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{where}.{k}: expected a whole number, got {v!r}")
        if v < (1 if k == "minimumFeasibleNodes" else 0):
            raise ConfigError(f"{where}.{k}: must be at least {1 if k == 'minimumFeasibleNodes' else 0}, got {v}")
        if k != "minimumFeasibleNodes" and v > 100:
            raise ConfigError(f"{where}.{k}: a percentage, at most 100, got {v}")
        values[attr] = v
    return SearchOptions(**values)


def load_config(text: str, **kw: Any) -> SchedulerConfig:
    try:
        raw = msgspec.yaml.decode(text.encode() if isinstance(text, str) else text)
    except msgspec.DecodeError as e:
        raise ConfigError(f"{kw.get('where', 'config')}: not valid YAML: {e}") from None
    return parse_config(raw, **kw)
