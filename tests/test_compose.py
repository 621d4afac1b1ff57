"""compose/: the file parses, NATS has JetStream, monitoring and a health check, every command exists."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from busched.bus.apply import load_cluster_file
from busched.cli.main import build_parser
from busched.framework.config import load_config

COMPOSE = Path(__file__).resolve().parent.parent / "compose"


@pytest.fixture(scope="module")
def doc() -> dict:
    return yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())


def test_services(doc):
    assert {"nats", "scheduler", "agents"} <= set(doc["services"])


def test_nats_has_jetstream_monitoring_and_a_health_check(doc):
    nats = doc["services"]["nats"]
    cmd = nats["command"]
    assert "-js" in cmd and "-m" in cmd and "-sd" in cmd
    assert "healthz" in " ".join(nats["healthcheck"]["test"])
    for name in ("scheduler", "agents"):
        assert doc["services"][name]["depends_on"]["nats"]["condition"] == "service_healthy"


def test_every_busched_command_parses_with_the_real_cli(doc):
    parser = build_parser()
    seen = set()
    for name, svc in doc["services"].items():
        cmd = svc.get("command")
        if not cmd or cmd[0] != "busched":
            continue
        args = parser.parse_args(cmd[1:])  # exits (fails the test) on an unknown command or flag
        assert callable(args.func), name
        seen.add(cmd[1])
    assert {"run", "agent", "apply"} <= seen


def test_mounted_files_exist_and_load(doc):
    for svc in doc["services"].values():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("./"):
                assert (COMPOSE / src).exists(), src
    cfg = load_config((COMPOSE / "scheduler.conf").read_text())
    assert cfg.actions == ("enqueue", "allocate", "backfill")
    from busched.actions import ACTIONS
    from busched.plugins import PLUGINS
    assert set(cfg.actions) <= set(ACTIONS)
    assert {p.name for t in cfg.tiers for p in t.plugins} <= set(PLUGINS)
    assert len(load_cluster_file(COMPOSE / "demo.yaml").tasks) == 6
    assert (COMPOSE / "Dockerfile").exists()
