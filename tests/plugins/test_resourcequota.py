"""resourcequota: namespace ResourceQuotas gate job admission on minResources."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import msgspec

from busched.api.objects import ClusterSpec
from busched.builtin import open_session
from busched.cache.cache import Cache
from busched.framework.config import parse_config
from busched.framework.session import Session
from busched.plugins.resourcequota import add, exceeded, job_min_resources, mask, to_list


def session(jobs: list[dict[str, Any]], quotas: list[dict[str, Any]]) -> Session:
    cluster = {"queues": [{"name": "q"}], "jobs": jobs, "resourceQuotas": quotas}
    cache = Cache()
    cache.load(msgspec.convert(cluster, ClusterSpec))
    cfg = parse_config({"actions": "", "tiers": [{"plugins": [{"name": "resourcequota"}]}]})
    return open_session(cache.snapshot(), cfg)


def job(name: str, ns: str = "ns", **min_res: Any) -> dict[str, Any]:
    j: dict[str, Any] = {"name": name, "namespace": ns, "queue": "q", "minMember": 1, "phase": "Pending"}
    if min_res:
        j["minResources"] = min_res
    return j


def test_fits_exactly_and_rejects_above() -> None:
    ssn = session([job("fit", cpu="2", memory="2G"), job("over", cpu="2001m", memory="2G")],
                  [{"name": "rq", "namespace": "ns", "hard": {"cpu": "2000m", "memory": "2G"}}])
    assert ssn.job_enqueueable(ssn.jobs["ns/fit"])
    assert not ssn.job_enqueueable(ssn.jobs["ns/over"])


def test_quota_used_counts() -> None:
    ssn = session([job("a", cpu="1")],
                  [{"name": "rq", "namespace": "ns", "hard": {"cpu": "2"}, "used": {"cpu": "1500m"}}])
    assert not ssn.job_enqueueable(ssn.jobs["ns/a"])


def test_admitted_jobs_reserve_quota_for_the_rest_of_the_session() -> None:
    ssn = session([job("a", cpu="1"), job("b", cpu="1"), job("other", ns="elsewhere", cpu="5")],
                  [{"name": "rq", "namespace": "ns", "hard": {"cpu": "1"}}])
    a, b = ssn.jobs["ns/a"], ssn.jobs["ns/b"]
    assert ssn.job_enqueueable(a) and ssn.job_enqueueable(b)
    ssn.job_enqueued(a)
    assert not ssn.job_enqueueable(b)
    # another namespace has no quota at all
    assert ssn.job_enqueueable(ssn.jobs["elsewhere/other"])


def test_only_limited_and_requested_dimensions_are_checked() -> None:
    quotas = [{"name": "mem", "namespace": "ns", "hard": {"memory": "1Gi", "pods": 1},
               "used": {"memory": "2Gi", "pods": 5}}]
    ssn = session([job("cpu-only", cpu="64"), job("mem", cpu="1", memory="1")], quotas)
    # the quota does not limit cpu and the job asks for no memory: over-used memory does not matter
    assert ssn.job_enqueueable(ssn.jobs["ns/cpu-only"])
    assert not ssn.job_enqueueable(ssn.jobs["ns/mem"])


def test_every_quota_of_the_namespace_must_fit() -> None:
    quotas = [{"name": "loose", "namespace": "ns", "hard": {"cpu": "10"}},
              {"name": "tight", "namespace": "ns", "hard": {"cpu": "1"}}]
    ssn = session([job("a", cpu="2")], quotas)
    assert not ssn.job_enqueueable(ssn.jobs["ns/a"])


def test_no_min_resources_or_no_quota_is_admitted() -> None:
    ssn = session([job("nomin"), job("free", ns="noquota", cpu="100")],
                  [{"name": "rq", "namespace": "ns", "hard": {"cpu": "0"}}])
    assert ssn.job_enqueueable(ssn.jobs["ns/nomin"])
    assert ssn.job_enqueueable(ssn.jobs["noquota/free"])
    ssn.job_enqueued(ssn.jobs["ns/nomin"])  # must not reserve anything
    assert ssn.plugins["resourcequota"].pending == {}


def test_quota_list_helpers() -> None:
    a = to_list({"cpu": "500m", "memory": "1Gi", "bad": "x"})
    assert a == {"cpu": Fraction(1, 2), "memory": Fraction(2**30)}
    assert add(a, {"cpu": Fraction(1, 2), "pods": Fraction(1)}) == {
        "cpu": Fraction(1), "memory": Fraction(2**30), "pods": Fraction(1)}
    assert mask(a, ["cpu", "gpu"]) == {"cpu": Fraction(1, 2)}
    assert exceeded({"cpu": Fraction(2), "memory": Fraction(5)}, {"cpu": Fraction(1), "pods": Fraction(0)}) == ["cpu"]


def test_min_resources_rebuilt_from_the_job() -> None:
    ssn = session([job("a", cpu="1500m", memory="1Gi", **{"nvidia.com/gpu": "2", "pods": 3})], [])
    rl = job_min_resources(ssn.jobs["ns/a"])
    assert rl == {"cpu": Fraction(3, 2), "memory": Fraction(2**30), "nvidia.com/gpu": Fraction(2),
                  "pods": Fraction(3)}
    assert job_min_resources(session([job("b")], []).jobs["ns/b"]) is None
