"""Plugins: one module each, whose only surface is a name and a constructor.

`PLUGINS` maps a plugin name to a builder taking the plugin's ``arguments``.
Modules are imported when first used, so a broken optional plugin cannot stop
the others from loading.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

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
    # the scheduler's own: the nodes that refused a task recently (the snapshot's `refused`)
    "busched-agent-feedback": "refused_nodes:RefusedNodesPlugin",
}


def _lazy(spec: str) -> Callable[[Mapping[str, Any]], Any]:
    mod, cls = spec.split(":")

    def build(arguments: Mapping[str, Any]) -> Any:
        m = importlib.import_module(f"busched.plugins.{mod}")
        return getattr(m, cls)(arguments)

    return build


PLUGINS = Registry("plugin", {name: _lazy(spec) for name, spec in _ENTRIES.items()})
