"""resource-strategy-fit: per-resource LeastAllocated / MostAllocated node scoring, plus sra and proportional.

Node score = strategy score + sra score, where

* strategy: for each resource the task requests that has a strategy (an exact
  name, else the longest matching ``prefix/*`` pattern), LeastAllocated scores
  ``(allocatable - used - request) * weight / allocatable`` and MostAllocated
  ``(used + request) * weight / allocatable``; the weighted mean times 100
  times ``resourceStrategyFitWeight`` (default 10).  A pod may choose its own
  strategy with the annotations ``volcano.sh/resource-strategy-scoring-type``
  and ``volcano.sh/resource-strategy-weight`` (JSON ``{"cpu": 1}``).  A node
  where a scored resource would overflow scores 0.
* sra (scarce resource avoidance): a node lacking something the task requests
  scores 0; otherwise ``(1 - weight of the listed scarce resources the node
  has / their total weight) * 100 * sra.weight``, steering tasks that do not
  need scarce resources away from nodes that have them.

The proportional policy adds a predicate: a task that requests none of the
listed resources may not take a node's cpu/memory below what the node's idle
scarce resources need (``idle.cpu - request.cpu >= idle.gpu * rate.cpu`` and
the same for memory, in MB per unit).

Arguments::

    resourceStrategyFitWeight: 10
    resources:
      nvidia.com/gpu: {type: MostAllocated, weight: 2}
      cpu: {type: LeastAllocated, weight: 1}
    sra: {enable: true, resources: "nvidia.com/gpu", weight: 10, resourceWeight: {nvidia.com/gpu: 1}}
    proportional: {enable: true, resources: "nvidia.com/gpu",
                   resourceProportion: {nvidia.com/gpu.cpu: 4, nvidia.com/gpu.memory: 8}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from busched.api.fit import Code
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo
from busched.framework import points
from busched.framework.arguments import (
    ArgumentError,
    Arguments,
    decode_bool,
    decode_field,
    decode_float,
    decode_int,
    decode_mapping,
    decode_str,
)
from busched.framework.decision import fit_error
from busched.framework.session import Session

__all__ = ["ResourceStrategyFitPlugin", "StrategyConfig", "SraConfig", "parse_arguments", "strategy_score",
           "sra_score", "check_proportional", "ArgumentError"]

PLUGIN = "resource-strategy-fit"
MAX_NODE_SCORE = 100
DEFAULT_WEIGHT = 10
LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
SCORING_TYPE_ANNOTATION = "volcano.sh/resource-strategy-scoring-type"
SCORING_WEIGHT_ANNOTATION = "volcano.sh/resource-strategy-weight"


@dataclass(frozen=True)
class ResourceStrategy:
    type: str
    weight: int


@dataclass
class StrategyConfig:
    weight: int = DEFAULT_WEIGHT
    resources: dict[str, ResourceStrategy] = field(default_factory=dict)


@dataclass
class SraConfig:
    weight: int = 0
    resources: dict[str, int] = field(default_factory=dict)
    weight_sum: int = 0


def _valid_pattern(p: str) -> bool:
    """Only one trailing ``*`` after a non-empty prefix is a valid wildcard."""
    if "*" not in p:
        return True
    return p != "*" and p.endswith("*") and p.count("*") == 1


def _split_names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def parse_arguments(args: Mapping[str, Any]) -> tuple[StrategyConfig, SraConfig, dict[str, tuple[float, float]] | None]:
    """The plugin's arguments, decoded strictly (a value of the wrong type is an `ArgumentError` naming it)."""
    try:
        return _parse(args)
    except ArgumentError as e:
        raise ArgumentError(f"{PLUGIN}: {e}") from None


def _parse(args: Mapping[str, Any]) -> tuple[StrategyConfig, SraConfig, dict[str, tuple[float, float]] | None]:
    cfg = StrategyConfig()
    if "resourceStrategyFitWeight" in args:
        w = decode_int(args["resourceStrategyFitWeight"], "resourceStrategyFitWeight")
        cfg.weight = DEFAULT_WEIGHT if w < 0 else w
    raw = decode_mapping(args.get("resources"), "resources")
    if not raw:
        raw = {"cpu": {"type": LEAST_ALLOCATED, "weight": 1}, "memory": {"type": LEAST_ALLOCATED, "weight": 1}}
    for name, spec in raw.items():
        name = str(name)
        spec = decode_mapping(spec, f"resources.{name}")
        typ = decode_str(decode_field(spec, "type"), f"resources.{name}.type")
        weight = decode_int(decode_field(spec, "weight"), f"resources.{name}.weight")
        if not _valid_pattern(name):
            continue
        if weight <= 0:
            weight = 1
        if typ not in (LEAST_ALLOCATED, MOST_ALLOCATED):
            typ = LEAST_ALLOCATED
        cfg.resources[name] = ResourceStrategy(typ, weight)

    sra = SraConfig()
    s = decode_mapping(args.get("sra"), "sra")
    if decode_bool(decode_field(s, "enable"), "sra.enable"):
        sra.weight = decode_int(decode_field(s, "weight"), "sra.weight")
        rw = {str(k): decode_int(v, f"sra.resourceWeight.{k}")
              for k, v in decode_mapping(decode_field(s, "resourceWeight"), "sra.resourceWeight").items()}
        for name in _split_names(decode_str(decode_field(s, "resources"), "sra.resources")):
            w = rw.get(name, 1)
            if w < 0:
                w = 1
            sra.resources[name] = w
        sra.weight_sum = sum(sra.resources.values())

    proportional: dict[str, tuple[float, float]] | None = None
    p = decode_mapping(args.get("proportional"), "proportional")
    if decode_bool(decode_field(p, "enable"), "proportional.enable"):
        proportional = {}
        given = decode_mapping(decode_field(p, "resourceProportion"), "proportional.resourceProportion")
        rates = {str(k): decode_float(v, f"proportional.resourceProportion.{k}") for k, v in given.items()}
        for name in _split_names(decode_str(decode_field(p, "resources"), "proportional.resources")):
            pair = []
            for dim in ("cpu", "memory"):
                r = rates.get(f"{name}.{dim}", 1.0)
                pair.append(1.0 if r < 0 else r)
            proportional[name] = (pair[0], pair[1])
    return cfg, sra, proportional


# -- scoring -----------------------------------------------------------------------------------
def _find_strategy(name: str, resources: Mapping[str, ResourceStrategy]) -> ResourceStrategy | None:
    """An exact entry wins; otherwise the wildcard pattern with the longest matching prefix."""
    if name in resources:
        return resources[name]
    best, best_len = None, 0
    for key, rs in resources.items():
        if "*" in key:
            prefix = key[:-1]
            if name.startswith(prefix) and len(prefix) > best_len:
                best, best_len = rs, len(prefix)
    return best


def _resource_score(typ: str, request: float, used: float, capacity: float, weight: int) -> float | None:
    """None when the node cannot hold the request; 0 for an unknown strategy."""
    if typ not in (MOST_ALLOCATED, LEAST_ALLOCATED):
        return 0.0
    if weight == 0 or capacity == 0:
        return 0.0
    final = request + used
    if final > capacity:
        return None
    if typ == MOST_ALLOCATED:
        return final * weight / capacity
    return (capacity - final) * weight / capacity


def _pod_level(task: TaskInfo) -> tuple[str, dict[str, Any] | None] | None:
    """The pod's own strategy: ("", None) when none; None when its annotations are unusable."""
    typ = task.annotations.get(SCORING_TYPE_ANNOTATION, "")
    if not typ:
        return "", None
    text = task.annotations.get(SCORING_WEIGHT_ANNOTATION, "")
    if not text:
        return None
    try:
        weights = json.loads(text)
    except ValueError:
        return None
    if weights is None:
        return typ, {}
    if not isinstance(weights, dict) or any(isinstance(v, bool) or not isinstance(v, int) for v in weights.values()):
        return None
    return typ, weights


def strategy_score(task: TaskInfo, node: NodeInfo, cfg: StrategyConfig) -> float:
    pod = _pod_level(task)
    if pod is None:
        return 0.0
    pod_type, pod_weights = pod
    score = 0.0
    weight_sum = 0
    req = task.resreq
    for rn in req.names():
        if pod_type:
            assert pod_weights is not None
            if rn not in pod_weights:
                continue
            typ, weight = pod_type, pod_weights[rn]
        else:
            rs = _find_strategy(rn, cfg.resources)
            if rs is None:
                continue
            typ, weight = rs.type, rs.weight
        s = _resource_score(typ, req.get(rn), node.used.get(rn), node.allocatable.get(rn), weight)
        if s is None:
            return 0.0
        score += s
        weight_sum += weight
    if weight_sum > 0:
        score /= weight_sum
    return score * (float(MAX_NODE_SCORE) * float(cfg.weight))


def sra_score(task: TaskInfo, node: NodeInfo, sra: SraConfig) -> float:
    alloc = node.allocatable
    for rn in task.resreq.names():
        if alloc.get(rn) == 0:
            return 0.0
    score = float(sum(w for rn, w in sra.resources.items() if alloc.get(rn) > 0))
    if sra.weight_sum > 0:
        score = 1.0 - score / sra.weight_sum
    return score * float(MAX_NODE_SCORE * sra.weight)


def check_proportional(task: TaskInfo, node: NodeInfo, proportional: Mapping[str, tuple[float, float]]) -> str | None:
    """The reason the node's cpu/memory would be left short for its scarce resources, or None."""
    for rn in proportional:
        if task.resreq.scalars.get(rn, 0.0) > 0:
            return None
    idle, req = node.idle, task.resreq
    for rn, (cpu_rate, mem_rate) in proportional.items():
        if rn in idle.scalars:
            value = idle.scalars[rn]
            if idle.cpu - req.cpu < value * cpu_rate or idle.memory - req.memory < value * mem_rate * 1000 * 1000:
                return f"proportional of resource {rn} check failed"
    return None


class ResourceStrategyFitPlugin:
    name = PLUGIN
    reads_arguments = ("resourceStrategyFitWeight", "resources", "sra", "proportional")
    reads_clock = False

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        self.arguments = Arguments.of(arguments)
        self.strategy, self.sra, self.proportional = parse_arguments(self.arguments)

    def on_session_open(self, ssn: Session) -> None:
        if self.proportional is not None:
            ssn.add_fn(points.PREDICATE, self.name, self.predicate)
        if self.strategy.weight > 0 or self.sra.weight > 0:
            ssn.add_fn(points.NODE_ORDER, self.name, self.score)

    def predicate(self, task: TaskInfo, node: NodeInfo) -> None:
        assert self.proportional is not None
        reason = check_proportional(task, node, self.proportional)
        if reason is not None:
            raise fit_error(task, node, reason, self.name, Code.UnschedulableAndUnresolvable)

    def score(self, task: TaskInfo, node: NodeInfo) -> float:
        s = 0.0
        if self.strategy.weight > 0:
            s += strategy_score(task, node, self.strategy)
        if self.sra.weight > 0:
            s += sra_score(task, node, self.sra)
        return s

    def on_session_close(self, ssn: Session) -> None:
        pass
