"""Plugins: one module each, whose only surface is a name and a constructor.

`PLUGINS` maps a plugin name to a builder taking the plugin's ``arguments``; the
builder hands the plugin class its arguments as one `Arguments` (the one reader
of argument values, busched.framework.arguments) that knows the class's
``reads_arguments``: reading a name the class does not declare raises.
Modules are imported when first used, so a broken optional plugin cannot stop
the others from loading.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from busched.framework.arguments import Arguments, declared_of
from busched.framework.registry import Registry

__all__ = ["PLUGINS"]

# plugin name -> "module:Class" inside busched.plugins
_ENTRIES: dict[str, str] = {
    "priority": "priority:PriorityPlugin",
    "gang": "gang:GangPlugin",
    "conformance": "conformance:ConformancePlugin",
    "drf": "drf:DrfPlugin",
    "proportion": "proportion:ProportionPlugin",
    "predicates": "predicates:PredicatesPlugin",
    "nodeorder": "nodeorder:NodeOrderPlugin",
    "binpack": "binpack:BinpackPlugin",
    "overcommit": "overcommit:OvercommitPlugin",
    "capacity": "capacity:CapacityPlugin",
    "nodegroup": "nodegroup:NodeGroupPlugin",
    "resourcequota": "resourcequota:ResourceQuotaPlugin",
    "resource-strategy-fit": "resource_strategy_fit:ResourceStrategyFitPlugin",
    "sla": "sla:SlaPlugin",
    "tdm": "tdm:TdmPlugin",
    "task-topology": "task_topology:TaskTopologyPlugin",
    "pdb": "pdb:PdbPlugin",
    "rescheduling": "rescheduling:ReschedulingPlugin",
    "network-topology-aware": "network_topology_aware:NetworkTopologyAwarePlugin",
    "usage": "usage:UsagePlugin",
    "cdp": "cdp:CdpPlugin",
    "numa-aware": "numaaware:NumaAwarePlugin",
    "extender": "extender:ExtenderPlugin",
    "deviceshare": "deviceshare:DeviceSharePlugin",
    # the scheduler's own: the nodes that refused a task recently (the snapshot's `refused`)
    "busched-agent-feedback": "refused_nodes:RefusedNodesPlugin",
}


class _Lazy:
    """Builds the plugin class named by ``"module:Class"``, importing the module on first use."""

    def __init__(self, name: str, spec: str) -> None:
        self.name = name
        self.module, self.cls = spec.split(":")

    def plugin_class(self) -> Any:
        return getattr(importlib.import_module(f"busched.plugins.{self.module}"), self.cls)

    @property
    def reads_clock(self) -> bool:
        return bool(getattr(self.plugin_class(), "reads_clock", False))

    @property
    def reads_arguments(self) -> tuple[str, ...] | None:
        return declared_of(self.plugin_class())

    def __call__(self, arguments: Mapping[str, Any]) -> Any:
        cls = self.plugin_class()
        return cls(Arguments(arguments, declared=declared_of(cls), owner=f"plugin {self.name}"))


PLUGINS = Registry("plugin", {name: _Lazy(name, spec) for name, spec in _ENTRIES.items()})
