"""docs/agents.md is true: every JSON example decodes with the scheduler's own decoder and validates
against its generated schema; schemas and decoder agree on unknown fields (ignored in a message's
envelope, refused in an object spec); the page's whole agent, run exactly as written, passes
`busched agent-check` through a restart (real nats-server, the agent in its own process)."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from busched.bus import Bus
from busched.bus import messages as m
from busched.bus.schema import open_structs, schemas
from tests.agentcheck.test_agent_check_cli import _kill

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "agents.md"


def blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", path.read_text(), flags=re.M | re.S)


def examples() -> list[dict]:
    return [json.loads(b) for b in blocks(DOC, "json")]


def schema_of(msg: m.Msg) -> dict:
    return json.loads((ROOT / "schemas" / f"{type(msg).__name__}.json").read_text())


def valid(doc: dict, schema: dict) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(doc)


def test_the_page_shows_every_message_an_agent_meets():
    types = {e["type"] for e in examples()}
    assert types == {"node.upsert", "bind", "bind.accepted", "bind.rejected", "task.phase", "evict",
                     "node.heartbeat", "binding"}


@pytest.mark.parametrize("doc", examples(), ids=lambda e: e["type"])
def test_every_example_decodes_and_validates(doc):
    msg = m.decode(json.dumps(doc))
    assert msg.__struct_config__.tag == doc["type"]
    schema = schema_of(msg)
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert json.loads(m.encode(msg)) == doc  # nothing in the example is lost or defaulted away


@pytest.mark.parametrize("doc", examples(), ids=lambda e: e["type"])
def test_unknown_fields_ignored_in_the_envelope_refused_in_a_spec(doc):
    schema = schema_of(m.decode(json.dumps(doc)))
    newer = {**doc, "aFieldFromTheFuture": {"x": 1}}
    m.decode(json.dumps(newer))
    assert valid(newer, schema)
    for spec in ("task", "node"):
        if isinstance(doc.get(spec), dict):
            typo = copy.deepcopy(doc)
            typo[spec]["requestz"] = {"cpu": "1"}
            with pytest.raises(m.DecodeError, match="unknown field"):
                m.decode(json.dumps(typo))
            assert not valid(typo, schema)


def test_every_schema_marks_what_its_decoder_does_with_unknown_fields():
    open_names = open_structs()
    for name, text in schemas().items():
        for struct, d in json.loads(text).get("$defs", {}).items():
            if "properties" in d:
                assert d.get("additionalProperties") is open_names[struct], f"{name}: {struct}"


def test_the_page_s_agent_passes_agent_check_through_a_restart(nats_server, tmp_path):
    [code] = blocks(DOC, "python")
    agent_py = tmp_path / "agent.py"
    agent_py.write_text(code)

    async def streams() -> None:  # the scheduler would have made them
        bus = await Bus.connect(nats_server.url)
        await bus.ensure_streams()
        await bus.close()
    asyncio.run(streams())
    pidfile, logfile = tmp_path / "agent.pid", tmp_path / "agent.log"
    q = shlex.quote
    start = f"{q(sys.executable)} {q(str(agent_py))} {q(nats_server.url)} n1 >>{q(str(logfile))} 2>&1 & " \
            f"echo $! >{q(str(pidfile))}"
    restart = f"pid=$(cat {q(str(pidfile))}); kill $pid; while kill -0 $pid 2>/dev/null; do sleep 0.05; done; {start}"
    subprocess.run(["sh", "-c", start], check=True, timeout=10)
    try:
        r = subprocess.run([str(Path(sys.executable).with_name("busched")), "agent-check", "--nats", nats_server.url,
                            "--node", "n1", "--timeout", "10", "--restart-cmd", restart], capture_output=True,
                           text=True, timeout=120)
    finally:
        _kill(pidfile)
    assert r.returncode == 0, r.stdout + r.stderr + logfile.read_text()
    assert "14 passed, 0 failed, 0 skipped" in r.stdout
