"""Agent liveness alone (busched.scheduler.agents.Liveness): bindings and results as plain dicts, the clock
injected, what it does to tasks recorded; no bus and no scheduler."""

from __future__ import annotations

from dataclasses import dataclass

from busched.bus import messages as m
from busched.bus import subjects as S
from busched.scheduler.agents import Liveness
from busched.scheduler.records import Binding, CycleReport, Result


@dataclass
class Settings:
    heartbeat_timeout: float = 5.0
    node_lost_grace: float = 20.0
    lost_hold_fraction: float = 0.5
    lost_hold_min_nodes: int = 4


class World:
    def __init__(self) -> None:
        self.now = 0.0
        self.connected = True
        self.bindings: dict[str, Binding] = {}
        self.results: dict[str, Result] = {}
        self.calls: list[tuple[str, ...]] = []
        self.version = 0

    def liveness(self, **settings: float) -> Liveness:
        def next_version() -> int:
            self.version += 1
            return self.version

        return Liveness(Settings(**settings), lambda: self.now, bindings=self.bindings, results=self.results,
                        stop_attempt=lambda k, r, w: self.calls.append(("stop", k, w)),
                        release=lambda k, r, kind: self.calls.append(("release", k, kind)),
                        connected=lambda: self.connected, ready=lambda: True,
                        refresh_node=lambda n: self.calls.append(("refresh", n)),
                        new_work=lambda: self.calls.append(("work",)),
                        send_evict=lambda subj, ev, mid: self.calls.append(("evict", ev.name, mid)),
                        next_version=next_version,
                        reject=lambda reason, kind, text: self.calls.append(("reject", reason)),
                        on_heartbeat=lambda: None)


def beat(lv: Liveness, node: str, boot: str = "b1", holding: dict[str, int] | None = None,
         through: int = 0) -> None:
    lv.handle_heartbeat(S.heartbeat_subject(node), m.encode(m.NodeHeartbeat(
        node=node, boot=boot, holding=holding or {}, through_seq=through, interval=1.0)))


def test_a_heartbeat_makes_a_node_alive_and_is_new_work() -> None:
    w = World()
    lv = w.liveness()
    beat(lv, "n1")
    assert lv.live["n1"].state == "alive" and lv.alive("n1")
    assert ("refresh", "n1") in w.calls and ("work",) in w.calls
    lv.handle_heartbeat(S.heartbeat_subject("n2"), m.encode(m.NodeHeartbeat(node="n1", boot="b1")))
    assert ("reject", "mismatch") in w.calls


def test_silence_unreachable_then_lost_releases_its_tasks() -> None:
    w = World()
    lv = w.liveness()
    beat(lv, "n1")
    w.bindings["t/a"] = Binding(attempt=1, node="n1", state="binding")
    w.now = 6.0
    lv.check(w.now, CycleReport(1))
    assert lv.live["n1"].state == "unreachable"
    assert not any(c[0] == "release" for c in w.calls)
    w.now = 27.0
    report = CycleReport(2)
    lv.check(w.now, report)
    assert lv.live["n1"].state == "lost"
    assert ("release", "t/a", "node_lost") in w.calls and report.released == [("t/a", "node_lost")]


def test_a_silent_majority_is_held_as_a_partition() -> None:
    w = World()
    lv = w.liveness(lost_hold_min_nodes=2)
    for n in ("n1", "n2", "n3"):
        beat(lv, n)
    w.bindings["t/a"] = Binding(attempt=1, node="n1")
    w.now = 100.0
    beat(lv, "n3")
    lv.check(w.now, CycleReport(1))
    w.now = 130.0
    beat(lv, "n3")
    lv.check(w.now, CycleReport(2))
    assert lv.held_partition
    assert lv.live["n1"].state == "unreachable"


def test_silence_counts_only_while_we_are_connected_and_settled() -> None:
    w = World()
    lv = w.liveness()
    assert lv.calm(0.0)
    w.connected = False
    assert not lv.calm(1.0)
    w.connected = True
    w.now = 50.0
    lv.on_connection(True)
    assert not lv.calm(52.0) and lv.calm(56.0)


def test_a_rebooted_agent_stops_what_its_old_incarnation_took() -> None:
    w = World()
    lv = w.liveness()
    beat(lv, "n1", boot="b1", through=10)
    w.bindings["t/a"] = Binding(attempt=2, node="n1", state="binding", seq=7)  # delivered, unanswered
    w.bindings["t/b"] = Binding(attempt=1, node="n1", state="binding", seq=0)  # never delivered
    beat(lv, "n1", boot="b2")
    assert ("stop", "t/a", "restart") in w.calls
    assert not any(c[:2] == ("stop", "t/b") for c in w.calls)


def test_a_task_held_but_no_longer_bound_there_gets_one_stale_evict() -> None:
    w = World()
    lv = w.liveness()
    beat(lv, "n1", holding={"t/x": 3})
    beat(lv, "n1", holding={"t/x": 3})
    assert [c for c in w.calls if c[0] == "evict"] == [("evict", "x", "evict:t/x:3:stale")]
