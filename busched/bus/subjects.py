"""Subject names and stream layout.  Pure strings: nothing here talks to NATS.

State stream (``BUSCHED_STATE``, subjects ``busched.state.>``), one subject per object::

    busched.state.node.<name>                  node.upsert / node.delete        (apply, agents)
    busched.state.task.<ns>.<name>             task.upsert / task.delete        (apply)
    busched.state.job.<ns>.<name>              job.upsert / job.delete          (apply; a PodGroup)
    busched.state.queue.<name>                 queue.*                          (apply)
    busched.state.priorityClass.<name>         priorityClass.*                  (apply)
    busched.state.hyperNode.<name>             hyperNode.*                      (apply)
    busched.state.resourceQuota.<ns>.<name>    resourceQuota.*                  (apply)
    busched.state.nodeShard.<name>             nodeShard.*                      (apply)
    busched.state.ledger.<node>                ledger (sharded schedulers, with their binding records)
    busched.state.binding.<ns>.<name>          binding                          (scheduler)
    busched.state.podgroup.<ns>.<name>         podgroup.status                  (scheduler)
    busched.state.queueStatus.<name>           queue.status                     (scheduler)
    busched.state.result.<node>.<ns>.<name>    bind.accepted/rejected, task.phase (the node's agent)

Once caught up, a scheduler follows only what others write (`followed_subjects`): the object
kinds and the agents' results, not its own binding, podgroup and queue status records.

Decision stream (``BUSCHED_DECISIONS``, subjects ``busched.decision.>``)::

    busched.decision.<node>.bind.<ns>.<name>   bind    (scheduler -> that node's agent)
    busched.decision.<node>.evict.<ns>.<name>  evict

An agent serving one node reads the durable consumer ``agent-<node>`` filtered on its node's decisions;
an agent serving several nodes reads one durable consumer for all of them, ``agents-<n>-<digest of the
names>`` (`fleet_consumer`), filtered on each of its nodes' decisions.

Events stream (``BUSCHED_EVENTS``, subjects ``busched.events.>``), one subject per event series, the
stream keeping only its latest message (`busched.bus.events`)::

    busched.events.task.<ns>.<name>.<series>   event   (scheduler: Scheduled, FailedScheduling, ...)
    busched.events.job.<ns>.<name>.<series>    event   (a PodGroup: Unschedulable, Scheduled)
    busched.events.queue.<name>.<series>       event   (Overused)
    busched.events.node.<name>.<series>        event

Core NATS (not stored)::

    busched.heartbeat.<node>                   node.heartbeat (agent -> scheduler)
    busched.api.get                            get / get.reply (request/reply with the scheduler)
    busched.api.drain                          drain / get.reply (`busched node drain`)

Names are escaped into single subject tokens: characters that NATS gives a
meaning (``.``, ``*``, ``>``, whitespace) and ``%`` become ``%XX``.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["STATE_STREAM", "DECISION_STREAM", "STATE_PREFIX", "DECISION_PREFIX", "HEARTBEAT_PREFIX", "API_GET",
           "API_DRAIN", "token", "untoken", "state_subject", "binding_subject", "podgroup_subject",
           "queue_status_subject", "result_subject",
           "decision_subject", "heartbeat_subject", "agent_consumer", "parse_state_subject", "FOLLOWED_KINDS",
           "APPLY_ORDER", "followed_subjects", "fleet_consumer", "decision_consumer", "decision_node", "task_results",
           "node_results", "EVENT_STREAM", "EVENT_PREFIX", "event_subject", "events_filter", "ledger_subject"]

STATE_STREAM = "BUSCHED_STATE"
DECISION_STREAM = "BUSCHED_DECISIONS"
STATE_PREFIX = "busched.state"
DECISION_PREFIX = "busched.decision"
HEARTBEAT_PREFIX = "busched.heartbeat"
API_GET = "busched.api.get"
API_DRAIN = "busched.api.drain"
API_LOGS = "busched.api.logs"  # .<node>: its agent serves the logs of the tasks it ran
EVENT_STREAM = "BUSCHED_EVENTS"
EVENT_PREFIX = "busched.events"

# the state subjects a caught-up scheduler follows: object kinds (apply, agents), results (agents) and binding
# records (its own echoes are skipped by sequence; another scheduler's records are what it must not miss)
FOLLOWED_KINDS = ("node", "task", "job", "queue", "priorityClass", "hyperNode", "resourceQuota", "nodeShard", "result",
                  "binding", "ledger", "leader")

# The object kinds of a cluster file in the order `busched apply` publishes them: what others refer to
# first, a gang's podgroup after its tasks; as (kind, ClusterSpec attribute).
APPLY_ORDER = (("priorityClass", "priority_classes"), ("queue", "queues"), ("hyperNode", "hyper_nodes"),
               ("resourceQuota", "resource_quotas"), ("nodeShard", "node_shards"),
               ("node", "nodes"), ("task", "tasks"), ("job", "jobs"))

_ESCAPE = re.compile(r"[.*>%\s]")
_UNESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def token(name: str) -> str:
    """One subject token for an object name."""
    if not name:
        return "%00"
    if _ESCAPE.search(name) is None:
        return name
    return _ESCAPE.sub(lambda m: f"%{ord(m.group()):02X}", name)


def untoken(tok: str) -> str:
    if "%" not in tok:
        return tok
    if tok == "%00":
        return ""
    return _UNESCAPE.sub(lambda m: chr(int(m.group(1), 16)), tok)


def _key_tokens(key: str) -> str:
    if "/" in key:
        ns, name = key.split("/", 1)
        return f"{token(ns)}.{token(name)}"
    return token(key)


def state_subject(kind: str, key: str) -> str:
    """``kind`` as in `busched.cache.KINDS`; ``key`` is ``ns/name`` or ``name``."""
    return f"{STATE_PREFIX}.{kind}.{_key_tokens(key)}"


def followed_subjects() -> list[str]:
    """The filter a caught-up scheduler follows the state stream with: everything but its own records."""
    return [f"{STATE_PREFIX}.{kind}.>" for kind in FOLLOWED_KINDS]


def binding_subject(task_key: str) -> str:
    return f"{STATE_PREFIX}.binding.{_key_tokens(task_key)}"


def ledger_subject(node: str) -> str:
    """A node's placement ledger (`busched.bus.messages.NodeLedger`)."""
    return f"{STATE_PREFIX}.ledger.{token(node)}"


def leader_subject(shard: str) -> str:
    """Where a shard's new leader writes its epoch (`busched.bus.messages.LeaderEpoch`)."""
    return f"{STATE_PREFIX}.leader.{token(shard)}"


def podgroup_subject(job_key: str) -> str:
    return f"{STATE_PREFIX}.podgroup.{_key_tokens(job_key)}"


def queue_status_subject(queue: str) -> str:
    return f"{STATE_PREFIX}.queueStatus.{token(queue)}"


def result_subject(node: str, task_key: str) -> str:
    return f"{STATE_PREFIX}.result.{token(node)}.{_key_tokens(task_key)}"


def task_results(task_key: str) -> str:
    """Every node's result subject of one task (a wildcard, to purge them once the task is gone)."""
    return f"{STATE_PREFIX}.result.*.{_key_tokens(task_key)}"


def node_results(node: str) -> str:
    """Every result subject of one node (what its agent has answered)."""
    return f"{STATE_PREFIX}.result.{token(node)}.>"


def decision_subject(node: str, kind: str, task_key: str) -> str:
    return f"{DECISION_PREFIX}.{token(node)}.{kind}.{_key_tokens(task_key)}"


def node_decisions(node: str) -> str:
    """The filter of a node's agent consumer: every decision for that node."""
    return f"{DECISION_PREFIX}.{token(node)}.>"


def event_subject(kind: str, key: str, series: str) -> str:
    """The subject of one event series about object ``key`` (``ns/name`` for tasks and jobs, else ``name``)."""
    return f"{EVENT_PREFIX}.{kind}.{_key_tokens(key)}.{token(series)}"


def events_filter(kind: str = "", key: str = "") -> str:
    """The events of every object (no ``kind``), of one kind, or of one object (``kind`` and ``key``)."""
    if not kind:
        return f"{EVENT_PREFIX}.>"
    if not key:
        return f"{EVENT_PREFIX}.{token(kind)}.>"
    return f"{EVENT_PREFIX}.{token(kind)}.{_key_tokens(key)}.*"


def logs_subject(node: str) -> str:
    """Where ``node``'s agent answers `busched logs` (a `messages.LogsRequest`)."""
    return f"{API_LOGS}.{token(node)}"


def heartbeat_subject(node: str) -> str:
    return f"{HEARTBEAT_PREFIX}.{token(node)}"


def agent_consumer(node: str) -> str:
    """Durable consumer name of a node's agent (consumer names allow no dots or wildcards)."""
    return "agent-" + re.sub(r"[^A-Za-z0-9_-]", lambda m: f"_{ord(m.group()):02X}", node)


def fleet_consumer(nodes: list[str]) -> str:
    """Durable consumer name of an agent serving several nodes: one consumer for the set (stable for the same set)."""
    digest = hashlib.sha256("\n".join(sorted(nodes)).encode()).hexdigest()[:16]
    return f"agents-{len(nodes)}-{digest}"


def decision_consumer(nodes: list[str]) -> str:
    """The durable consumer an agent serving ``nodes`` reads its decisions from: the node's own for one node,
    the fleet's for several."""
    return agent_consumer(nodes[0]) if len(nodes) == 1 else fleet_consumer(nodes)


def decision_node(subject: str) -> str:
    """The node a decision subject is for: ``busched.decision.<node>.<kind>...`` -> ``<node>``."""
    return untoken(subject.split(".", 3)[2])


_STATE_START = STATE_PREFIX + "."
_KIND_AT = len(_STATE_START)


def parse_state_subject(subject: str) -> tuple[str, str]:
    """``busched.state.task.ns.name`` -> (``task``, ``ns/name``); result subjects keep the node first."""
    # (by prefix and find rather than a split and a join: a catch-up parses every subject)
    if not subject.startswith(_STATE_START):
        return "", ""
    dot = subject.find(".", _KIND_AT)
    if dot < 0:
        return "", ""
    rest = subject[dot + 1:]
    if "%" not in rest:
        return subject[_KIND_AT:dot], rest.replace(".", "/")
    return subject[_KIND_AT:dot], "/".join(untoken(p) for p in rest.split("."))
