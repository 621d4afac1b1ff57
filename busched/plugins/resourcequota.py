"""resourcequota: a job is admitted only if its minResources fit its namespace's ResourceQuotas.

For every quota of the job's namespace, only the resources the quota limits
(``hard``) and the job asks for are checked: quota ``used``, plus the minimum
resources of jobs admitted earlier in this session in the same namespace, plus
the job's own minimum must stay at or below ``hard``.  A job without
minResources, or in a namespace without quotas, is always admitted.
Quantities are compared exactly, as Kubernetes does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from busched.api.job import JobInfo
from busched.api.quantity import QuantityError, parse_quantity
from busched.api.resource import CPU, MEMORY, PODS
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.session import Session

__all__ = ["ResourceQuotaPlugin", "ResourceList"]

PERMIT, REJECT = 1, -1

ResourceList = dict[str, Fraction]


def to_list(raw: Mapping[str, Any] | None) -> ResourceList:
    """Exact quantities of a Kubernetes resource list; values that do not parse are left out."""
    out: ResourceList = {}
    for name, q in (raw or {}).items():
        try:
            out[name] = parse_quantity(q)
        except QuantityError:
            continue
    return out


def add(a: ResourceList, b: ResourceList) -> ResourceList:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, Fraction(0)) + v
    return out


def mask(rl: ResourceList, names: Iterable[str]) -> ResourceList:
    keep = set(names)
    return {k: v for k, v in rl.items() if k in keep}


def exceeded(usage: ResourceList, hard: ResourceList) -> list[str]:
    """Names limited by ``hard`` where ``usage`` is above it (quota LessThanOrEqual)."""
    return sorted(k for k, lim in hard.items() if k in usage and usage[k] > lim)


def job_min_resources(job: JobInfo) -> ResourceList | None:
    """A job's minResources as given, or None when the podgroup sets none."""
    raw = getattr(job, "min_resources_list", None)
    if raw is not None:
        return to_list(raw)
    r = job.min_resources
    if r is None:
        return None
    # Rebuilt from the parsed vector: cpu in thousandths, memory in bytes, pods a count,
    # other scalars in thousandths.  A zero cpu or memory is taken as not given.
    out: ResourceList = {}
    if r.cpu:
        out[CPU] = Fraction(r.cpu).limit_denominator(10**9) / 1000
    if r.memory:
        out[MEMORY] = Fraction(r.memory).limit_denominator(10**9)
    for name, v in r.scalars.items():
        fv = Fraction(v).limit_denominator(10**9)
        out[name] = fv if name == PODS else fv / 1000
    return out


class ResourceQuotaPlugin:
    name = "resourcequota"
    reads_arguments = ()  # every argument it reads (busched.framework.arguments)
    reads_clock = False

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.arguments = Arguments.of(arguments)
        self.quotas: dict[str, list[tuple[str, ResourceList, ResourceList]]] = {}
        self.pending: dict[str, ResourceList] = {}

    def on_session_open(self, ssn: Session) -> None:
        self.quotas = {}
        self.pending = {}
        for rq in ssn.resource_quotas or ():
            ns = rq.get("namespace") or "default"
            entry = (rq.get("name", ""), to_list(rq.get("hard")), to_list(rq.get("used")))
            self.quotas.setdefault(ns, []).append(entry)
        ssn.add_fn(points.JOB_ENQUEUEABLE, self.name, self._enqueueable)
        ssn.add_fn(points.JOB_ENQUEUED, self.name, self._enqueued)

    def _enqueueable(self, job: JobInfo) -> int:
        requests = job_min_resources(job)
        if requests is None:
            return PERMIT
        quotas = self.quotas.get(job.namespace)
        if not quotas:
            return PERMIT
        for _name, hard, used in quotas:
            requested = mask(requests, hard)
            in_use = used
            pending = self.pending.get(job.namespace)
            if pending is not None:
                in_use = add(pending, in_use)
            usage = mask(add(in_use, requested), requested)
            if exceeded(usage, hard):
                return REJECT
        return PERMIT

    def _enqueued(self, job: JobInfo) -> None:
        requests = job_min_resources(job)
        if requests is None or job.namespace not in self.quotas:
            return
        self.pending[job.namespace] = add(self.pending.get(job.namespace, {}), requests)

    def on_session_close(self, ssn: Session) -> None:
        self.quotas = {}
        self.pending = {}
