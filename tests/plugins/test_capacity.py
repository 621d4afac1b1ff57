"""capacity: deserved / guarantee / capability accounting, flat and hierarchical."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from busched.api.objects import ClusterSpec
from busched.api.resource import Resource, exceeded_part, res_max
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework import queue_totals
from busched.framework.config import parse_config
from busched.framework.session import Session
from busched.framework.statement import Statement
from busched.plugins.capacity import CapacityPlugin
from busched.plugins.capacity import tree as ct

GI = 2**30


def session(cluster: dict[str, Any], *, hierarchy: bool = False, level: int | None = None,
            extra_plugins: list[dict[str, Any]] | None = None) -> Session:
    cache = Cache()
    cache.load(msgspec.convert(cluster, ClusterSpec))
    plugin: dict[str, Any] = {"name": "capacity", "enableHierarchy": hierarchy}
    if level is not None:
        plugin["arguments"] = {"ancestorReclaimLevel": level}
    cfg = parse_config({"actions": "", "tiers": [{"plugins": [plugin, *(extra_plugins or [])]}]})
    return open_session(cache.snapshot(), cfg)


def cap(ssn: Session) -> CapacityPlugin:
    p = ssn.plugins["capacity"]
    assert isinstance(p, CapacityPlugin)
    return p


def task(ssn: Session, key: str):  # noqa: ANN201
    ns, name = key.split("/")
    for j in ssn.jobs.values():
        t = j.tasks.get(f"{ns}-{name}")
        if t is not None:
            return t
    raise KeyError(key)


def node(name: str, cpu: str = "4", mem: str = "4Gi", **scalars: str) -> dict[str, Any]:
    return {"name": name, "allocatable": {"cpu": cpu, "memory": mem, "pods": 110, **scalars}}


def job(name: str, queue: str, phase: str = "Running", min_member: int = 1, **kw: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "ns", "queue": queue, "minMember": min_member, "phase": phase, **kw}


def pod(name: str, job_name: str, cpu: str, mem: str, node_name: str = "", **kw: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "ns", "job": job_name, "node": node_name,
            "phase": "Running" if node_name else "Pending", "requests": {"cpu": cpu, "memory": mem}, **kw}


# -- flat accounting ------------------------------------------------------------------------------------


def test_flat_deserved_is_capped_by_real_capability_and_raised_to_guarantee() -> None:
    ssn = session({
        "queues": [
            {"name": "big", "deserved": {"cpu": "10", "memory": "1Gi"}, "capability": {"cpu": "6", "memory": "8Gi"}},
            {"name": "guaranteed", "deserved": {"cpu": "1", "memory": "1Gi"},
             "guarantee": {"cpu": "2", "memory": "2Gi"}},
        ],
        "nodes": [node("n1", "8", "8Gi")],
        "jobs": [job("a", "big"), job("b", "guaranteed")],
    })
    attrs = cap(ssn).attrs
    assert attrs["big"].deserved.cpu == 6000  # min(10, capability 6)
    assert attrs["big"].deserved.memory == GI
    assert attrs["guaranteed"].deserved.cpu == 2000  # max(1, guarantee 2)
    assert attrs["guaranteed"].deserved.memory == 2 * GI


def test_flat_real_capability_is_total_minus_other_guarantees() -> None:
    ssn = session({
        "queues": [
            {"name": "q1", "guarantee": {"cpu": "1", "memory": "1Gi"}},
            {"name": "q2", "guarantee": {"cpu": "2", "memory": "1Gi"}},  # no job: its guarantee still counts
            {"name": "q3", "capability": {"memory": "2Gi"}},
        ],
        "nodes": [node("n1", "8", "8Gi")],
        "jobs": [job("a", "q1"), job("c", "q3")],
    })
    attrs = cap(ssn).attrs
    assert set(attrs) == {"q1", "q3"}  # flat mode tracks queues that have jobs
    # 8 - (1 + 2) + own 1 cpu; 8Gi - 2Gi + 1Gi memory
    assert attrs["q1"].real_capability.cpu == 6000
    assert attrs["q1"].real_capability.memory == 7 * GI
    # q3 has no guarantee and caps memory only: cpu stays the cluster remainder.
    assert attrs["q3"].real_capability.cpu == 5000
    assert attrs["q3"].real_capability.memory == 2 * GI
    assert attrs["q3"].capability.cpu == ct.MAX_FLOAT


def test_share_and_queue_order_priority_then_share_then_deserved() -> None:
    ssn = session({
        "queues": [
            {"name": "half", "deserved": {"cpu": "4", "memory": "4Gi"}},
            {"name": "quarter", "deserved": {"cpu": "4", "memory": "4Gi"}},
            {"name": "besteffort"},
            {"name": "urgent", "priority": 10},
        ],
        "nodes": [node("n1", "16", "16Gi")],
        "jobs": [job("a", "half"), job("b", "quarter"), job("c", "besteffort"), job("d", "urgent")],
        "tasks": [pod("pa", "a", "2", "1Gi", "n1"), pod("pb", "b", "1", "1Gi", "n1")],
    })
    attrs = cap(ssn).attrs
    assert attrs["half"].share == pytest.approx(0.5)
    assert attrs["quarter"].share == pytest.approx(0.25)
    assert attrs["besteffort"].share == 1.0
    order = sorted(ssn.queues.values(), key=lambda q: q.name)
    import functools

    ranked = sorted(order, key=functools.cmp_to_key(
        lambda l, r: -1 if ssn.queue_order_fn(l, r) else (1 if ssn.queue_order_fn(r, l) else 0)))
    assert [q.name for q in ranked] == ["urgent", "quarter", "half", "besteffort"]


def test_equal_share_prefers_queue_with_deserved() -> None:
    a = ct.QueueAttr("a", "a", deserved=Resource(1000), guarantee=Resource(), allocated=Resource(1000))
    b = ct.QueueAttr("b", "b", deserved=Resource(), guarantee=Resource())
    ct.update_share(a)
    ct.update_share(b)
    assert a.share == b.share == 1.0
    assert ct.compare_share(a, b) == -1
    assert ct.compare_share(b, a) == 1


def test_update_share_zero_deserved_dimension_counts_as_full() -> None:
    attr = ct.QueueAttr("q", "q", deserved=Resource(0, 2 * GI, {"nvidia.com/gpu": 0.0}),
                        guarantee=Resource(), allocated=Resource(1000, GI))
    ct.update_share(attr)
    assert attr.share == pytest.approx(0.5)  # cpu is not a deserved dimension (below MIN_RESOURCE)


# -- allocatable / enqueue ------------------------------------------------------------------------------------


def test_allocatable_respects_capability_and_queue_state() -> None:
    ssn = session({
        "queues": [{"name": "q", "capability": {"cpu": "2", "memory": "2Gi"}},
                   {"name": "closed", "state": "Closed"}],
        "nodes": [node("n1", "8", "8Gi")],
        "jobs": [job("a", "q"), job("b", "q", "Inqueue"), job("c", "closed", "Inqueue")],
        "tasks": [pod("run", "a", "1", "1Gi", "n1"), pod("fits", "b", "1", "1Gi"), pod("big", "b", "2", "1Gi"),
                  pod("shut", "c", "1", "1Gi")],
    })
    q = ssn.queues["q"]
    assert ssn.allocatable(q, task(ssn, "ns/fits"))
    assert not ssn.allocatable(q, task(ssn, "ns/big"))
    assert not ssn.allocatable(ssn.queues["closed"], task(ssn, "ns/shut"))


def test_allocate_events_update_queue_usage() -> None:
    ssn = session({
        "queues": [{"name": "q", "capability": {"cpu": "2", "memory": "2Gi"},
                    "deserved": {"cpu": "2", "memory": "2Gi"}}],
        "nodes": [node("n1", "8", "8Gi")],
        "jobs": [job("b", "q", "Inqueue", min_member=2)],
        "tasks": [pod("t1", "b", "1", "1Gi"), pod("t2", "b", "1", "1Gi"), pod("t3", "b", "1", "1Gi")],
    })
    attr = cap(ssn).attrs["q"]
    stmt = Statement(ssn)
    stmt.allocate(task(ssn, "ns/t1"), "n1")
    assert attr.allocated.cpu == 1000
    assert attr.share == pytest.approx(0.5)
    stmt.allocate(task(ssn, "ns/t2"), "n1")
    assert not ssn.allocatable(ssn.queues["q"], task(ssn, "ns/t3"))
    stmt.discard()
    assert attr.allocated.cpu == 0
    assert attr.share == 0.0
    assert ssn.allocatable(ssn.queues["q"], task(ssn, "ns/t3"))


def test_job_enqueueable_counts_allocated_inqueue_and_elastic() -> None:
    ssn = session({
        "queues": [{"name": "q", "capability": {"cpu": "4", "memory": "8Gi"}}],
        "nodes": [node("n1", "16", "16Gi")],
        "jobs": [
            # running elastic job: 3 cpu allocated, min 1 -> 2 cpu elastic
            job("elastic", "q", "Running", minResources={"cpu": "1", "memory": "1Gi"}),
            # admitted, nothing placed yet: reserves 1 cpu
            job("waiting", "q", "Inqueue", minResources={"cpu": "1", "memory": "1Gi"}),
            job("small", "q", "Pending", minResources={"cpu": "2", "memory": "1Gi"}),
            job("large", "q", "Pending", minResources={"cpu": "3", "memory": "1Gi"}),
            job("nomin", "q", "Pending"),
        ],
        "tasks": [pod("e1", "elastic", "1", "1Gi", "n1"), pod("e2", "elastic", "1", "1Gi", "n1"),
                  pod("e3", "elastic", "1", "1Gi", "n1"), pod("w1", "waiting", "1", "1Gi"),
                  pod("s1", "small", "2", "1Gi"), pod("l1", "large", "3", "1Gi"), pod("x1", "nomin", "9", "1Gi")],
    })
    attr = cap(ssn).attrs["q"]
    assert attr.allocated.cpu == 3000
    assert attr.inqueue.cpu == 1000
    assert attr.elastic.cpu == 2000
    # 2 + 3 + 1 - 2 = 4 <= 4 ; 3 + 3 + 1 - 2 = 5 > 4
    assert ssn.job_enqueueable(ssn.jobs["ns/small"])
    assert not ssn.job_enqueueable(ssn.jobs["ns/large"])
    assert ssn.job_enqueueable(ssn.jobs["ns/nomin"])  # no minResources: always admitted
    ssn.job_enqueued(ssn.jobs["ns/small"])
    assert attr.inqueue.cpu == 3000
    # with "small" reserved, even a 1-cpu job no longer fits: 1 + 3 + 3 - 2 = 5
    assert not ssn.job_enqueueable(ssn.jobs["ns/small"])


def test_inqueue_reservation_deducts_what_is_already_allocated() -> None:
    ssn = session({
        "queues": [{"name": "q"}],
        "nodes": [node("n1", "16", "16Gi")],
        "jobs": [job("half", "q", "Inqueue", min_member=2, minResources={"cpu": "4", "memory": "4Gi"})],
        "tasks": [{**pod("b1", "half", "1", "3Gi", "n1"), "phase": "Pending"}],  # Bound: allocated, not scheduled
    })
    attr = cap(ssn).attrs["q"]
    assert attr.allocated.cpu == 1000
    assert attr.inqueue.cpu == 3000
    assert attr.inqueue.memory == GI


def test_closed_queue_rejects_enqueue() -> None:
    ssn = session({
        "queues": [{"name": "q", "state": "Closed"}],
        "nodes": [node("n1")],
        "jobs": [job("a", "q", "Pending", minResources={"cpu": "1"})],
    })
    assert not ssn.job_enqueueable(ssn.jobs["ns/a"])


# -- hierarchy --------------------------------------------------------------------------------------------------


TREE = {
    "queues": [
        {"name": "root"},
        {"name": "eng", "parent": "root", "capability": {"cpu": "6", "nvidia.com/gpu": "2"},
         "deserved": {"cpu": "4", "memory": "4Gi"}, "guarantee": {"cpu": "1"}},
        {"name": "ops", "parent": "root", "deserved": {"cpu": "2", "memory": "2Gi"}, "guarantee": {"cpu": "2"}},
        {"name": "train", "parent": "eng", "capability": {"memory": "3Gi"}, "guarantee": {"cpu": "2", "memory": "1Gi"},
         "deserved": {"cpu": "1", "memory": "1Gi"}},
        {"name": "serve", "parent": "eng", "deserved": {"cpu": "2", "memory": "2Gi"}},
    ],
    "nodes": [node("n1", "8", "8Gi", **{"nvidia.com/gpu": "4"})],
    "jobs": [job("t", "train"), job("s", "serve"), job("o", "ops")],
    "tasks": [pod("t1", "t", "1", "1Gi", "n1"), pod("s1", "s", "2", "1Gi", "n1"), pod("o1", "o", "1", "1Gi", "n1")],
}


def test_hierarchical_deserved() -> None:
    attrs = cap(session(TREE, hierarchy=True)).attrs
    # a child deserves at least its guarantee
    assert attrs["train"].deserved.cpu == 2000
    assert attrs["train"].deserved.memory == GI
    # the root deserves (and guarantees) what its children do, whatever it says itself
    assert attrs["root"].deserved.cpu == 4000 + 2000
    assert attrs["root"].deserved.memory == 6 * GI
    assert attrs["root"].guarantee.cpu == 1000 + 2000
    # a non-root parent keeps its own deserved even if children ask for more
    assert attrs["eng"].deserved.cpu == 4000


def test_hierarchical_real_capability() -> None:
    attrs = cap(session(TREE, hierarchy=True)).attrs
    root = attrs["root"]
    # an unset root capability is unlimited, with every scalar the cluster has
    assert root.real_capability.cpu == ct.MAX_FLOAT
    assert root.real_capability.scalars["nvidia.com/gpu"] == ct.MAX_INT64
    assert set(root.real_capability.scalars) == {"pods", "nvidia.com/gpu"}
    eng = attrs["eng"]
    # capped by its own capability; memory unset: unlimited like its parent
    assert eng.real_capability.cpu == 6000
    assert eng.real_capability.memory == ct.MAX_FLOAT
    assert eng.real_capability.scalars["nvidia.com/gpu"] == 2000
    train = attrs["train"]
    # cpu: inherits eng's capability 6; real = eng real 6 - sibling guarantees (2) + own 2 = 6
    assert train.capability.cpu == 6000
    assert train.real_capability.cpu == 6000
    assert train.real_capability.memory == 3 * GI
    assert train.capability.scalars["nvidia.com/gpu"] == 2000  # scalars inherited from the parent
    serve = attrs["serve"]
    # serve has no guarantee: 6 - 2 = 4 cpu
    assert serve.real_capability.cpu == 4000
    assert serve.real_capability.scalars["nvidia.com/gpu"] == 2000


def test_hierarchical_usage_rolls_up_to_ancestors() -> None:
    ssn = session(TREE, hierarchy=True)
    attrs = cap(ssn).attrs
    assert attrs["train"].allocated.cpu == 1000
    assert attrs["eng"].allocated.cpu == 3000
    assert attrs["root"].allocated.cpu == 4000
    assert attrs["train"].ancestors == ["root", "eng"]
    stmt = Statement(ssn)
    stmt.evict(task(ssn, "ns/s1"), "test")
    assert attrs["serve"].allocated.cpu == 0
    assert attrs["eng"].allocated.cpu == 1000
    assert attrs["root"].allocated.cpu == 2000


def test_hierarchical_allocatable_checks_every_ancestor_and_only_leaves() -> None:
    cluster = {
        "queues": [
            {"name": "root"},
            {"name": "p", "parent": "root", "capability": {"cpu": "2", "memory": "8Gi"}},
            {"name": "a", "parent": "p", "capability": {"cpu": "4", "memory": "8Gi"}},
            {"name": "b", "parent": "p"},
        ],
        "nodes": [node("n1", "8", "8Gi")],
        "jobs": [job("ja", "a", "Inqueue"), job("jb", "b")],
        "tasks": [pod("b1", "jb", "1", "1Gi", "n1"), pod("a1", "ja", "1", "1Gi"), pod("a2", "ja", "2", "1Gi")],
    }
    ssn = session(cluster, hierarchy=True)
    assert ssn.allocatable(ssn.queues["a"], task(ssn, "ns/a1"))
    # a itself has room (its 4 cpu is clipped to p's 2), but p already holds 1 of its 2
    assert not ssn.allocatable(ssn.queues["a"], task(ssn, "ns/a2"))
    assert not ssn.allocatable(ssn.queues["p"], task(ssn, "ns/a1"))  # not a leaf
    assert ssn.job_enqueueable(ssn.jobs["ns/ja"])  # no minResources: admitted


def test_hierarchical_enqueue_checks_ancestors() -> None:
    cluster = {
        "queues": [
            {"name": "root"},
            {"name": "p", "parent": "root", "capability": {"cpu": "3", "memory": "8Gi"}},
            {"name": "a", "parent": "p", "capability": {"cpu": "3", "memory": "8Gi"}},
            {"name": "b", "parent": "p"},
        ],
        "nodes": [node("n1", "8", "8Gi")],
        "jobs": [job("ja", "a", "Pending", minResources={"cpu": "2"}),
                 job("jb", "b", "Inqueue", minResources={"cpu": "2"})],
    }
    ssn = session(cluster, hierarchy=True)
    attrs = cap(ssn).attrs
    assert attrs["p"].inqueue.cpu == 2000  # b's reservation counts in p
    # a alone has room (2 <= 3) but p would hold 4 > 3
    assert not ssn.job_enqueueable(ssn.jobs["ns/ja"])


def test_job_in_non_leaf_queue_disables_the_plugin() -> None:
    cluster = {
        "queues": [{"name": "root"}, {"name": "p", "parent": "root"}, {"name": "c", "parent": "p"}],
        "nodes": [node("n1")],
        "jobs": [job("jp", "p", "Inqueue"), job("jc", "c", "Inqueue")],
        "tasks": [pod("c1", "jc", "1", "1Gi")],
    }
    ssn = session(cluster, hierarchy=True)
    assert not cap(ssn).ready
    assert not ssn.allocatable(ssn.queues["c"], task(ssn, "ns/c1"))
    assert not ssn.job_enqueueable(ssn.jobs["ns/jc"])


def test_missing_root_or_parent_disables_the_plugin() -> None:
    no_root = {"queues": [{"name": "a"}], "nodes": [node("n1")], "jobs": [job("j", "a", "Inqueue")],
               "tasks": [pod("t", "j", "1", "1Gi")]}
    ssn = session(no_root, hierarchy=True)
    assert not cap(ssn).ready
    assert not ssn.allocatable(ssn.queues["a"], task(ssn, "ns/t"))
    bad_parent = {**no_root, "queues": [{"name": "root"}, {"name": "a", "parent": "gone"}]}
    assert not cap(session(bad_parent, hierarchy=True)).ready
    cycle = {**no_root, "queues": [{"name": "root"}, {"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]}
    assert not cap(session(cycle, hierarchy=True)).ready


def test_hierarchical_queue_order_compares_subtrees() -> None:
    cluster = {
        "queues": [
            {"name": "root"},
            {"name": "busy", "parent": "root", "deserved": {"cpu": "2", "memory": "2Gi"}},
            {"name": "idle", "parent": "root", "deserved": {"cpu": "2", "memory": "2Gi"}},
            {"name": "busy-leaf", "parent": "busy", "deserved": {"cpu": "2", "memory": "2Gi"}},
            {"name": "busy-other", "parent": "busy", "deserved": {"cpu": "2", "memory": "2Gi"}},
            {"name": "idle-leaf", "parent": "idle", "deserved": {"cpu": "2", "memory": "2Gi"}},
        ],
        "nodes": [node("n1", "8", "8Gi")],
        "jobs": [job("a", "busy-other"), job("b", "busy-leaf", "Inqueue"), job("c", "idle-leaf", "Inqueue")],
        "tasks": [pod("a1", "a", "2", "2Gi", "n1")],
    }
    ssn = session(cluster, hierarchy=True)
    q = ssn.queues
    # busy-leaf itself is idle, but its parent "busy" is full: idle-leaf (under idle) goes first
    assert ssn.queue_order_fn(q["idle-leaf"], q["busy-leaf"])
    assert not ssn.queue_order_fn(q["busy-leaf"], q["idle-leaf"])
    # within one parent, the leaves' own shares decide
    assert ssn.queue_order_fn(q["busy-leaf"], q["busy-other"])
    # leaves go before inner queues
    assert ssn.queue_order_fn(q["busy-other"], q["idle"])


def test_victim_queue_order_prefers_queues_farther_from_the_reclaimer() -> None:
    cluster = {
        "queues": [
            {"name": "root"},
            {"name": "p1", "parent": "root"}, {"name": "p2", "parent": "root"},
            {"name": "a", "parent": "p1"}, {"name": "near", "parent": "p1"}, {"name": "far", "parent": "p2"},
        ],
        "nodes": [node("n1")],
        "jobs": [job("j", "a")],
    }
    ssn = session(cluster, hierarchy=True)
    q = ssn.queues
    plugin = cap(ssn)
    # "near" shares p1 with the reclaimer (level 1), "far" only root (level 0)
    assert plugin._victim_queue_order(q["near"], q["far"], q["a"]) == -1
    assert plugin._victim_queue_order(q["far"], q["near"], q["a"]) == 1
    assert plugin._victim_queue_order(q["far"], q["far"], q["a"]) == 0


# -- reclaim ------------------------------------------------------------------------------------------------------


RECLAIM = {
    "queues": [
        {"name": "over", "deserved": {"cpu": "1", "memory": "1Gi"}},
        {"name": "guarded", "deserved": {"cpu": "1", "memory": "1Gi"}, "guarantee": {"cpu": "2", "memory": "2Gi"}},
        {"name": "under", "deserved": {"cpu": "4", "memory": "4Gi"}},
        {"name": "want", "deserved": {"cpu": "4", "memory": "4Gi"}, "capability": {"cpu": "5", "memory": "5Gi"}},
    ],
    "nodes": [node("n1", "16", "16Gi")],
    "jobs": [job("o", "over"), job("g", "guarded"), job("u", "under"), job("w", "want", "Inqueue")],
    "tasks": [
        pod("o1", "o", "1", "1Gi", "n1"), pod("o2", "o", "1", "1Gi", "n1"), pod("o3", "o", "1", "1Gi", "n1"),
        pod("g1", "g", "1", "1Gi", "n1"), pod("g2", "g", "1", "1Gi", "n1"),
        pod("u1", "u", "1", "1Gi", "n1"),
        pod("w0", "w", "2", "2Gi", "n1"), pod("w1", "w", "2", "2Gi"), pod("w2", "w", "4", "4Gi"),
    ],
}


def test_reclaimable_takes_only_what_is_above_deserved_and_guarantee() -> None:
    ssn = session(RECLAIM)
    cands = [task(ssn, k) for k in ("ns/o1", "ns/o2", "ns/o3", "ns/g1", "ns/g2", "ns/u1")]
    victims, vote = cap(ssn)._reclaimable(task(ssn, "ns/w1"), cands)
    assert vote == 1
    names = sorted(v.name for v in victims)
    # "over" has 3 allocated, deserves 1: two can go; "guarded" would fall below its
    # guarantee; "under" is within deserved.
    assert names in (["o1", "o2"], ["o1", "o3"], ["o2", "o3"])


def test_reclaimable_task_outside_deserved_dimensions_is_an_immediate_victim() -> None:
    cluster = {
        "queues": [{"name": "cpuonly", "deserved": {"cpu": "1"}},
                   {"name": "want", "deserved": {"nvidia.com/gpu": "2"}}],
        "nodes": [node("n1", "8", "8Gi", **{"nvidia.com/gpu": "2"})],
        "jobs": [job("c", "cpuonly"), job("w", "want", "Inqueue")],
        "tasks": [
            {"name": "gpu", "namespace": "ns", "job": "c", "node": "n1", "phase": "Running",
             "requests": {"nvidia.com/gpu": "1"}},
            {"name": "cpu", "namespace": "ns", "job": "c", "node": "n1", "phase": "Running", "requests": {"cpu": "1"}},
            {"name": "mem", "namespace": "ns", "job": "c", "node": "n1", "phase": "Running",
             "requests": {"memory": "1Gi"}},
            {"name": "wg", "namespace": "ns", "job": "w", "requests": {"nvidia.com/gpu": "1", "cpu": "1"}},
        ],
    }
    ssn = session(cluster)
    cands = [task(ssn, "ns/gpu"), task(ssn, "ns/cpu"), task(ssn, "ns/mem")]
    victims, _ = cap(ssn)._reclaimable(task(ssn, "ns/wg"), cands)
    # gpu: not a deserved dimension of its queue -> victim; cpu: queue at deserved -> kept;
    # mem: shares no dimension with the reclaimer -> skipped.
    assert [v.name for v in victims] == ["gpu"]


def test_preemptive_needs_room_under_capability_and_deserved() -> None:
    ssn = session(RECLAIM)
    want = ssn.queues["want"]
    # allocated 2 + 2 = 4 <= deserved 4 and <= capability 5
    assert ssn.preemptive(want, task(ssn, "ns/w1"))
    # 2 + 4 = 6 > capability 5
    assert not ssn.preemptive(want, task(ssn, "ns/w2"))
    # a list of candidates is summed: 2 + 2 + 4 > 5
    assert not cap(ssn)._preemptive(want, [task(ssn, "ns/w1"), task(ssn, "ns/w2")])
    # "over" is above deserved on every asked dimension
    assert not ssn.preemptive(ssn.queues["over"], task(ssn, "ns/w1"))


ANCESTOR = {
    "queues": [
        {"name": "root"},
        {"name": "pa", "parent": "root", "deserved": {"cpu": "4", "memory": "4Gi"}},
        {"name": "a", "parent": "pa", "deserved": {"cpu": "1", "memory": "1Gi"}},
        {"name": "pb", "parent": "root", "deserved": {"cpu": "8", "memory": "8Gi"}},
        {"name": "b", "parent": "pb", "deserved": {"cpu": "1", "memory": "1Gi"}},
    ],
    "nodes": [node("n1", "4", "4Gi")],
    "jobs": [job("ja", "a", "Inqueue"), job("jb", "b")],
    "tasks": [pod("b1", "jb", "2", "2Gi", "n1"), pod("b2", "jb", "2", "2Gi", "n1"), pod("a1", "ja", "2", "2Gi")],
}


def test_ancestor_level_lets_a_queue_reclaim_under_its_parents_deserved() -> None:
    flat = session(ANCESTOR, hierarchy=True, level=0)
    assert not flat.preemptive(flat.queues["a"], task(flat, "ns/a1"))  # a: 2 > deserved 1
    lvl = session(ANCESTOR, hierarchy=True, level=1)
    assert lvl.preemptive(lvl.queues["a"], task(lvl, "ns/a1"))  # pa: 2 <= 4


def test_ancestor_level_protects_victims_whose_parent_is_within_deserved() -> None:
    flat = session(ANCESTOR, hierarchy=True, level=0)
    cands = [task(flat, "ns/b1"), task(flat, "ns/b2")]
    victims, _ = cap(flat)._reclaimable(task(flat, "ns/a1"), cands)
    assert len(victims) == 2  # b (4 > 1) is over deserved on its own
    lvl = session(ANCESTOR, hierarchy=True, level=1)
    cands = [task(lvl, "ns/b1"), task(lvl, "ns/b2")]
    victims, _ = cap(lvl)._reclaimable(task(lvl, "ns/a1"), cands)
    assert victims == []  # pb holds 4 of its deserved 8


def test_reclaim_refused_when_hierarchy_is_broken() -> None:
    broken = {**ANCESTOR, "queues": [q for q in ANCESTOR["queues"] if q["name"] != "root"]}
    ssn = session(broken, hierarchy=True)
    victims, vote = cap(ssn)._reclaimable(task(ssn, "ns/a1"), [task(ssn, "ns/b1")])
    assert (victims, vote) == ([], -1)
    assert not ssn.preemptive(ssn.queues["a"], task(ssn, "ns/a1"))


# -- resource helpers -----------------------------------------------------------------------------------------------


def test_exceeded_part_keeps_only_exceeding_scalars() -> None:
    left = Resource(4000, 4 * GI, {"a": 2000.0, "b": 1000.0})
    right = Resource(5000, GI, {"a": 2000.0, "c": 1.0})
    out = exceeded_part(left, right)
    assert out.cpu == 0 and out.memory == 3 * GI
    assert out.scalars == {"b": 1000.0}


def test_res_max_drops_negative_scalars() -> None:
    out = res_max(Resource(1000, 0, {"a": -1.0, "b": 3.0}), Resource(0, GI, {"b": 5.0}))
    assert (out.cpu, out.memory) == (1000, GI)
    assert out.scalars == {"b": 5.0}


def test_greater_partly_with_relevant_dimensions_ignores_dimensions_rr_lacks() -> None:
    gpu = Resource(0, 0, {"gpu": 1000.0})
    assert ct.greater_partly_with_relevant_dimensions(Resource(0, 0, {"gpu": 2000.0}), Resource(), gpu) == (False, [])
    assert ct.greater_partly_with_relevant_dimensions(
        Resource(0, 0, {"gpu": 2000.0}), Resource(0, 0, {"gpu": 0.0}), gpu) == (True, ["gpu"])
    assert ct.greater_partly_with_relevant_dimensions(Resource(4000), Resource(0), Resource(2000)) == (False, [])


def test_less_equal_partly_zero_filtered() -> None:
    req = Resource(1000, GI)
    assert ct.less_equal_partly_with_dimension_zero_filtered(Resource(3000, GI), Resource(2000, 2 * GI), req) == (
        True, ["memory"])
    over = ct.less_equal_partly_with_dimension_zero_filtered(Resource(3000, 3 * GI), Resource(2000, 2 * GI), req)
    assert over == (False, [])
    # both sides zero on memory: that dimension is ignored
    assert ct.less_equal_partly_with_dimension_zero_filtered(Resource(3000, 0), Resource(2000, 0), req)[0] is False


@pytest.mark.parametrize("seed", range(8))
def test_queue_usage_first_sum_is_the_task_by_task_sum(seed) -> None:
    """A session's first queue usage (jobs written or not, of one task or many) adds exactly what
    `add_job_usage` over every job, in order, adds."""
    import random

    from busched.framework.config import DEFAULT_CONFIG, load_config
    from tests.kernel_cases import cache_of, random_cluster

    rng = random.Random(seed)
    ssn = open_session(cache_of(random_cluster(rng)).snapshot(), load_config(DEFAULT_CONFIG), seed=seed)
    jobs = list(ssn.jobs.values())
    assert any(j.written for j in jobs) and any(len(j.tasks) == 1 for j in jobs) or len(jobs) < 3
    got = queue_totals.queue_usage(ssn)
    want = queue_totals._task_by_task(jobs)
    assert list(got) == list(want)
    for q in want:
        assert [r.to_dict() for r in got[q].parts()] == [r.to_dict() for r in want[q].parts()], q
