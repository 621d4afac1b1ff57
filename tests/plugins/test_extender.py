"""extender: every verb against a real aiohttp server on loopback, timeouts, ignorable, managedResources,
malformed answers, and a call made from inside a running event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from aiohttp import web

from busched.actions import ACTIONS
from busched.api.fit import Code, FitError
from busched.api.objects import ClusterSpec
from busched.builtin import close_session, open_session
from busched.cache.cache import Cache
from busched.framework.config import parse_config
from busched.framework.session import Session
from busched.plugins.extender import client, wire
from busched.plugins.extender.plugin import ExtenderPlugin
from tests.plugins.extender_server import HANG, ExtenderServer

VERBS = {"extender.predicateVerb": "predicate", "extender.prioritizeVerb": "prioritize",
         "extender.preemptableVerb": "preemptable", "extender.reclaimableVerb": "reclaimable",
         "extender.queueOverusedVerb": "queueOverused", "extender.jobEnqueueableVerb": "jobEnqueueable",
         "extender.jobEnqueuedVerb": "jobEnqueued", "extender.jobReadyVerb": "jobReady",
         "extender.onSessionOpenVerb": "onSessionOpen", "extender.onSessionCloseVerb": "onSessionClose",
         "extender.allocateFuncVerb": "allocateFunc", "extender.deallocateFuncVerb": "deallocateFunc"}


@pytest.fixture
def server() -> Iterator[ExtenderServer]:
    s = ExtenderServer().start()
    yield s
    s.stop()


def spec() -> ClusterSpec:
    return msgspec.convert({
        "queues": [{"name": "q"}],
        "nodes": [{"name": "n1", "allocatable": {"cpu": "4", "memory": "8Gi", "pods": 10}},
                  {"name": "n2", "allocatable": {"cpu": "4", "memory": "8Gi", "pods": 10, "nvidia.com/gpu": "2"}}],
        "jobs": [{"name": "cpu", "namespace": "ns", "queue": "q", "minMember": 1},
                 {"name": "gpu", "namespace": "ns", "queue": "q", "minMember": 1},
                 {"name": "old", "namespace": "ns", "queue": "q", "minMember": 1}],
        "tasks": [{"name": "c", "namespace": "ns", "job": "cpu", "requests": {"cpu": "1", "memory": "1Gi"}},
                  {"name": "g", "namespace": "ns", "job": "gpu",
                   "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}},
                  {"name": "o1", "namespace": "ns", "job": "old", "node": "n1", "phase": "Running",
                   "requests": {"cpu": "1", "memory": "1Gi"}},
                  {"name": "o2", "namespace": "ns", "job": "old", "node": "n1", "phase": "Running",
                   "requests": {"cpu": "1", "memory": "1Gi"}}],
    }, ClusterSpec)


def session(url: str, actions: str = "", **arguments: Any) -> Session:
    cache = Cache()
    cache.load(spec())
    args = {"extender.urlPrefix": url, "extender.httpTimeout": "2s", **arguments}
    config = parse_config({"actions": actions, "tiers": [{"plugins": [{"name": "extender", "arguments": args}]}]})
    return open_session(cache.snapshot(), config)


def task(ssn: Session, name: str) -> Any:
    return next(t for j in ssn.jobs.values() for t in j.tasks.values() if t.name == name)


# -- every verb ---------------------------------------------------------------------------------------
def test_predicate_passes_fails_with_its_code_and_a_message_without_code_is_an_error(server):
    answers = {"n1": {"status": "no room", "code": 3}, "n2": {"status": ""}}
    server.behaviour["predicate"] = lambda body: answers[body["node"]["Name"]]
    ssn = session(server.url, **{"extender.predicateVerb": "predicate"})
    c = task(ssn, "c")
    ssn.predicate_fn(c, ssn.nodes["n2"])  # passes
    with pytest.raises(FitError) as e:
        ssn.predicate_fn(c, ssn.nodes["n1"])
    assert e.value.code == Code.UnschedulableAndUnresolvable and e.value.reasons() == ["no room"]
    answers["n1"] = {"status": "busy"}
    with pytest.raises(FitError) as e:
        ssn.predicate_fn(c, ssn.nodes["n1"])
    assert e.value.code == Code.Error
    verb, body = server.requests[0]
    assert verb == "predicate" and body["task"]["Name"] == "c" and body["task"]["Namespace"] == "ns"
    assert body["task"]["Resreq"]["MilliCPU"] == 1000 and body["task"]["Status"] == 1  # Volcano's Pending
    assert body["node"]["Allocatable"]["MilliCPU"] == 4000


def test_prioritize_scores_only_the_nodes_asked_and_an_error_message_fails_the_task(server):
    server.behaviour["prioritize"] = lambda body: {"nodeScore": {"n1": 10, "n2": 20.5, "elsewhere": 99}}
    ssn = session(server.url, **{"extender.prioritizeVerb": "prioritize"})
    c = task(ssn, "c")
    assert ssn.batch_node_order_fn(c, [ssn.nodes["n1"], ssn.nodes["n2"]]) == {"n1": 10.0, "n2": 20.5}
    assert [n["Name"] for n in server.requests[0][1]["nodes"]] == ["n1", "n2"]
    server.behaviour["prioritize"] = lambda body: {"errorMessage": "scores unavailable"}
    with pytest.raises(FitError) as e:
        ssn.batch_node_order_fn(c, [ssn.nodes["n1"]])
    assert "scores unavailable" in str(e.value) and e.value.code == Code.Error


@pytest.mark.parametrize("verb", ["preemptable", "reclaimable"])
def test_victims_are_the_answered_candidates_only(server, verb):
    server.behaviour[verb] = lambda body: {"status": 1, "victims": [{"UID": body["evictees"][1]["UID"]},
                                                                    {"UID": "not-a-candidate"}]}
    ssn = session(server.url, **{f"extender.{verb}Verb": verb})
    o1, o2, g = task(ssn, "o1"), task(ssn, "o2"), task(ssn, "g")
    victims = getattr(ssn, verb)(g, [o1, o2])
    assert [v.name for v in victims] == ["o2"]
    body = server.requests[0][1]
    assert body["evictor"]["Name"] == "g" and [t["Name"] for t in body["evictees"]] == ["o1", "o2"]
    assert body["evictees"][0]["Status"] == 32  # Volcano's Running


def test_job_enqueueable_votes_and_enqueued_is_told(server):
    server.behaviour["jobEnqueueable"] = lambda body: {"status": -1 if body["job"]["Name"] == "gpu" else 1}
    ssn = session(server.url, **{"extender.jobEnqueueableVerb": "jobEnqueueable",
                                 "extender.jobEnqueuedVerb": "jobEnqueued"})
    assert not ssn.job_enqueueable(ssn.jobs["ns/gpu"])
    assert ssn.job_enqueueable(ssn.jobs["ns/cpu"])
    ssn.job_enqueued(ssn.jobs["ns/cpu"])
    assert server.verbs() == ["jobEnqueueable", "jobEnqueueable", "jobEnqueued"]
    job = server.requests[2][1]["job"]
    assert job["UID"] == "ns/cpu" and job["Queue"] == "q" and job["MinAvailable"] == 1


def test_queue_overused_and_job_ready(server):
    server.behaviour["queueOverused"] = lambda body: {"overused": body["queue"]["Name"] == "q"}
    server.behaviour["jobReady"] = lambda body: {"status": body["job"]["Name"] == "old"}
    ssn = session(server.url, **{"extender.queueOverusedVerb": "queueOverused", "extender.jobReadyVerb": "jobReady"})
    assert ssn.overused(ssn.queues["q"])
    assert ssn.job_ready(ssn.jobs["ns/old"]) and not ssn.job_ready(ssn.jobs["ns/cpu"])


def test_session_open_and_close_are_sent(server):
    ssn = session(server.url, **{"extender.onSessionOpenVerb": "open", "extender.onSessionCloseVerb": "close"})
    close_session(ssn)
    assert server.verbs() == ["open", "close"]
    opened = server.requests[0][1]
    assert set(opened["Jobs"]) == {"ns/cpu", "ns/gpu", "ns/old"} and set(opened["Nodes"]) == {"n1", "n2"}
    assert opened["Nodes"]["n2"]["Allocatable"]["ScalarResources"] == {"nvidia.com/gpu": 2000}
    assert server.requests[1][1] == {}


def test_a_failed_session_open_registers_nothing_unless_ignorable(server):
    server.behaviour["open"] = lambda body: web.Response(status=503)
    args = {"extender.onSessionOpenVerb": "open", "extender.predicateVerb": "predicate"}
    ssn = session(server.url, **args)
    ssn.predicate_fn(task(ssn, "c"), ssn.nodes["n1"])  # no predicate registered: nothing asked
    assert server.verbs() == ["open"]
    ssn = session(server.url, **args, **{"extender.ignorable": True})
    ssn.predicate_fn(task(ssn, "c"), ssn.nodes["n1"])
    assert server.verbs() == ["open", "open", "predicate"]


def test_allocate_and_deallocate_are_told(server):
    ssn = session(server.url, **{"extender.allocateFuncVerb": "allocated", "extender.deallocateFuncVerb": "released"})
    c, o1 = task(ssn, "c"), task(ssn, "o1")
    ssn.pipeline(c, "n2")
    ssn.evict(o1, "test")
    assert server.verbs() == ["allocated", "released"]
    assert server.requests[0][1]["task"]["Name"] == "c" and server.requests[1][1]["task"]["Name"] == "o1"


def test_allocate_places_around_the_extender_predicate(server):
    """Through the allocate action: the extender refuses n2 for c, so c goes to n1; g fails every node on
    the extender (not ignorable), and only g is left unplaced -- the cycle goes on."""
    def predicate(body: Any) -> dict[str, Any]:
        if body["task"]["Name"] == "g":
            return {"status": "never", "code": 2}
        return {"status": "not this one" if body["node"]["Name"] == "n2" else ""}

    server.behaviour["predicate"] = predicate
    ssn = session(server.url, actions="allocate", **{"extender.predicateVerb": "predicate"})
    ACTIONS["allocate"]().execute(ssn)
    bound = {d.task: d.node for d in ssn.decisions if d.kind == "bind"}
    assert bound == {"ns/c": "n1"}


@pytest.mark.parametrize("best", ["n1", "n2"])
def test_allocate_follows_the_extender_scores(server, best):
    server.behaviour["prioritize"] = lambda body: {"nodeScore": {n["Name"]: 100 if n["Name"] == best else 1
                                                                 for n in body["nodes"]}}
    ssn = session(server.url, actions="allocate", **{"extender.prioritizeVerb": "prioritize"})
    ACTIONS["allocate"]().execute(ssn)
    bound = {d.task: d.node for d in ssn.decisions if d.kind == "bind"}
    assert bound["ns/c"] == best and "prioritize" in server.verbs()


# -- failures: timeout, ignorable, malformed ------------------------------------------------------------
def test_a_slow_extender_fails_the_task_on_that_node_or_is_ignored(server):
    server.behaviour["predicate"] = lambda body: HANG
    args = {"extender.predicateVerb": "predicate", "extender.httpTimeout": "100ms"}
    ssn = session(server.url, **args)
    with pytest.raises(FitError) as e:
        ssn.predicate_fn(task(ssn, "c"), ssn.nodes["n1"])
    assert e.value.code == Code.Error and "extender" in str(e.value)
    ssn = session(server.url, **args, **{"extender.ignorable": "true"})
    ssn.predicate_fn(task(ssn, "c"), ssn.nodes["n1"])  # ignored: passes


def dead_url() -> str:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_an_unreachable_extender_with_ignorable_is_ignored_by_every_verb():
    url = dead_url()
    args = {k: v for k, v in VERBS.items() if k not in ("extender.onSessionOpenVerb",)}
    ssn = session(url, **args, **{"extender.ignorable": True})
    c, o1 = task(ssn, "c"), task(ssn, "o1")
    ssn.predicate_fn(c, ssn.nodes["n1"])
    assert ssn.batch_node_order_fn(c, [ssn.nodes["n1"]]) == {}
    assert ssn.plugins["extender"]._victims("preemptable")(c, [o1]) == ([], 0)  # abstains
    assert ssn.preemptable(c, [o1]) == []
    assert ssn.job_enqueueable(ssn.jobs["ns/cpu"]) and ssn.job_ready(ssn.jobs["ns/old"])
    assert not ssn.overused(ssn.queues["q"])


def test_an_unreachable_extender_without_ignorable_has_volcanos_answers():
    url = dead_url()
    ssn = session(url, **{k: v for k, v in VERBS.items() if k != "extender.onSessionOpenVerb"})
    c, o1 = task(ssn, "c"), task(ssn, "o1")
    with pytest.raises(FitError):
        ssn.predicate_fn(c, ssn.nodes["n1"])
    assert not ssn.preemptable(c, [o1]) and not ssn.reclaimable(c, [o1])
    assert not ssn.job_enqueueable(ssn.jobs["ns/cpu"])
    assert ssn.overused(ssn.queues["q"])


@pytest.mark.parametrize("answer", [
    b"not json", {"status": "x", "code": 9}, {"status": 7}, web.Response(status=500),
    b'{"padding": "' + b"a" * (wire.MAX_BODY + 1) + b'"}',
])
def test_a_malformed_answer_is_a_failed_call(server, answer):
    server.behaviour["predicate"] = lambda body: answer
    ssn = session(server.url, **{"extender.predicateVerb": "predicate"})
    with pytest.raises(FitError) as e:
        ssn.predicate_fn(task(ssn, "c"), ssn.nodes["n1"])
    assert e.value.code == Code.Error
    ssn = session(server.url, **{"extender.predicateVerb": "predicate", "extender.ignorable": True})
    ssn.predicate_fn(task(ssn, "c"), ssn.nodes["n1"])


def test_malformed_scores_and_victims(server):
    server.behaviour["prioritize"] = lambda body: {"nodeScore": "high"}
    server.behaviour["preemptable"] = lambda body: {"status": 1, "victims": "all"}
    ssn = session(server.url, **{"extender.prioritizeVerb": "prioritize", "extender.preemptableVerb": "preemptable"})
    c, o1 = task(ssn, "c"), task(ssn, "o1")
    with pytest.raises(FitError):
        ssn.batch_node_order_fn(c, [ssn.nodes["n1"]])
    assert not ssn.preemptable(c, [o1])


# -- managedResources -----------------------------------------------------------------------------------
def test_managed_resources_limit_the_task_verbs_to_tasks_asking_for_them(server):
    server.behaviour["predicate"] = lambda body: {"status": "managed here"}
    ssn = session(server.url, **{"extender.predicateVerb": "predicate",
                                 "extender.managedResources": ["nvidia.com/gpu"]})
    ssn.predicate_fn(task(ssn, "c"), ssn.nodes["n2"])  # no gpu: not asked, passes
    assert server.requests == []
    with pytest.raises(FitError):
        ssn.predicate_fn(task(ssn, "g"), ssn.nodes["n2"])
    assert [b["task"]["Name"] for _, b in server.requests] == ["g"]
    pod = server.requests[0][1]["task"]["Pod"]
    assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1000m"


def test_managed_resources_arguments():
    assert ExtenderPlugin({"extender.managedResources": "a/x, b/y"}).config.managed == {"a/x", "b/y"}
    assert ExtenderPlugin({"extender.managedResources": 7}).config.managed == frozenset()
    cfg = ExtenderPlugin({"extender.httpTimeout": "250ms", "extender.urlPrefix": "http://h/"}).config
    assert cfg.timeout == 0.25 and cfg.url("p") == "http://h/p"
    assert ExtenderPlugin({"extender.httpTimeout": "soon"}).config.timeout == 1.0


# -- the client -------------------------------------------------------------------------------------------
async def test_a_session_on_the_event_loop_does_not_deadlock(server):
    """The session may run on the scheduler's own loop: the call must not need that loop."""
    server.behaviour["jobReady"] = lambda body: {"status": True}
    ssn = session(server.url, **{"extender.jobReadyVerb": "jobReady"})
    assert asyncio.get_running_loop().is_running()
    assert ssn.job_ready(ssn.jobs["ns/old"])  # a synchronous call made on this running loop


def test_a_closed_runner_fails_at_once(server):
    runner = client.Runner()
    assert runner.post(server.url + "/v", b"{}", 2.0) == b"{}"
    runner.close()
    with pytest.raises(client.ExtenderError, match="closed"):
        runner.post(server.url + "/v", b"{}", 2.0)


def test_the_protocol_documents_the_shapes_sent():
    """docs/extender.md's examples are valid JSON with exactly the fields the views send."""
    import json
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "extender.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", doc, re.S)]
    assert len(blocks) == 7
    ssn = session("http://unused")
    t, n = task(ssn, "c"), ssn.nodes["n1"]
    predicate = blocks[0]
    assert set(predicate) == {"task", "node"}
    assert set(predicate["task"]) == set(wire.task_view(t)) and set(predicate["node"]) == set(wire.node_view(n))
    assert set(blocks[3]["job"]) == set(wire.job_view(ssn.jobs["ns/cpu"]))
    assert set(blocks[4]["queue"]) == set(wire.queue_view(ssn.queues["q"]))
    assert set(blocks[5]) == {"Jobs", "Nodes", "Queues", "NamespaceInfo", "RevocableNodes", "NodeList"}
