"""What gangpreempt and gangreclaim share: the arguments, the starving-job loop, the domain search.

Algorithm, in session hooks (each action supplies how it picks its victim
bundles, `GangEvictionAction.select_bundles`, and whether a queue may evict at all):

1. Every job that is not Pending, passes ``ssn.job_valid`` and whose queue
   exists puts its queue in a queue heap (``ssn.queue_order_fn``); a job for
   which ``ssn.job_starving`` holds goes in its queue's job heap
   (``ssn.job_order_fn``).
2. Pop queues; pop each queue's starving jobs.  For a job, in a fresh
   statement: its pending tasks (`gang_plan.pending_for_eviction`) and their
   summed request (the *need*); the candidate domains
   (`gang_plan.candidate_domains`, at most ``maxDomains``); in each domain the
   action's victim bundles, in order, taken one more at a time: once the
   domain's idle and releasing resources plus the victims taken so far cover
   the need, a dry run (`gang_plan.nomination_plan`) checks that the job would
   be pipelined in the domain with exactly those victims evicted; the first
   plan that works is replayed in the job's statement.
3. The statement is committed when ``ssn.job_pipelined(job)`` holds, and the
   sub-jobs placed are nominated to the hypernodes they went to; else it is
   discarded.

Arguments (the action's ``configurations`` entry): ``maxDomains`` (default 8;
0 or less means the default), ``allowWholeBundle`` (default true: victims may
break a job's gang, costing it whole).  The predicate error cache of the dry
run follows the *allocate* action's ``predicateErrorCacheEnable`` (default on).
Volcano: pkg/scheduler/actions/gangpreempt, gangreclaim.
"""

from __future__ import annotations

from busched.actions import gang_bundle as gb
from busched.actions import gang_plan as gp
from busched.actions.util import predicate_error_cache, starving_by_queue
from busched.api.job import JobInfo
from busched.api.queue import QueueInfo
from busched.api.resource import ZERO, Resource, total
from busched.api.task import TaskInfo
from busched.framework.hypernodes import CLUSTER_TOP
from busched.framework.points import EvictionContext
from busched.framework.session import Session
from busched.framework.statement import Statement

__all__ = ["ALLOW_WHOLE_BUNDLE_KEY", "DEFAULT_MAX_DOMAINS", "MAX_DOMAINS_KEY", "GangEvictionAction"]

MAX_DOMAINS_KEY = "maxDomains"
ALLOW_WHOLE_BUNDLE_KEY = "allowWholeBundle"
DEFAULT_MAX_DOMAINS = 8


class GangEvictionAction:
    name = ""
    reads_arguments = (MAX_DOMAINS_KEY, ALLOW_WHOLE_BUNDLE_KEY)  # (allocate's predicateErrorCacheEnable too)
    kind = ""  # the EvictionContext kind the unified-evictable vote hears

    def __init__(self) -> None:
        self.max_domains = DEFAULT_MAX_DOMAINS
        self.allow_whole_bundle = True
        self.enable_predicate_error_cache = True

    def parse_arguments(self, ssn: Session) -> None:
        args = ssn.config.action_arguments(self.name, self.reads_arguments)
        self.max_domains = args.get_int(MAX_DOMAINS_KEY, self.max_domains)
        if self.max_domains <= 0:
            self.max_domains = DEFAULT_MAX_DOMAINS
        self.allow_whole_bundle = args.get_bool(ALLOW_WHOLE_BUNDLE_KEY, self.allow_whole_bundle)
        self.enable_predicate_error_cache = predicate_error_cache(ssn.config, "allocate")

    # -- what each action decides ------------------------------------------------------------------
    def queue_may_evict(self, ssn: Session, queue: QueueInfo) -> bool:
        return True

    def job_may_evict(self, ssn: Session, queue: QueueInfo, pending: list[TaskInfo]) -> bool:
        return True

    def candidate(self, ssn: Session, job: JobInfo, task: TaskInfo, owner: JobInfo) -> bool:
        """Whether ``task`` (of ``owner``) on a domain node may be a victim for ``job``."""
        raise NotImplementedError

    def sort_bundles(self, ssn: Session, job: JobInfo, bundles: list[gb.Bundle], need: Resource) -> None:
        raise NotImplementedError

    # -- the action --------------------------------------------------------------------------------
    def execute(self, ssn: Session) -> None:
        self.parse_arguments(ssn)
        queues, starving = starving_by_queue(ssn)
        while not queues.empty():
            queue = queues.pop()
            if not self.queue_may_evict(ssn, queue):
                continue
            jobs = starving.get(queue.uid)
            while jobs is not None and not jobs.empty():
                job = jobs.pop()
                stmt = Statement(ssn)
                nominations = self.evict_for_job(ssn, stmt, queue, job)
                if ssn.job_pipelined(job):
                    stmt.commit()
                    gp.apply_nominations(job, nominations)
                else:
                    stmt.discard()

    def evict_for_job(self, ssn: Session, stmt: Statement, queue: QueueInfo, job: JobInfo) -> dict[str, str]:
        pending = gp.pending_for_eviction(ssn, job)
        if not pending or not self.job_may_evict(ssn, queue, pending):
            return {}
        need = total(t.init_resreq for t in pending)
        topo = ssn.topology
        for domain in gp.candidate_domains(ssn, job, self.max_domains):
            nodes = topo.real_nodes_list.get(domain) or []
            if not nodes:
                continue
            bundles = self.select_bundles(ssn, job, need, domain)
            if not bundles:
                continue
            idle = total(r for n in nodes for r in (n.idle, n.releasing))
            hn = topo.hypernodes.get(domain) or topo.hypernodes[CLUSTER_TOP]
            victims: list[TaskInfo] = []
            for b in bundles:
                victims.extend(b.tasks)
                available = idle.clone()
                for v in victims:
                    available.add(v.resreq)
                if not need.less_equal(available, ZERO):
                    continue
                found = gp.nomination_plan(ssn, queue, job, hn, list(victims), self.name,
                                           self.enable_predicate_error_cache)
                if found is None:
                    continue
                plan, nominations = found
                try:
                    stmt.recover(plan)
                except Exception:  # noqa: BLE001 - a plan that no longer replays: try the next bundle
                    stmt.discard()
                    continue
                return nominations
        return {}

    def select_bundles(self, ssn: Session, job: JobInfo, need: Resource, domain: str) -> list[gb.Bundle]:
        """The victim bundles of ``domain`` for ``job``, in the order they are to be taken."""
        by_job: dict[str, list[TaskInfo]] = {}
        for node in ssn.topology.real_nodes_list.get(domain) or []:
            for t in node.tasks.values():
                owner = ssn.jobs.get(t.job)
                if owner is None or not gp.job_preemptable_for_gang(owner):
                    continue
                if self.candidate(ssn, job, t, owner):
                    by_job.setdefault(t.job, []).append(t.clone())
        bundles = [b for uid, tasks in by_job.items() for b in gb.job_bundles(ssn.jobs[uid], tasks)]
        if not bundles:
            return []
        self.sort_bundles(ssn, job, bundles, need)
        allowed = ssn.unified_evictable(EvictionContext(self.kind, job, domain), gb.flatten(bundles))
        if not allowed:
            return []
        valid = gb.keep_allowed(bundles, {t.uid for t in allowed})
        self.sort_bundles(ssn, job, valid, need)
        return [b for b in valid if b.kind != gb.WHOLE or self.allow_whole_bundle]
