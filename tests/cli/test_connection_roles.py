"""Every command that connects with a name of its own finds a credential by that name: under `busched up`'s
generated users a command whose name maps to no role connects as nobody and is refused (describe, explain
and events were, reported only as a time-out)."""

from __future__ import annotations

import re
from pathlib import Path

from busched.cli.connection import ROLE_BY_NAME

CLI = Path(__file__).resolve().parents[2] / "busched" / "cli"
# a command's own connection: connected(args, "busched-x", ...), run(args, "busched-x", ...) or
# options_from_args(args, "busched-x") without role=
USES = re.compile(r'(?:connected|run|options_from_args)\(args, "(busched-[a-z-]+)"(?P<rest>[^\n]*)')


def test_every_command_connection_name_has_a_role():
    names = {}
    for path in sorted(CLI.glob("*.py")):
        for found in USES.finditer(path.read_text()):
            if "role=" not in found.group("rest"):
                names[found.group(1)] = path.name
    assert {"busched-get", "busched-describe", "busched-explain", "busched-events"} <= set(names)
    # busched up --nats URL runs scheduler, agents and demo on the one connection it is given credentials for
    names.pop("busched-up", None)
    missing = {n: f for n, f in names.items() if n not in ROLE_BY_NAME}
    assert not missing, f"connection names with no credential role: {missing}"
