"""extender: hand extension points to an HTTP service, as Volcano's extender plugin does.

Each configured verb registers one callback; the callback POSTs the task, node, job or queue (in
Volcano's JSON shape, busched.plugins.extender.wire) to ``<urlPrefix>/<verb>`` and reads the answer.
What an answer means, and what a failed call (unreachable, slower than ``httpTimeout``, not HTTP
200, a malformed answer) means, is Volcano's, except that ``ignorable: true`` makes a failed call
count as no answer at all (docs/extender.md has the table):

- predicate: an answer with a status fails the task on that node (code as answered, Error when 0);
  a failed call fails the task on that node with code Error -- never the whole cycle;
- prioritize (batch node order): the answered scores, for the nodes asked about; a failed call or an
  error message fails the task for this cycle (the session names the plugin);
- preemptable / reclaimable: the answered victims among the candidates sent, with the answered
  vote; a failed call rejects (no victims);
- jobEnqueueable: the answered vote; a failed call rejects;
- queueOverused: the answer; a failed call says overused;
- jobReady: the answer; a failed call says ready (Volcano's ``!ignorable``);
- jobEnqueued, onSessionClose, allocateFunc, deallocateFunc: told, the answer not acted on (a
  busched event handler cannot refuse an allocation; a failure is logged);
- onSessionOpen: a failed call registers nothing this session, unless ignorable.

``managedResources`` (a list of resource names) limits the task-level verbs to tasks that ask for one
of them, as Volcano's ``IsInterested``.  Failures are logged once per verb per session, with a
count at close, so a dead extender does not write a line per node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from busched.api.fit import Code, FitError, Status
from busched.api.job import JobInfo
from busched.api.node import NodeInfo
from busched.api.queue import QueueInfo
from busched.api.task import TaskInfo
from busched.framework import points
from busched.framework.arguments import Arguments
from busched.framework.hooks import EventHandler
from busched.framework.session import Session
from busched.plugins.extender import client, wire

__all__ = ["ExtenderPlugin", "ExtenderConfig", "PERMIT", "ABSTAIN", "REJECT"]

log = logging.getLogger("busched.plugins.extender")

NAME = "extender"
PERMIT, ABSTAIN, REJECT = 1, 0, -1
DEFAULT_TIMEOUT = 1.0  # seconds (Volcano's default http timeout)

URL_PREFIX = "extender.urlPrefix"
HTTP_TIMEOUT = "extender.httpTimeout"
IGNORABLE = "extender.ignorable"
MANAGED_RESOURCES = "extender.managedResources"
# argument -> the verb it configures (the attribute of ExtenderConfig.verbs)
VERB_ARGUMENTS: dict[str, str] = {
    "extender.onSessionOpenVerb": "onSessionOpen",
    "extender.onSessionCloseVerb": "onSessionClose",
    "extender.predicateVerb": "predicate",
    "extender.prioritizeVerb": "prioritize",
    "extender.preemptableVerb": "preemptable",
    "extender.reclaimableVerb": "reclaimable",
    "extender.queueOverusedVerb": "queueOverused",
    "extender.jobEnqueueableVerb": "jobEnqueueable",
    "extender.jobEnqueuedVerb": "jobEnqueued",
    "extender.jobReadyVerb": "jobReady",
    "extender.allocateFuncVerb": "allocateFunc",
    "extender.deallocateFuncVerb": "deallocateFunc",
}


class ExtenderConfig:
    """The plugin's arguments, read as Volcano's ``parseExtenderConfig`` does."""

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        args = Arguments.of(arguments)
        self.url_prefix = args.get_str(URL_PREFIX, "")
        self.verbs: dict[str, str] = {verb: args.get_str(key, "") for key, verb in VERB_ARGUMENTS.items()}
        self.ignorable = args.get_bool(IGNORABLE, False)
        timeout = args.get_duration(HTTP_TIMEOUT, DEFAULT_TIMEOUT)
        # (Go's 0 means no timeout; a session cannot wait forever, so 0 or less keeps the default)
        self.timeout = timeout if timeout > 0 else DEFAULT_TIMEOUT
        self.managed: frozenset[str] = _managed(args.get(MANAGED_RESOURCES))

    def url(self, verb: str) -> str:
        return self.url_prefix.rstrip("/") + "/" + verb


def _managed(raw: Any) -> frozenset[str]:
    """A list of resource names (Volcano's ``[]string``); a comma-separated string is taken too."""
    if isinstance(raw, str):
        return frozenset(s.strip() for s in raw.split(",") if s.strip())
    if isinstance(raw, list) and all(isinstance(s, str) for s in raw):
        return frozenset(raw)
    if raw is not None:
        log.warning("extender: %s must be a list of resource names, got %r: ignored", MANAGED_RESOURCES, raw)
    return frozenset()


class ExtenderPlugin:
    name = NAME
    reads_clock = True  # its answers depend on a service's state, not on cluster events: no cycle is quiet
    reads_arguments = (URL_PREFIX, HTTP_TIMEOUT, IGNORABLE, MANAGED_RESOURCES, *VERB_ARGUMENTS)

    def __init__(self, arguments: Mapping[str, Any], post: Callable[[str, bytes, float], bytes] | None = None) -> None:
        self.config = ExtenderConfig(arguments)
        self._post = post or client.post
        self.failures: dict[str, int] = {}

    # -- the call --------------------------------------------------------------------------------
    def call(self, verb: str, body: Any, answer: type[Any]) -> Any:
        """The answer of ``verb`` decoded as ``answer``; `client.ExtenderError` when the call failed."""
        cfg = self.config
        if not cfg.url_prefix:
            raise client.ExtenderError(f"no {URL_PREFIX} configured")
        data = self._post(cfg.url(cfg.verbs[verb]), wire.encode(body), cfg.timeout)
        try:
            return wire.decode(answer, data)
        except wire.MalformedAnswerError as e:
            raise client.ExtenderError(f"{verb}: {e}") from None

    def _failed(self, verb: str, error: Exception) -> None:
        n = self.failures[verb] = self.failures.get(verb, 0) + 1
        if n == 1:
            log.warning("extender %s failed%s: %s", verb, " (ignored)" if self.config.ignorable else "", error)

    def interested(self, task: TaskInfo) -> bool:
        """Whether the task asks for a resource the extender manages (every task, when it manages none)."""
        managed = self.config.managed
        if not managed:
            return True
        for r in (task.resreq, task.init_resreq):
            if any(v and name in managed for name, v in r.scalars.items()):
                return True
            if (r.cpu and "cpu" in managed) or (r.memory and "memory" in managed):
                return True
        return False

    # -- the session -----------------------------------------------------------------------------
    def on_session_open(self, ssn: Session) -> None:
        verbs, ignorable = self.config.verbs, self.config.ignorable
        if verbs["onSessionOpen"]:
            body = {"Jobs": {uid: wire.job_view(j) for uid, j in ssn.jobs.items()},
                    "Nodes": {name: wire.node_view(n) for name, n in ssn.nodes.items()},
                    "Queues": {uid: wire.queue_view(q) for uid, q in ssn.queues.items()},
                    "NamespaceInfo": {}, "RevocableNodes": {}, "NodeList": None}
            try:
                self.call("onSessionOpen", body, wire.EmptyAnswer)
            except client.ExtenderError as e:
                self._failed("onSessionOpen", e)
                if not ignorable:
                    return  # (Volcano registers nothing when the session could not be opened there)
        if verbs["predicate"]:
            ssn.add_fn(points.PREDICATE, NAME, self._predicate)
        if verbs["prioritize"]:
            ssn.add_fn(points.BATCH_NODE_ORDER, NAME, self._prioritize)
        if verbs["preemptable"]:
            ssn.add_fn(points.PREEMPTABLE, NAME, self._victims("preemptable"))
        if verbs["reclaimable"]:
            ssn.add_fn(points.RECLAIMABLE, NAME, self._victims("reclaimable"))
        if verbs["jobEnqueueable"]:
            ssn.add_fn(points.JOB_ENQUEUEABLE, NAME, self._enqueueable)
        if verbs["jobEnqueued"]:
            ssn.add_fn(points.JOB_ENQUEUED, NAME, self._enqueued)
        if verbs["queueOverused"]:
            ssn.add_fn(points.OVERUSED, NAME, self._overused)
        if verbs["jobReady"]:
            ssn.add_fn(points.JOB_READY, NAME, self._ready)
        if verbs["allocateFunc"] or verbs["deallocateFunc"]:
            ssn.add_event_handler(EventHandler(
                allocate=self._event("allocateFunc") if verbs["allocateFunc"] else None,
                deallocate=self._event("deallocateFunc") if verbs["deallocateFunc"] else None))

    def on_session_close(self, ssn: Session) -> None:
        if self.config.verbs["onSessionClose"]:
            try:
                self.call("onSessionClose", {}, wire.EmptyAnswer)
            except client.ExtenderError as e:
                self._failed("onSessionClose", e)
        for verb, n in self.failures.items():
            if n > 1:
                log.warning("extender %s failed %d times this session", verb, n)

    # -- the callbacks -----------------------------------------------------------------------------
    def _predicate(self, task: TaskInfo, node: NodeInfo) -> None:
        if not self.interested(task):
            return
        try:
            answer = self.call("predicate", {"task": wire.task_view(task), "node": wire.node_view(node)},
                               wire.PredicateAnswer)
        except client.ExtenderError as e:
            self._failed("predicate", e)
            if self.config.ignorable:
                return
            raise FitError(task.key, node.name, [Status(Code.Error, str(e), NAME)]) from None
        if answer.status:
            code = Code(answer.code) if answer.code else Code.Error  # a message without a code is an Error
            raise FitError(task.key, node.name, [Status(code, answer.status, NAME)])

    def _prioritize(self, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, float]:
        if not self.interested(task):
            return {}
        try:
            body = {"task": wire.task_view(task), "nodes": [wire.node_view(n) for n in nodes]}
            answer = self.call("prioritize", body, wire.PrioritizeAnswer)
            if answer.errorMessage or answer.nodeScore is None:
                raise client.ExtenderError(f"prioritize: {answer.errorMessage or 'no nodeScore in the answer'}")
        except client.ExtenderError as e:
            self._failed("prioritize", e)
            if self.config.ignorable:
                return {}
            raise
        asked = {n.name for n in nodes}
        return {name: score for name, score in answer.nodeScore.items() if name in asked}

    def _victims(self, verb: str) -> Callable[[TaskInfo, list[TaskInfo]], tuple[list[TaskInfo], int]]:
        def victims(actor: TaskInfo, candidates: list[TaskInfo]) -> tuple[list[TaskInfo], int]:
            if not self.interested(actor):
                return [], ABSTAIN
            try:
                answer = self.call(verb, {"evictor": wire.task_view(actor),
                                          "evictees": [wire.task_view(t) for t in candidates]}, wire.VictimsAnswer)
            except client.ExtenderError as e:
                self._failed(verb, e)
                return [], (ABSTAIN if self.config.ignorable else REJECT)
            by_uid = {t.uid: t for t in candidates}
            chosen: dict[str, TaskInfo] = {}
            for v in answer.victims or ():
                t = by_uid.get(v.UID)
                if t is not None:  # (a victim that was not a candidate is not ours to evict)
                    chosen.setdefault(t.uid, t)
            return list(chosen.values()), answer.status

        return victims

    def _enqueueable(self, job: JobInfo) -> int:
        try:
            return int(self.call("jobEnqueueable", {"job": wire.job_view(job)}, wire.VoteAnswer).status)
        except client.ExtenderError as e:
            self._failed("jobEnqueueable", e)
            return ABSTAIN if self.config.ignorable else REJECT

    def _enqueued(self, job: JobInfo) -> None:
        try:
            self.call("jobEnqueued", {"job": wire.job_view(job)}, wire.EmptyAnswer)
        except client.ExtenderError as e:
            self._failed("jobEnqueued", e)

    def _overused(self, queue: QueueInfo) -> bool:
        try:
            return bool(self.call("queueOverused", {"queue": wire.queue_view(queue)}, wire.OverusedAnswer).overused)
        except client.ExtenderError as e:
            self._failed("queueOverused", e)
            return not self.config.ignorable

    def _ready(self, job: JobInfo) -> bool:
        try:
            return bool(self.call("jobReady", {"job": wire.job_view(job)}, wire.ReadyAnswer).status)
        except client.ExtenderError as e:
            self._failed("jobReady", e)
            return True  # ignored when ignorable; Volcano's `!ignorable` (ready) otherwise

    def _event(self, verb: str) -> Callable[[TaskInfo], None]:
        def handle(task: TaskInfo) -> None:
            if not self.interested(task):
                return
            try:
                answer = self.call(verb, {"task": wire.task_view(task)}, wire.EventAnswer)
            except client.ExtenderError as e:
                self._failed(verb, e)
                return
            if answer.errorMessage:
                self._failed(verb, client.ExtenderError(answer.errorMessage))

        return handle
