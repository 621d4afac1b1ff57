"""compose/: the file parses, NATS has JetStream, monitoring and a health check, every command exists."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from busched.bus.apply import load_cluster_file
from busched.cli.main import build_parser
from busched.framework.config import load_config

COMPOSE = Path(__file__).resolve().parents[2] / "compose"


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


def test_runs_with_docker_compose_1_29_and_v2(doc):
    # docker-compose 1.29 (Debian's) refuses a top-level name:, compose v2 warns about version:; both read the
    # Compose specification (no version key) with the project name from compose/.env
    assert "name" not in doc and "version" not in doc
    extensions = {k for k in doc if k.startswith("x-")}
    assert set(doc) <= {"services", "volumes", "networks", "configs", "secrets"} | extensions
    env = dict(line.split("=", 1) for line in (COMPOSE / ".env").read_text().splitlines()
               if line.strip() and not line.startswith("#"))
    assert env["COMPOSE_PROJECT_NAME"] == "busched"


@pytest.mark.parametrize("cmd", [["docker-compose"], ["docker", "compose"]], ids=["docker-compose", "compose-v2"])
def test_the_installed_compose_accepts_the_file(cmd):
    import shutil
    import subprocess
    if not shutil.which(cmd[0]):
        pytest.skip(f"{cmd[0]} not installed")
    if len(cmd) > 1 and subprocess.run([*cmd, "version"], capture_output=True).returncode != 0:
        pytest.skip(f"{' '.join(cmd)} not installed")
    r = subprocess.run([*cmd, "-f", str(COMPOSE / "docker-compose.yml"), "--profile", "demo", "config", "-q"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def _dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule, simplified: the last pattern matching the path or one of its parents wins."""
    import re

    def rx(pat: str) -> re.Pattern[str]:
        out, i = "", 0
        while i < len(pat):
            if pat.startswith("**/", i):
                out, i = out + "(?:.*/)?", i + 3
            elif pat.startswith("**", i):
                out, i = out + ".*", i + 2
            else:
                out += {"*": "[^/]*", "?": "[^/]"}.get(pat[i], re.escape(pat[i]))
                i += 1
        return re.compile(out + r"\Z")

    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for p in patterns:
        neg, p = p.startswith("!"), p.lstrip("!").strip("/")
        if any(rx(p).match(x) for x in prefixes):
            ignored = not neg
    return ignored


def test_dockerignore_keeps_the_build_context_small():
    root = COMPOSE.parent
    patterns = [line.strip() for line in (root / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    for path in (".venv/bin/python", ".git/HEAD", ".busched/jetstream/x", ".busched/auth/nats.conf",
                 "tests/conformance/cases/a.yaml", "tests/cli/test_compose.py", "docs/bus.md",
                 "busched/__pycache__/up.cpython-311.pyc", "busched/cli/__pycache__/x.pyc", ".pytest_cache/v",
                 ".hypothesis/x", "busched.egg-info/PKG-INFO", "record.bin"):
        assert _dockerignored(path, patterns), path
    for path in ("pyproject.toml", "README.md", "busched/cli/up.py", "busched/bus/server.py"):
        assert not _dockerignored(path, patterns), path
    for line in (COMPOSE / "Dockerfile").read_text().splitlines():  # what the image copies is in the context
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert not _dockerignored(src, patterns), line
