"""The rules an agent must keep (docs/agents.md, "The rules"), each checked by driving the agent through it.

`check_agent` runs them in order against one node's running agent, with a `Probe` in the scheduler's
place, and returns one `RuleResult` per rule: pass, fail (with what the agent did instead) or skip
(a rule that needs what an earlier one failed to set up, or a restart nobody can perform).  The rules
build on each other the way a task's life does: the task bound in ``bind`` is the one bound again in
``duplicate-bind`` and evicted in ``evict``.  When no heartbeat is heard at all, nothing else is tried.

Restarting the agent is the operator's (or CI's) part: ``restart`` is a coroutine function that makes
the agent restart, e.g. `busched agent-check --restart-cmd` running a shell command.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from busched.agentcheck.probe import Probe, ResultMsg
from busched.api import build
from busched.api.objects import TaskSpec
from busched.api.resource import PODS
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.client import Bus

__all__ = ["RULES", "RuleResult", "check_agent", "Restart"]

Restart = Callable[[], Awaitable[None]]

# rule -> what it checks, in the order they run
RULES: dict[str, str] = {
    "heartbeat": "heartbeats arrive on busched.heartbeat.<node>, naming the node and one boot",
    "register": "the node is registered (node.upsert) with allocatable pods, or nothing can be placed on it",
    "bind": "a bind is answered bind.accepted or task.phase Running, for its attempt, by the heartbeating boot",
    "heartbeat-holding": "a heartbeat then holds the task at that attempt, its throughSeq covering the bind",
    "duplicate-bind": "the same bind delivered again is not run again: no second answer, still held once",
    "stale-attempt": "a bind of an older attempt than the one it runs is ignored",
    "stale-fence": "an evict whose fence is lower than one seen for the task is ignored",
    "evict": "an evict of a running attempt is answered task.phase Failed, and the task is no longer held",
    "evict-unknown": "an evict of an attempt it does not run is answered task.phase Failed (so it can be placed)",
    "bind-after-evict": "a bind that comes after its attempt's evict is not run",
    "other-node": "a decision whose body names another node is neither run nor answered",
    "restart": "after a restart (new boot) a bind answered before is not run again; an attempt not held is "
               "answered Failed on evict",
    "own-node-results": "every result is on the node's own result subject and names the node",
    "through-seq": "within one boot, throughSeq never goes back",
}


@dataclass
class RuleResult:
    rule: str
    verdict: str  # pass | fail | skip
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"


def _taken(r: ResultMsg) -> bool:
    return isinstance(r, m.BindAccepted) or (isinstance(r, m.TaskPhaseChanged) and r.phase == "Running")


def _failed(r: ResultMsg) -> bool:
    return isinstance(r, m.TaskPhaseChanged) and r.phase == "Failed"


def _describe(r: ResultMsg) -> str:
    if isinstance(r, m.TaskPhaseChanged):
        return f"task.phase {r.phase}" + (f" ({r.reason})" if r.reason else "")
    if isinstance(r, m.BindRejected):
        return f"bind.rejected ({r.reason})"
    return type(r).__name__


class _Run:
    """One run of the rules; the state they hand each other (the boot, the tasks and their fences)."""

    def __init__(self, probe: Probe, restart: Restart | None, restart_timeout: float) -> None:
        self.p = probe
        self.node = probe.node
        self.restart_fn = restart
        self.restart_timeout = restart_timeout
        self.boot = ""
        self.out: list[RuleResult] = []
        self.a = self.b = ""  # the task bound in `bind`; the task of `stale-attempt`
        self.fence: dict[str, int] = {}
        self.taken: dict[str, int] = {}  # task -> the attempt the agent took and has not said stopped

    def put(self, rule: str, ok: bool, detail: str = "") -> None:
        self.out.append(RuleResult(rule, "pass" if ok else "fail", detail))

    def skip(self, rule: str, why: str) -> None:
        self.out.append(RuleResult(rule, "skip", why))

    async def answer(self, key: str, attempt: int, pred: Callable[[ResultMsg], bool],
                     after: int = 0) -> ResultMsg | None:
        """The first result for ``key``'s ``attempt`` (from the ``after``-th on) that ``pred`` accepts."""
        def found() -> ResultMsg | None:
            return next((h.msg for h in self.p.results_for(key, attempt)[after:] if pred(h.msg)), None)
        return await self.p.wait_for(found)

    async def bound(self, label: str, attempt: int = 1) -> tuple[str, ResultMsg | None]:
        """A new task bound at ``attempt`` (record first, then the decision); its key and the agent's answer."""
        key = self.p.key(label)
        self.fence[key] = await self.p.record(key, attempt)
        await self.p.bind(key, attempt, self.fence[key])
        r = await self.answer(key, attempt, lambda r: _taken(r) or isinstance(r, m.BindRejected))
        if r is not None and _taken(r):
            self.taken[key] = attempt
        return key, r

    # -- the rules -----------------------------------------------------------------------------------------------
    async def heartbeat(self) -> bool:
        first = await self.p.wait_for(self.p.last_heartbeat)
        if first is None:
            self.put("heartbeat", False, f"no heartbeat on {S.heartbeat_subject(self.node)} within "
                                         f"{self.p.timeout:g}s: is the agent running and serving this node?")
            return False
        second = await self.p.heartbeat_after(lambda h: True)
        bad = [f"node {h.node!r}" for h in (first, second) if h is not None and h.node != self.node]
        if not first.boot:
            bad.append("no boot")
        if second is None:
            bad.append("only one heartbeat")
        elif second.boot != first.boot:
            bad.append(f"the boot changed without a restart ({first.boot} -> {second.boot})")
        self.boot = first.boot
        self.put("heartbeat", not bad, "; ".join(bad) or f"boot {first.boot}, every {first.interval:g}s")
        return not bad

    async def register(self) -> None:
        last = await self.p.bus.last_state(S.state_subject("node", self.node))
        try:
            msg = m.decode(last[1]) if last is not None else None
        except m.DecodeError as e:
            self.put("register", False, f"its node.upsert does not decode: {e}")
            return
        if not isinstance(msg, m.NodeUpsert) or msg.node.name != self.node:
            self.put("register", False, f"no node.upsert on {S.state_subject('node', self.node)}")
            return
        try:
            pods = build.node_info(msg.node).allocatable.get(PODS)
        except ValueError as e:
            self.put("register", False, f"its spec does not build: {e}")
            return
        self.put("register", pods > 0, f"allocatable {dict(msg.node.allocatable)}" + (
            "" if pods > 0 else ": no pods, so every task is refused with Insufficient pods"))

    async def bind(self) -> None:
        key, r = await self.bound("bind")
        if r is None:
            self.put("bind", False, f"no answer for {key} attempt 1 within {self.p.timeout:g}s")
        elif isinstance(r, m.BindRejected):
            self.put("bind", False, f"rejected: {r.reason} (the probe's task asks for "
                                    f"{dict(self.p.template.requests)}; --task gives another)")
        elif r.boot != self.boot:
            self.put("bind", False, f"answered by boot {r.boot!r}, but the heartbeats say {self.boot!r}")
        else:
            self.a = key
            self.put("bind", True, _describe(r))

    async def heartbeat_holding(self) -> None:
        if not self.a:
            return self.skip("heartbeat-holding", "needs bind")
        hb = await self.p.heartbeat_after(lambda h: h.holding.get(self.a) == 1)
        if hb is None:
            last = self.p.last_heartbeat()
            return self.put("heartbeat-holding", False, f"no heartbeat holds {self.a}: 1 (last holding "
                                                        f"{dict(last.holding) if last else {}})")
        # the bind's own decision sequence: the latest decision on its subject is at most the heartbeat's
        seq = await self._decision_seq(self.a)
        self.put("heartbeat-holding", hb.through_seq >= seq,
                 f"throughSeq {hb.through_seq}, the bind at {seq}")

    async def _decision_seq(self, key: str) -> int:
        last = await self.p.bus.last_decision(S.decision_subject(self.node, "bind", key))
        return last[0] if last is not None else 0

    async def quiet_after(self, rule: str, seq: int, key: str, attempt: int, n_before: int,
                          bad: Callable[[ResultMsg], bool], held: int | None) -> None:
        """The agent read decision ``seq`` and said nothing ``bad`` about ``key``/``attempt``; its heartbeat
        holds ``key`` at ``held`` (None: not at all)."""
        hb = await self.p.settle(seq)
        if hb is None:
            return self.put(rule, False, f"no heartbeat's throughSeq reached the decision at {seq}")
        said = [h.msg for h in self.p.results_for(key, attempt)[n_before:] if bad(h.msg)]
        if said:
            return self.put(rule, False, f"answered {_describe(said[0])} for attempt {attempt}")
        if hb.holding.get(key) != held:
            return self.put(rule, False, f"the heartbeat holds {key}: {hb.holding.get(key)}, expected {held}")
        self.put(rule, True)

    async def duplicate_bind(self) -> None:
        if not self.a:
            return self.skip("duplicate-bind", "needs bind")
        n = len(self.p.results_for(self.a, 1))
        seq = await self.p.bind(self.a, 1, self.fence[self.a], redelivery=True)
        await self.quiet_after("duplicate-bind", seq, self.a, 1, n, lambda r: True, 1)

    async def stale_attempt(self) -> None:
        key = self.p.key("stale")
        old = await self.p.record(key, 1)
        self.fence[key] = await self.p.record(key, 2)
        await self.p.bind(key, 2, self.fence[key])
        r = await self.answer(key, 2, lambda r: _taken(r) or isinstance(r, m.BindRejected))
        if r is None or not _taken(r):
            return self.put("stale-attempt", False, f"attempt 2 of {key} was not taken: "
                                                    f"{_describe(r) if r else 'no answer'}")
        self.b = key
        self.taken[key] = 2
        self.fence[key + "#old"] = old
        seq = await self.p.bind(key, 1, old)
        await self.quiet_after("stale-attempt", seq, key, 1, 0, lambda r: True, 2)

    async def stale_fence(self) -> None:
        if not self.b:
            return self.skip("stale-fence", "needs stale-attempt")
        n = len(self.p.results_for(self.b, 2))
        seq = await self.p.evict(self.b, 2, self.fence[self.b + "#old"], redelivery=True)
        await self.quiet_after("stale-fence", seq, self.b, 2, n, _failed, 2)

    async def stopped(self, key: str, attempt: int, stop: str) -> ResultMsg | None:
        """Stop ``key``'s ``attempt`` as the scheduler does (record ``evicting``, then the evict); the answer."""
        n = len(self.p.results_for(key, attempt))
        fence = await self.p.record(key, attempt, "evicting", stop=stop, reason="agentcheck")
        await self.p.evict(key, attempt, fence)
        r = await self.answer(key, attempt, _failed, after=n)
        if r is not None and self.taken.get(key) == attempt:
            del self.taken[key]
        return r

    async def evict(self) -> None:
        if not self.a:
            return self.skip("evict", "needs bind")
        r = await self.stopped(self.a, 1, "evict")
        if r is None:
            return self.put("evict", False, f"no task.phase Failed for {self.a} attempt 1")
        if r.boot != self.boot:
            return self.put("evict", False, f"answered by boot {r.boot!r}, not {self.boot!r}")
        hb = await self.p.heartbeat_after(lambda h: self.a not in h.holding)
        self.put("evict", hb is not None, _describe(r) if hb else "answered, but the heartbeats still hold it")

    async def evict_unknown(self) -> None:
        key = self.p.key("unknown")
        self.fence[key] = await self.p.record(key, 1)
        r = await self.stopped(key, 1, "lease")
        self.put("evict-unknown", r is not None, _describe(r) if r else
                 "no answer: the scheduler cannot place the task again until the node is declared lost")
        if r is None:
            return self.skip("bind-after-evict", "needs evict-unknown")
        n = len(self.p.results_for(key, 1))
        seq = await self.p.bind(key, 1, self.fence[key])
        await self.quiet_after("bind-after-evict", seq, key, 1, n, _taken, None)

    async def other_node(self) -> None:
        key = self.p.key("misrouted")
        fence = await self.p.record(key, 1)
        seq = await self.p.bind(key, 1, fence, node_in_body=f"{self.node}-elsewhere")
        await self.quiet_after("other-node", seq, key, 1, 0, lambda r: True, None)

    async def restart(self) -> None:
        if self.restart_fn is None:
            return self.skip("restart", "give --restart-cmd CMD (or --restart-manual) to check it")
        key, r = await self.bound("restart")
        if isinstance(r, m.BindAccepted):  # mid-task: once it runs
            r = await self.answer(key, 1, lambda x: isinstance(x, m.TaskPhaseChanged))
        if r is None or not _taken(r) or isinstance(r, m.BindAccepted):
            return self.put("restart", False, f"the task to restart with never ran: "
                                              f"{_describe(r) if r else 'no answer'}")
        old = self.boot
        try:
            await self.restart_fn()
        except Exception as e:  # noqa: BLE001 - the operator's hook: its failure is this rule's verdict
            return self.put("restart", False, f"restarting the agent failed: {e}")
        hb = await self.p.heartbeat_after(lambda h: h.boot != old, timeout=self.restart_timeout)
        if hb is None:
            return self.put("restart", False, f"no heartbeat with a new boot within {self.restart_timeout:g}s")
        self.boot = hb.boot
        n = len(self.p.results_for(key, 1))
        seq = await self.p.bind(key, 1, self.fence[key], redelivery=True)
        hb = await self.p.settle(seq)
        if hb is None:
            return self.put("restart", False, f"no heartbeat's throughSeq reached the decision at {seq}")
        again = [h.msg for h in self.p.results_for(key, 1)[n:] if _taken(h.msg)]
        if again:
            return self.put("restart", False, f"attempt 1 answered again after the restart: {_describe(again[0])}")
        if hb.holding.get(key) == 1:
            return self.put("restart", True, "the new boot re-attached to the running attempt")
        r = await self.stopped(key, 1, "restart")
        if r is None or r.boot != self.boot:
            return self.put("restart", False, "the new boot did not answer the evict of the attempt it lost"
                            + (f" (boot {r.boot!r} did)" if r else ""))
        self.put("restart", True, f"boot {old} -> {self.boot}; the lost attempt answered {_describe(r)}")

    def own_node_results(self) -> None:
        bad = [h for h in self.p.results if h.msg.node != self.node
               or h.subject != S.result_subject(self.node, f"{h.msg.namespace}/{h.msg.name}")]
        self.put("own-node-results", not bad, f"{_describe(bad[0].msg)} for node {bad[0].msg.node!r} on "
                                              f"{bad[0].subject}" if bad else f"{len(self.p.results)} results")

    def through_seq(self) -> None:
        last: dict[str, int] = {}
        for h in self.p.heartbeats:
            if h.through_seq < last.get(h.boot, 0):
                return self.put("through-seq", False, f"boot {h.boot}: {last[h.boot]} then {h.through_seq}")
            last[h.boot] = h.through_seq
        self.put("through-seq", True)

    async def clean_up(self) -> None:
        """Stop every attempt of the probe's tasks the agent took or holds and has not said stopped (so an
        executing agent stops them; one it does not run is answered at once)."""
        hb = self.p.last_heartbeat()
        held = {k: a for k, a in (hb.holding.items() if hb else ()) if k in self.p.tasks}
        for key, attempt in sorted({**self.taken, **held}.items()):
            await self.stopped(key, attempt, "deleted")


async def check_agent(bus: Bus, node: str, *, timeout: float = 10.0, namespace: str = "agentcheck",
                      restart: Restart | None = None, restart_timeout: float = 60.0,
                      task: TaskSpec | None = None) -> list[RuleResult]:
    """Drive ``node``'s running agent through every rule of `RULES`; one result per rule, in that order."""
    probe = Probe(bus, node, namespace=namespace, timeout=timeout, task_template=task)
    await probe.start()
    run = _Run(probe, restart, restart_timeout)
    try:
        if not await run.heartbeat():
            for rule in list(RULES)[1:]:
                run.skip(rule, "no agent heard")
            return run.out
        await run.register()
        for step in (run.bind, run.heartbeat_holding, run.duplicate_bind, run.stale_attempt, run.stale_fence,
                     run.evict, run.evict_unknown, run.other_node, run.restart):
            await step()
        run.own_node_results()
        run.through_seq()
        await run.clean_up()
    finally:
        await probe.close()
    return run.out
