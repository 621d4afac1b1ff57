"""Kubernetes scheduling rules over plain dicts: selectors, affinity, taints, topology.

Volcano's predicates and nodeorder plugins call the kube-scheduler plugins
(NodeAffinity, TaintToleration, InterPodAffinity, PodTopologySpread, ...); these
are the matching rules those plugins share, as small pure functions over the
Kubernetes shapes a scenario writes (``affinity``, ``tolerations``,
``topologySpreadConstraints`` dicts and label maps).

A parsed label selector is a tuple of requirements ``(key, operator, values)``;
``()`` selects everything and ``None`` selects nothing, as
``metav1.LabelSelectorAsSelector`` gives for ``{}`` and for a nil selector.
Namespaces carry no labels here (the scheduler sees no Namespace objects), so a
namespace selector is matched against an empty label set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from busched.api.resource import PODS

__all__ = ["DEFAULT_MILLI_CPU", "DEFAULT_MEMORY", "pod_requests", "non_zero_requests", "MAX_NODE_SCORE", "HOSTNAME",
           "Selector", "go_div", "parse_label_selector", "selector_matches", "merge_match_labels",
           "required_node_affinity_matches", "node_affinity_name_conflict",
           "preferred_node_affinity", "preferred_node_affinity_score", "tolerates", "find_untolerated_taint",
           "AffinityTerm", "pod_affinity_terms", "pod_affinity_valid", "term_matches", "label_selector_valid",
           "SpreadConstraint", "spread_constraints",
           "node_has_topology_keys", "inclusion_policies_match", "host_ports", "ports_conflict",
           "default_normalize", "normalized_image_name"]

MAX_NODE_SCORE = 100
DEFAULT_MILLI_CPU = 100  # kube-scheduler's request for a container that names no cpu
DEFAULT_MEMORY = 200 * 1024 * 1024
HOSTNAME = "kubernetes.io/hostname"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NO_SCHEDULE, NO_EXECUTE, PREFER_NO_SCHEDULE = "NoSchedule", "NoExecute", "PreferNoSchedule"
DO_NOT_SCHEDULE_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})

Requirement = tuple[str, str, tuple[str, ...]]
Selector = tuple[Requirement, ...] | None


def pod_requests(task: Any) -> tuple[int, int, dict[str, int]]:
    """(milli-cpu, memory bytes, {scalar: whole units}) as the pod's containers request them."""
    r = task.resreq
    sc = r.scalars
    if not sc or (len(sc) == 1 and PODS in sc):
        return int(r.cpu), int(r.memory), {}  # most pods: no scalar but the pod count
    scalars = {n: -(-int(v) // 1000) for n, v in sc.items() if n != PODS and v > 0}
    return int(r.cpu), int(r.memory), scalars


def non_zero_requests(task: Any) -> tuple[int, int]:
    """Requests with kube-scheduler's defaults for a missing cpu or memory request (0 counts as missing).
    framework/podview's ``SessionPods.add`` applies the same defaults inline to `pod_requests`' figures
    (its hot path): a change here goes there too (tests/framework/test_podview_sums.py compares them)."""
    r = task.resreq  # pod_requests' cpu and memory, without its scalar map
    return int(r.cpu) or DEFAULT_MILLI_CPU, int(r.memory) or DEFAULT_MEMORY


def go_div(a: int, b: int) -> int:
    """Go's integer division, which truncates toward zero (Python's // floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


# -- label selectors ----------------------------------------------------------------------
def _requirement(expr: Mapping[str, Any], node_selector: bool) -> Requirement | None:
    """One matchExpressions entry; None when it is invalid (k8s rejects the whole selector)."""
    key, op = str(expr.get("key", "")), str(expr.get("operator", ""))
    values = tuple(str(v) for v in expr.get("values") or [])
    if op in ("In", "NotIn"):
        return (key, op, values) if values else None
    if op in ("Exists", "DoesNotExist"):
        return None if values else (key, op, values)
    if node_selector and op in ("Gt", "Lt"):
        return (key, op, values) if len(values) == 1 and _parse_int(values[0]) is not None else None
    return None


def label_selector_valid(sel: Mapping[str, Any] | None) -> bool:
    """Whether LabelSelectorAsSelector accepts it (a missing selector is fine)."""
    return sel is None or all(_requirement(e, node_selector=False) is not None
                              for e in sel.get("matchExpressions") or [])


def parse_label_selector(sel: Mapping[str, Any] | None) -> Selector:
    """A metav1.LabelSelector: matchLabels and matchExpressions, ANDed."""
    if sel is None:
        return None
    reqs: list[Requirement] = [(str(k), "In", (str(v),)) for k, v in (sel.get("matchLabels") or {}).items()]
    for expr in sel.get("matchExpressions") or []:
        r = _requirement(expr, node_selector=False)
        if r is None:
            return None
        reqs.append(r)
    return tuple(reqs)


def _parse_int(text: str) -> int | None:
    try:
        return int(text, 10)
    except ValueError:
        return None


def _requirement_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    key, op, values = req
    has = key in labels
    if op == "In":
        return has and labels[key] in values
    if op == "NotIn":
        return not has or labels[key] not in values
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if not has:  # Gt / Lt compare the label as an integer
        return False
    got, want = _parse_int(labels[key]), _parse_int(values[0])
    if got is None or want is None:
        return False
    return got > want if op == "Gt" else got < want


def selector_matches(sel: Selector, labels: Mapping[str, str]) -> bool:
    if sel is None:
        return False
    return all(_requirement_matches(r, labels) for r in sel)


def merge_match_labels(sel: Selector, keys: Iterable[str], labels: Mapping[str, str]) -> Selector:
    """matchLabelKeys: add ``key in (pod's value)`` for each key the pod carries."""
    extra = tuple((k, "In", (labels[k],)) for k in keys if k in labels)
    if sel is None or not extra:
        return sel
    return extra + sel


# -- node affinity ------------------------------------------------------------------------
def _term_matches(term: Mapping[str, Any], node_name: str, labels: Mapping[str, str]) -> bool:
    """A NodeSelectorTerm; an empty or invalid term selects no node."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    for e in exprs:
        r = _requirement(e, node_selector=True)
        if r is None or not _requirement_matches(r, labels):
            return False
    for f in fields:
        values = f.get("values") or []
        op = f.get("operator")
        if f.get("key") != "metadata.name" or len(values) != 1 or op not in ("In", "NotIn"):
            return False
        if node_name and (node_name == str(values[0])) != (op == "In"):
            return False
    return True


def _node_affinity(affinity: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (affinity or {}).get("nodeAffinity") or {}


def required_node_affinity_matches(node_selector: Mapping[str, str] | None, affinity: Mapping[str, Any] | None,
                                   node_name: str, labels: Mapping[str, str]) -> bool:
    """nodeSelector AND requiredDuringScheduling node affinity (terms ORed)."""
    for k, v in (node_selector or {}).items():
        if labels.get(k) != v:
            return False
    required = _node_affinity(affinity).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(_term_matches(t or {}, node_name, labels) for t in required.get("nodeSelectorTerms") or [])


def node_affinity_name_conflict(affinity: Mapping[str, Any] | None) -> bool:
    """NodeAffinity PreFilter: every required term pins metadata.name and the pins leave no node."""
    required = _node_affinity(affinity).get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = (required or {}).get("nodeSelectorTerms") or []
    if not terms:
        return False
    names: set[str] = set()
    for t in terms:
        pinned: set[str] | None = None
        for f in (t or {}).get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In":
                s = {str(v) for v in f.get("values") or []}
                pinned = s if pinned is None else pinned & s
        if pinned is None:
            return False  # this term does not pin a name: any node may do
        names |= pinned
    return not names


def preferred_node_affinity(affinity: Mapping[str, Any] | None) -> list[Any] | None:
    return _node_affinity(affinity).get("preferredDuringSchedulingIgnoredDuringExecution")


def preferred_node_affinity_score(terms: list[Any], node_name: str, labels: Mapping[str, str]) -> int:
    """The sum of the weights of the preferred terms the node matches (zero weights skipped)."""
    total = 0
    for t in terms or []:
        w = int(t.get("weight") or 0)
        if w and _term_matches(t.get("preference") or {}, node_name, labels):
            total += w
    return total


# -- taints and tolerations ------------------------------------------------------------------
def tolerates(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """v1.Toleration.ToleratesTaint: empty effect/key are wildcards; operator Equal (default) or Exists."""
    effect = tol.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = tol.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Equal":
        return str(tol.get("value") or "") == str(taint.get("value") or "")
    return op == "Exists"


def find_untolerated_taint(taints: Iterable[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]],
                           effects: frozenset[str] = DO_NOT_SCHEDULE_EFFECTS) -> Mapping[str, Any] | None:
    """The first taint with one of ``effects`` that no toleration tolerates."""
    for taint in taints:
        if taint.get("effect") in effects and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


# -- inter-pod affinity -----------------------------------------------------------------------
@dataclass(frozen=True)
class AffinityTerm:
    namespaces: frozenset[str]
    ns_selector: Selector
    selector: Selector
    topology_key: str
    weight: int = 0


def pod_affinity_terms(affinity: Mapping[str, Any] | None, namespace: str, kind: str, required: bool,
                       incoming: bool = False) -> list[AffinityTerm]:
    """The terms of ``kind`` (podAffinity / podAntiAffinity), required or preferred (weighted).

    For the pod being scheduled (``incoming``) a non-empty namespace selector is resolved to the
    namespaces it selects; no Namespace object exists here, so it selects none.
    """
    out = []
    for item in _affinity_items(affinity, kind, required):
        term = item if required else (item.get("podAffinityTerm") or {})
        if not (label_selector_valid(term.get("labelSelector"))
                and label_selector_valid(term.get("namespaceSelector"))):
            return []  # one term that does not parse drops the pod's whole list, as PodInfo does
        ns_sel_raw = term.get("namespaceSelector")
        names = term.get("namespaces") or []
        namespaces = frozenset([namespace]) if not names and ns_sel_raw is None else frozenset(map(str, names))
        ns_sel = parse_label_selector(ns_sel_raw)
        if incoming and ns_sel:
            ns_sel = None
        out.append(AffinityTerm(namespaces, ns_sel, parse_label_selector(term.get("labelSelector")),
                                str(term.get("topologyKey") or ""), 0 if required else int(item.get("weight") or 0)))
    return out


def _affinity_items(affinity: Mapping[str, Any] | None, kind: str, required: bool) -> list[Any]:
    block = (affinity or {}).get(kind) or {}
    key = "requiredDuringSchedulingIgnoredDuringExecution" if required else \
        "preferredDuringSchedulingIgnoredDuringExecution"
    return list(block.get(key) or [])


def pod_affinity_valid(affinity: Mapping[str, Any] | None) -> bool:
    """Whether every pod (anti-)affinity term's selectors parse (else the pod cannot be scheduled)."""
    for kind in ("podAffinity", "podAntiAffinity"):
        for required in (True, False):
            for item in _affinity_items(affinity, kind, required):
                term = item if required else (item.get("podAffinityTerm") or {})
                if not (label_selector_valid(term.get("labelSelector"))
                        and label_selector_valid(term.get("namespaceSelector"))):
                    return False
    return True


def term_matches(term: AffinityTerm, namespace: str, labels: Mapping[str, str]) -> bool:
    """AffinityTerm.Matches: the pod's namespace is named or selected, and its labels match."""
    if namespace in term.namespaces or selector_matches(term.ns_selector, {}):
        return selector_matches(term.selector, labels)
    return False


# -- pod topology spread ------------------------------------------------------------------------
@dataclass(frozen=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int = 1
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"


def spread_constraints(constraints: Iterable[Mapping[str, Any]], pod_labels: Mapping[str, str],
                       action: str) -> list[SpreadConstraint]:
    """The constraints whose whenUnsatisfiable is ``action``, with matchLabelKeys merged in."""
    out = []
    for c in constraints:
        if c.get("whenUnsatisfiable") != action:
            continue
        sel = merge_match_labels(parse_label_selector(c.get("labelSelector")), c.get("matchLabelKeys") or [],
                                 pod_labels)
        min_domains = c.get("minDomains")
        out.append(SpreadConstraint(int(c.get("maxSkew") or 0), str(c.get("topologyKey") or ""), sel,
                                    1 if min_domains is None else int(min_domains),
                                    c.get("nodeAffinityPolicy") or "Honor", c.get("nodeTaintsPolicy") or "Ignore"))
    return out


def node_has_topology_keys(labels: Mapping[str, str], constraints: Iterable[SpreadConstraint]) -> bool:
    return all(c.topology_key in labels for c in constraints)


def inclusion_policies_match(c: SpreadConstraint, affinity_ok: bool, taints: Iterable[Mapping[str, Any]],
                             tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a node counts toward a constraint's domains (nodeAffinityPolicy / nodeTaintsPolicy)."""
    if c.node_affinity_policy == "Honor" and not affinity_ok:
        return False
    return not (c.node_taints_policy == "Honor" and find_untolerated_taint(taints, tolerations) is not None)


# -- host ports -----------------------------------------------------------------------------------
def host_ports(ports: Iterable[Any]) -> list[tuple[str, str, int]]:
    """(hostIP, protocol, port) of each wanted host port; a bare number is TCP on every address."""
    out = []
    for p in ports:
        if isinstance(p, Mapping):
            port = int(p.get("hostPort") or p.get("port") or 0)
            out.append((p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", port))
        else:
            out.append(("0.0.0.0", "TCP", int(p)))
    return out


def ports_conflict(wanted: Iterable[tuple[str, str, int]], used: Iterable[tuple[str, str, int]]) -> bool:
    """HostPortInfo.CheckConflict: 0.0.0.0 clashes with every address; ports <= 0 never clash."""
    used = list(used)
    for ip, proto, port in wanted:
        if port <= 0:
            continue
        for uip, uproto, uport in used:
            if uport == port and uproto == proto and (ip == "0.0.0.0" or uip in ("0.0.0.0", ip)):
                return True
    return False


# -- scores ------------------------------------------------------------------------------------------
def default_normalize(scores: dict[str, int], reverse: bool) -> dict[str, int]:
    """helper.DefaultNormalizeScore: scale to [0, MAX_NODE_SCORE] by the maximum, optionally reversed."""
    top = max([0, *scores.values()])
    if top == 0:
        return {n: (MAX_NODE_SCORE if reverse else s) for n, s in scores.items()}
    out = {}
    for n, s in scores.items():
        v = go_div(MAX_NODE_SCORE * s, top)
        out[n] = MAX_NODE_SCORE - v if reverse else v
    return out


def normalized_image_name(name: str) -> str:
    """An image without a tag is ``:latest``."""
    return name if name.rfind(":") > name.rfind("/") else name + ":latest"
