"""The Kubernetes and Volcano shapes inside object specs, typed: affinity, tolerations, taints,
topology spread constraints, a job's network topology, sub-group policies and conditions.

They exist to refuse a wrong shape while a message or file decodes (with the path of the field
that is wrong), and to bound every size (`busched.api.limits`).  The domain code
(`busched.api.k8s`, `busched.api.subjob`, the plugins) keeps reading plain dicts: `busched.api.build`
turns these into dicts once per conversion with `plain` / `plain_list` (`msgspec.to_builtins`,
camelCase keys as written).

Every default is what an absent key means to the code that reads the dict (``None``, ``""``,
``[]``), and the structs omit defaults, so the dicts carry exactly the keys a writer gave with a
non-default value: an absent ``labelSelector`` stays absent (selects nothing) while ``{}`` stays
``{}`` (selects everything), as Kubernetes distinguishes them.

Operators and effects are the `Literal`s Kubernetes defines.  Semantic rules that Kubernetes'
API validation would add (``In`` needs values, ``Exists`` takes none, ...) are left to the
matching code, which treats such a term as matching nothing, as the kube-scheduler plugins do.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from busched.api.limits import MAX_ITEMS, MAX_MESSAGE, LabelKey, Labels, NonNegInt32, PosInt32, ShortStr, Strings

__all__ = ["LabelSelectorRequirement", "LabelSelector", "NodeSelectorRequirement", "NodeSelectorTerm", "NodeSelector",
           "PreferredSchedulingTerm", "NodeAffinity", "PodAffinityTerm", "WeightedPodAffinityTerm", "PodAffinity",
           "Affinity", "Toleration", "Taint", "TopologySpreadConstraint", "NodeGroupAffinity", "QueueAffinity",
           "NetworkTopology", "SubGroupPolicy", "JobCondition", "plain", "plain_list"]

Weight = Annotated[int, msgspec.Meta(ge=0, le=100)]  # preferred terms: 1..100 in Kubernetes; 0 is skipped


def _items(t: Any) -> Any:
    return Annotated[list[t], msgspec.Meta(max_length=MAX_ITEMS)]


class _K8s(msgspec.Struct, rename="camel", forbid_unknown_fields=True, omit_defaults=True):
    pass


# -- label selectors (metav1.LabelSelector) ------------------------------------------------------------
class LabelSelectorRequirement(_K8s):
    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: Strings = []


class LabelSelector(_K8s):
    match_labels: Labels = {}
    match_expressions: _items(LabelSelectorRequirement) = []  # type: ignore[valid-type]


# -- node affinity (v1.NodeAffinity) ------------------------------------------------------------------
class NodeSelectorRequirement(_K8s):
    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: Strings = []


class NodeSelectorTerm(_K8s):
    match_expressions: _items(NodeSelectorRequirement) = []  # type: ignore[valid-type]
    match_fields: _items(NodeSelectorRequirement) = []  # type: ignore[valid-type]


class NodeSelector(_K8s):
    node_selector_terms: _items(NodeSelectorTerm) = []  # type: ignore[valid-type]


class PreferredSchedulingTerm(_K8s):
    weight: Weight
    preference: NodeSelectorTerm


class NodeAffinity(_K8s):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: _items(PreferredSchedulingTerm) = []  # type: ignore[valid-type]


# -- pod (anti-)affinity (v1.PodAffinity, v1.PodAntiAffinity) ------------------------------------------
class PodAffinityTerm(_K8s):
    label_selector: LabelSelector | None = None
    namespaces: Strings = []
    topology_key: ShortStr = ""
    namespace_selector: LabelSelector | None = None
    match_label_keys: Strings = []
    mismatch_label_keys: Strings = []


class WeightedPodAffinityTerm(_K8s):
    weight: Weight
    pod_affinity_term: PodAffinityTerm


class PodAffinity(_K8s):
    """podAffinity and podAntiAffinity have the same shape."""
    required_during_scheduling_ignored_during_execution: _items(PodAffinityTerm) = []  # type: ignore[valid-type]
    preferred_during_scheduling_ignored_during_execution: _items(WeightedPodAffinityTerm) = []  # type: ignore[valid-type]


class Affinity(_K8s):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


# -- taints and tolerations ---------------------------------------------------------------------------
Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Toleration(_K8s):
    key: LabelKey = ""
    operator: Literal["Equal", "Exists", ""] = ""  # "" is Equal
    value: ShortStr = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] = ""  # "" is every effect
    toleration_seconds: int | None = None


class Taint(_K8s):
    key: LabelKey
    effect: Effect
    value: ShortStr = ""
    time_added: ShortStr = ""


# -- pod topology spread (v1.TopologySpreadConstraint) ------------------------------------------------
class TopologySpreadConstraint(_K8s):
    max_skew: PosInt32
    topology_key: LabelKey
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    label_selector: LabelSelector | None = None
    min_domains: PosInt32 | None = None
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    node_taints_policy: Literal["Honor", "Ignore"] | None = None
    match_label_keys: Strings = []


# -- Volcano: queue affinity, network topology, sub-group policy, podgroup conditions -------------------
class NodeGroupAffinity(_K8s):
    required_during_scheduling_ignored_during_execution: Strings = []
    preferred_during_scheduling_ignored_during_execution: Strings = []


class QueueAffinity(_K8s):
    node_group_affinity: NodeGroupAffinity | None = None
    node_group_anti_affinity: NodeGroupAffinity | None = None


class NetworkTopology(_K8s):
    mode: Literal["hard", "soft", ""] | None = None  # (absent: Volcano's default, hard)
    highest_tier_allowed: NonNegInt32 | None = None
    highest_tier_name: ShortStr = ""


class SubGroupPolicy(_K8s):
    name: ShortStr = ""
    sub_group_size: NonNegInt32 | None = None
    min_sub_groups: NonNegInt32 | None = None
    match_label_keys: Strings = []
    label_selector: LabelSelector | None = None
    network_topology: NetworkTopology | None = None


class JobCondition(_K8s):
    type: ShortStr
    status: ShortStr = ""
    reason: ShortStr = ""
    message: Annotated[str, msgspec.Meta(max_length=MAX_MESSAGE)] = ""
    transition_id: ShortStr = msgspec.field(default="", name="transitionID")
    last_transition_time: ShortStr | float | None = None


# -- to the domain's dicts -----------------------------------------------------------------------------
_to_builtins = msgspec.to_builtins


def plain(v: Any) -> Any:
    """A struct as the dict the domain reads; a dict (a spec built in code) or None as it is."""
    return v if v is None or type(v) is dict else _to_builtins(v)


def plain_list(v: list[Any]) -> list[Any]:
    """A list of structs as a new list of dicts; a list of dicts copied (shallow)."""
    if not v:
        return []
    return list(v) if type(v[0]) is dict else _to_builtins(v)
