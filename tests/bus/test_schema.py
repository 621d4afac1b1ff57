"""Wire messages: one decoder for the tagged union, defaults for new fields, schemas/ generated and current."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from busched.api.objects import NodeSpec, TaskSpec
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.schema import export, schemas, stale_files
from busched.cli.main import main

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_schemas_directory_is_up_to_date():
    bad = stale_files(SCHEMAS)
    assert not bad, f"schemas/ is out of date ({', '.join(bad)}): run `busched schema export`"


def test_schema_export_command_writes_one_schema_per_message(tmp_path):
    assert main(["schema", "export", "--dir", str(tmp_path)]) == 0
    names = {p.name for p in tmp_path.glob("*.json")}
    assert names == {f"{t.__name__}.json" for t in m.MESSAGE_TYPES} | {"Message.json"}
    assert main(["schema", "export", "--dir", str(tmp_path), "--check"]) == 0
    (tmp_path / "BindDecision.json").write_text("{}")
    assert main(["schema", "export", "--dir", str(tmp_path), "--check"]) == 1
    assert stale_files(tmp_path) == ["BindDecision.json"]
    export(tmp_path)
    assert stale_files(tmp_path) == []


def test_every_message_has_its_own_tag_and_schema():
    tags = [t.__struct_config__.tag for t in m.MESSAGE_TYPES]
    assert len(set(tags)) == len(tags)
    doc = msgspec.json.decode(schemas()["Message.json"])
    assert len(doc["anyOf"]) == len(m.MESSAGE_TYPES)


@pytest.mark.parametrize("msg", [
    m.NodeUpsert(version=1, node=NodeSpec(name="n1", allocatable={"cpu": "4"})),
    m.TaskDelete(version=2, namespace="ns", name="t"),
    m.BindingRecord(version=3, namespace="ns", name="t", attempt=2, node="n1", state="released", reason="x"),
    m.PodGroupStatus(version=4, namespace="ns", name="j", phase="Running",
                     conditions=[m.Condition(type="Scheduled", reason="ok")]),
    m.BindDecision(version=5, node="n1", attempt=1, task=TaskSpec(name="t", namespace="ns", requests={"cpu": 1})),
    m.EvictDecision(version=6, namespace="ns", name="t", node="n1", attempt=1, reason="preempted"),
    m.BindRejected(version=7, namespace="ns", name="t", node="n1", attempt=1, reason="disk full"),
    m.TaskPhaseChanged(version=8, namespace="ns", name="t", node="n1", attempt=1, phase="Succeeded", exit_code=0),
    m.NodeHeartbeat(version=9, node="n1", holding={"ns/t": 1}, through_seq=12),
    m.GetReply(kind="tasks", items=[{"a": 1}], next=None),
])
def test_round_trip_through_the_one_decoder(msg):
    assert m.decode(m.encode(msg)) == msg


def test_unknown_fields_are_ignored_and_missing_ones_default():
    hb = m.decode(b'{"type":"node.heartbeat","node":"n1","addedInV2":{"x":1}}')
    assert hb == m.NodeHeartbeat(node="n1")
    assert hb.version == 0 and hb.holding == {} and hb.through_seq == 0


def test_errors_name_the_field():
    with pytest.raises(m.DecodeError, match=r"\$\.task\.priority"):
        m.decode(b'{"type":"task.upsert","task":{"name":"t","priority":"high"}}')
    with pytest.raises(m.DecodeError, match="Invalid value 'nope'"):
        m.decode(b'{"type":"nope"}')


def test_subject_tokens_escape_what_nats_reserves():
    assert S.state_subject("task", "ns/a.b c*>") == "busched.state.task.ns.a%2Eb%20c%2A%3E"
    assert S.parse_state_subject(S.state_subject("task", "ns/a.b c*>")) == ("task", "ns/a.b c*>")
    assert S.decision_subject("node.1", "bind", "ns/t") == "busched.decision.node%2E1.bind.ns.t"
    assert S.node_decisions("node.1") == "busched.decision.node%2E1.>"
    assert S.agent_consumer("node.1") == "agent-node_2E1"
