"""compose/: the file parses, NATS is a cluster of three with JetStream, monitoring and a health check, busched
reaches all three and replicates its streams, every command exists."""

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


NATS = ("nats1", "nats2", "nats3")


def test_services(doc):
    assert {*NATS, "scheduler-a", "scheduler-b", "agents"} <= set(doc["services"])


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_nats_is_a_cluster_of_three_with_jetstream_monitoring_and_a_health_check(doc):
    names = set()
    for name in NATS:
        nats = doc["services"][name]
        cmd = nats["command"]
        assert "-js" in cmd and "-m" in cmd and "-sd" in cmd
        assert _flag(cmd, "--cluster_name") == "busched"
        assert _flag(cmd, "--cluster") == "nats://0.0.0.0:6222"
        # routed to the two others, by their service names
        assert set(_flag(cmd, "--routes").split(",")) == {f"nats://{o}:6222" for o in NATS if o != name}
        names.add(_flag(cmd, "-n"))
        # the full /healthz: 200 only once the meta leader is elected (js-enabled-only says 200 before)
        assert nats["healthcheck"]["test"][-1].endswith("/healthz")
        assert any(v.endswith(":/data") for v in nats["volumes"])  # its own JetStream store
    assert len(names) == 3, "server names must differ"
    for name, svc in doc["services"].items():
        if name not in NATS:
            assert {k: v["condition"] for k, v in svc["depends_on"].items()} == dict.fromkeys(NATS, "service_healthy")


def test_the_nats_image_is_a_supported_server(doc):
    from busched.bus.connect import MIN_SERVER_VERSION, parse_version

    for name in NATS:
        image = doc["services"][name]["image"]
        assert image.startswith("nats:"), image
        version = parse_version(image.split(":", 1)[1].split("-", 1)[0])
        assert version is not None and version >= MIN_SERVER_VERSION, image


def test_busched_reaches_every_server_and_replicates_its_streams(doc):
    for name, svc in doc["services"].items():
        cmd = svc.get("command") or []
        if cmd[:1] != ["busched"]:
            continue
        urls = (svc.get("environment") or {}).get("BUSCHED_NATS", "")
        assert set(urls.split(",")) == {f"nats://{n}:4222" for n in NATS}, name
        assert "--nats" not in cmd, f"{name}: --nats would override the three servers of BUSCHED_NATS"
        if cmd[1] in ("run", "agent"):  # the commands that make the streams when they are missing
            assert _flag(cmd, "--replicas") == "3", name
    runs = [n for n, svc in doc["services"].items() if (svc.get("command") or [])[:2] == ["busched", "run"]]
    assert len(runs) == 2, runs
    ports = [doc["services"][n]["ports"][0].rsplit(":", 2)[1] for n in runs]
    assert len(set(ports)) == 2, f"the two schedulers publish one host port: {ports}"


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
