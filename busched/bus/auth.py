"""NATS authorization for a busched deployment, generated (never written by hand).

Three roles (docs/bus.md, "Authentication"):

* ``scheduler``: everything under ``busched.>``, the JetStream API, acks and flow control, its own
  replies (``_INBOX.>``) and the replies to requests it serves (``allow_responses``);
* ``cli`` (the admin role of ``busched apply``, ``delete``, ``get`` and ``events``): publishes the object
  kinds of the state stream (`OBJECT_KINDS`), never binding, podgroup or result records, decisions nor
  events; requests on ``busched.api.>``; the JetStream calls apply/delete make (stream info and create)
  and those that read the state stream (direct get, an ephemeral consumer) and the events stream (stream
  info, an ephemeral consumer);
* ``agent`` for a set of nodes (`agent_permissions`): only what docs/bus.md lists per node.

The permission lists are built from `busched.bus.subjects`, so a subject added there is added here in
one place.  `render_authorization` turns credentials into the ``authorization { users = [...] }``
block of a nats-server configuration.  Credentials are user/password pairs (32-byte urlsafe random
secrets); neither nkeys nor bcrypt is a dependency, so the server configuration holds the passwords in
plain text and is written with mode 0600, like each role's credentials file (`Credential`, JSON).

`AuthDir` is the ``<data-dir>/auth`` directory ``busched up`` creates: ``nats.conf`` (the server's
authorization), ``scheduler.json``, ``cli.json`` and ``agent-<name>.json``; `find_credential` is how
commands run from the same directory find them (`busched.bus.connect.options_from_args`).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from busched.bus import subjects as S
from busched.bus.checkpoints import BUCKET as CHECKPOINT_BUCKET
from busched.bus.lease import BUCKET as LEASE_BUCKET

__all__ = ["ROLES", "OBJECT_KINDS", "JS_API", "scheduler_permissions", "cli_permissions", "agent_permissions",
           "agent_inbox_prefix", "Credential", "new_credential", "render_authorization", "AuthDir", "AuthError",
           "find_credential", "auth_search_dirs", "prepare_agent_consumer", "write_private", "DEFAULT_AUTH_DIR",
           "CLI_INBOX_PREFIX", "SCHEDULER_INBOX_PREFIX"]

ROLES = ("scheduler", "cli", "agent")
JS_API = "$JS.API"
# the state subjects `busched apply` writes: the object kinds of a cluster file (never binding, podgroup or result)
OBJECT_KINDS = tuple(kind for kind, _ in S.APPLY_ORDER)
SCHEDULER_INBOX_PREFIX = "_INBOX"
CLI_INBOX_PREFIX = "_INBOX_cli"
DEFAULT_AUTH_DIR = Path(".busched") / "auth"
_RESERVED_NAMES = {"scheduler", "cli", "admin", ""}


class AuthError(RuntimeError):
    pass


# -- permissions -----------------------------------------------------------------------------------------------------
def scheduler_permissions() -> dict[str, Any]:
    return {
        # $KV.busched_leases.>: its shard's lease (busched.bus.lease); $O.busched_checkpoints.>: its state
        # checkpoint (busched.bus.checkpoints)
        "publish": {"allow": ["busched.>", f"{JS_API}.>", "$JS.ACK.>", "$JS.FC.>", f"{SCHEDULER_INBOX_PREFIX}.>",
                              f"$KV.{LEASE_BUCKET}.>", f"$O.{CHECKPOINT_BUCKET}.>"]},
        "subscribe": {"allow": ["busched.>", f"{SCHEDULER_INBOX_PREFIX}.>"]},
        "allow_responses": True,  # answers `busched get` on the requester's own inbox
    }


def cli_permissions(inbox_prefix: str = CLI_INBOX_PREFIX) -> dict[str, Any]:
    """`busched apply`, `delete`, `get`, `events`: object kinds and requests; reading the state and events
    streams; no bindings, podgroups, results, decisions, events."""
    st, dc = S.STATE_STREAM, S.DECISION_STREAM
    publish = [f"{S.STATE_PREFIX}.{kind}.>" for kind in OBJECT_KINDS]
    publish += ["busched.api.>",
                f"{JS_API}.INFO",
                f"{JS_API}.STREAM.INFO.{st}", f"{JS_API}.STREAM.INFO.{dc}",  # Bus.ensure_streams
                f"{JS_API}.STREAM.CREATE.{st}", f"{JS_API}.STREAM.CREATE.{dc}",
                # reading the state stream (Bus.read_state: an ordered, ephemeral consumer; direct gets)
                f"{JS_API}.DIRECT.GET.{st}", f"{JS_API}.DIRECT.GET.{st}.>", f"{JS_API}.STREAM.MSG.GET.{st}",
                f"{JS_API}.CONSUMER.CREATE.{st}", f"{JS_API}.CONSUMER.CREATE.{st}.>",
                f"{JS_API}.CONSUMER.DELETE.{st}.>", f"$JS.FC.{st}.>"]
    ev = S.EVENT_STREAM  # reading the events stream (`busched events`: stream info, an ordered consumer)
    publish += [f"{JS_API}.STREAM.INFO.{ev}", f"{JS_API}.CONSUMER.CREATE.{ev}", f"{JS_API}.CONSUMER.CREATE.{ev}.>",
                f"{JS_API}.CONSUMER.DELETE.{ev}.>", f"$JS.FC.{ev}.>"]
    # `busched get scheduler`: the leases bucket, read only (busched.bus.lease)
    kv = f"KV_{LEASE_BUCKET}"
    publish += [f"{JS_API}.STREAM.INFO.{kv}", f"{JS_API}.DIRECT.GET.{kv}.>", f"{JS_API}.STREAM.MSG.GET.{kv}",
                f"{JS_API}.CONSUMER.CREATE.{kv}", f"{JS_API}.CONSUMER.CREATE.{kv}.>",
                f"{JS_API}.CONSUMER.INFO.{kv}.>", f"{JS_API}.CONSUMER.DELETE.{kv}.>", f"$JS.FC.{kv}.>"]
    return {"publish": {"allow": publish}, "subscribe": {"allow": [f"{inbox_prefix}.>"]}}


def agent_inbox_prefix(name: str) -> str:
    return f"_INBOX_{S.token(name)}"


def agent_permissions(nodes: Iterable[str], *, inbox_prefix: str | None = None,
                      create_consumer: bool | None = None) -> dict[str, Any]:
    """The permissions of an agent serving exactly ``nodes`` (docs/bus.md, "Permissions").

    Its nodes' state, result and heartbeat subjects; the two streams' info; info, create, next and
    ack of its durable consumer (``agent-<node>`` for one node, `subjects.fleet_consumer` for several);
    subscribe only to its own inbox (default ``_INBOX_<node>``, or ``_INBOX_<fleet consumer>``).

    ``create_consumer`` (default: for one node only): a one-node consumer is created on a subject that
    names its filter, which the server holds it to; a fleet's consumer is created on a subject without
    its filters, so a fleet allowed to create it could give it another node's filter and read that
    node's decisions.  A fleet's consumer is therefore made beforehand with the scheduler's
    credential (`prepare_agent_consumer`, which `busched up` and `busched auth add-agent` do).
    """
    names = list(dict.fromkeys(nodes))
    if not names:
        raise AuthError("an agent credential needs at least one node")
    dc = S.DECISION_STREAM
    publish: list[str] = []
    for n in names:
        t = S.token(n)
        publish += [S.state_subject("node", n), f"{S.STATE_PREFIX}.result.{t}.>", S.heartbeat_subject(n),
                    # reading its node's spec back before registering it (the operator's cordon is kept)
                    f"{JS_API}.DIRECT.GET.{S.STATE_STREAM}.{S.state_subject('node', n)}"]
    publish += [f"{JS_API}.STREAM.INFO.{S.STATE_STREAM}", f"{JS_API}.STREAM.INFO.{dc}"]
    # reading back what its nodes answered before (`busched.agent.answers`): a named consumer created on the
    # subject that names its filter, one node's results only, and deleted after
    for n in names:
        publish.append(f"{JS_API}.CONSUMER.CREATE.{S.STATE_STREAM}.*.{S.node_results(n)}")
    publish.append(f"{JS_API}.CONSUMER.DELETE.{S.STATE_STREAM}.*")
    if len(names) == 1:
        c = S.agent_consumer(names[0])
        create = f"{JS_API}.CONSUMER.CREATE.{dc}.{c}.{S.DECISION_PREFIX}.{S.token(names[0])}.>"
    else:
        # a consumer with several filter subjects is created without a filter in the subject
        c = S.fleet_consumer(names)
        create = f"{JS_API}.CONSUMER.CREATE.{dc}.{c}"
    if create_consumer is None:
        create_consumer = len(names) == 1
    publish += [f"{JS_API}.CONSUMER.INFO.{dc}.{c}"] + ([create] if create_consumer else [])
    publish += [f"{JS_API}.CONSUMER.MSG.NEXT.{dc}.{c}", f"$JS.ACK.{dc}.{c}.>"]
    if inbox_prefix is None:
        inbox_prefix = agent_inbox_prefix(names[0] if len(names) == 1 else c)
    # `busched logs`: its nodes' log requests, answered on the requester's inbox
    return {"publish": {"allow": publish},
            "subscribe": {"allow": [f"{inbox_prefix}.>", *(S.logs_subject(n) for n in names)]},
            "allow_responses": True}


async def prepare_agent_consumer(bus: Any, nodes: Iterable[str]) -> bool:
    """Create the durable decision consumer of an agent serving ``nodes`` unless it exists, with ``bus``
    connected as the scheduler (a fleet's agent may not create its own, see `agent_permissions`).
    Exactly the consumer `Bus.decision_feed` would create.  False for one node (it creates its own)."""
    names = list(dict.fromkeys(nodes))
    if len(names) < 2:
        return False
    await bus.ensure_streams()
    feed = await bus.decision_feed(names)
    await feed.stop()
    return True


# -- credentials -----------------------------------------------------------------------------------------------------
@dataclass
class Credential:
    """One user of the server: what a busched command needs to connect as it (a 0600 JSON file)."""

    role: str
    name: str
    user: str
    password: str
    inbox_prefix: str
    url: str = ""
    nodes: list[str] = field(default_factory=list)  # agents only

    def permissions(self) -> dict[str, Any]:
        if self.role == "scheduler":
            return scheduler_permissions()
        if self.role == "cli":
            return cli_permissions(self.inbox_prefix)
        if self.role == "agent":
            return agent_permissions(self.nodes, inbox_prefix=self.inbox_prefix)
        raise AuthError(f"unknown role {self.role!r}")

    @property
    def file_name(self) -> str:
        return f"agent-{self.name}.json" if self.role == "agent" else f"{self.role}.json"

    def to_json(self) -> str:
        d = asdict(self)
        if self.role != "agent":
            d.pop("nodes")
        return json.dumps(d, indent=2) + "\n"

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Credential:
        try:
            d = json.loads(Path(path).read_text())
            return cls(role=str(d["role"]), name=str(d.get("name", d["role"])), user=str(d["user"]),
                       password=str(d["password"]), inbox_prefix=str(d.get("inbox_prefix") or ""),
                       url=str(d.get("url") or ""), nodes=[str(n) for n in d.get("nodes") or []])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise AuthError(f"{path}: not a busched credentials file: {e}") from None


def _secret() -> str:
    return secrets.token_urlsafe(32)


def new_credential(role: str, *, name: str | None = None, nodes: Iterable[str] = (), url: str = "") -> Credential:
    if role == "scheduler":
        return Credential("scheduler", "scheduler", "scheduler", _secret(), SCHEDULER_INBOX_PREFIX, url)
    if role == "cli":
        return Credential("cli", "cli", "cli", _secret(), CLI_INBOX_PREFIX, url)
    if role == "agent":
        names = list(dict.fromkeys(nodes))
        name = name if name is not None else (names[0] if len(names) == 1 else "")
        if name in _RESERVED_NAMES or not names:
            raise AuthError(f"an agent credential needs nodes and a name other than {sorted(_RESERVED_NAMES)[1:]}")
        agent_permissions(names)  # validates
        return Credential("agent", name, f"agent-{name}", _secret(), agent_inbox_prefix(name), url, names)
    raise AuthError(f"unknown role {role!r} (one of {', '.join(ROLES)})")


def render_authorization(creds: Iterable[Credential]) -> str:
    """The nats-server ``authorization { users = [...] }`` block for these credentials."""
    users = []
    seen: set[str] = set()
    for c in creds:
        if c.user in seen:
            raise AuthError(f"two credentials for user {c.user!r}")
        seen.add(c.user)
        users.append({"user": c.user, "password": c.password, "permissions": c.permissions()})
    lines = ["# generated by busched (busched/bus/auth.py): do not edit; plain-text passwords, keep it 0600",
             "authorization {", "  users = ["]
    for u in users:
        lines.append("    " + json.dumps(u))
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


def write_private(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600), replacing it atomically."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class AuthDir:
    """``<data-dir>/auth``: the server's ``nats.conf`` and one credentials file per user (all 0600)."""

    SERVER_CONFIG = "nats.conf"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @classmethod
    def of_data_dir(cls, data_dir: str | os.PathLike[str]) -> AuthDir:
        return cls(Path(data_dir) / "auth")

    @property
    def server_config(self) -> Path:
        return self.path / self.SERVER_CONFIG

    @property
    def pid_file(self) -> Path:
        """Where `busched up` has nats-server write its pid (beside the auth directory)."""
        return self.path.parent / "nats-server.pid"

    def exists(self) -> bool:
        return (self.path / "scheduler.json").exists()

    def credentials(self) -> list[Credential]:
        if not self.path.is_dir():
            return []
        return [Credential.load(p) for p in sorted(self.path.glob("*.json"))]

    def get(self, role: str, name: str | None = None) -> Credential | None:
        p = self.path / (f"agent-{name}.json" if role == "agent" else f"{role}.json")
        return Credential.load(p) if p.exists() else None

    def save(self, cred: Credential) -> Path:
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        p = self.path / cred.file_name
        write_private(p, cred.to_json())
        return p

    def ensure(self, *, url: str | None = None, agents: dict[str, list[str]] | None = None) -> list[Credential]:
        """Create the scheduler and cli credentials (and the given agents') unless present, reusing the
        secrets of those that are; record ``url`` in every file; write the server configuration."""
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.path, 0o700)
        for role in ("scheduler", "cli"):
            if self.get(role) is None:
                self.save(new_credential(role, url=url or ""))
        for name, nodes in (agents or {}).items():
            self.add_agent(name, nodes, url=url, write_config=False)
        creds = self.credentials()
        for c in creds:
            if url and c.url != url:
                c.url = url
                self.save(c)
        self.write_server_config(creds)
        return creds

    def add_agent(self, name: str, nodes: list[str], *, url: str | None = None,
                  write_config: bool = True) -> Credential:
        """An agent credential for exactly ``nodes`` (its secret kept if it exists; its nodes replaced)."""
        old = self.get("agent", name)
        cred = new_credential("agent", name=name, nodes=nodes, url=url or (old.url if old else ""))
        if old is not None:
            cred.password = old.password
            if old.nodes == cred.nodes and (not url or old.url == url):
                return old
        if not cred.url:
            sched = self.get("scheduler")
            cred.url = sched.url if sched else ""
        self.save(cred)
        if write_config:
            self.write_server_config()
        return cred

    def write_server_config(self, creds: list[Credential] | None = None) -> Path:
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(self.server_config, render_authorization(creds if creds is not None else self.credentials()))
        return self.server_config

    def reload_server(self) -> int | None:
        """Have the nats-server `busched up` started re-read its configuration (SIGHUP); its pid, or None."""
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if Path("/proc").is_dir() else []
        except (OSError, ValueError):
            return None
        if cmdline and str(self.server_config.resolve()).encode() not in cmdline:
            return None  # a stale pid file: that process is not our server
        try:
            os.kill(pid, signal.SIGHUP)
        except OSError:
            return None
        return pid


# -- discovery -------------------------------------------------------------------------------------------------------
def auth_search_dirs(configured: str | None = None) -> list[Path]:
    """Where commands look for credentials: the directory configured (the command line reads
    ``$BUSCHED_AUTH_DIR``), else ``./.busched/auth``."""
    return [Path(configured)] if configured else [DEFAULT_AUTH_DIR]


def find_credential(role: str, nodes: Iterable[str] | None = None,
                    dirs: Iterable[Path] | None = None) -> Credential | None:
    """The credential of ``role`` in the first auth directory that has one; for an agent, the one whose
    nodes are exactly ``nodes``."""
    want = sorted(set(nodes)) if nodes is not None else None
    for d in (auth_search_dirs() if dirs is None else dirs):
        ad = AuthDir(d)
        if role != "agent":
            try:
                c = ad.get(role)
            except AuthError:
                continue
            if c is not None:
                return c
            continue
        if want is None or not ad.path.is_dir():
            continue
        for p in sorted(ad.path.glob("agent-*.json")):
            try:
                c = Credential.load(p)
            except AuthError:
                continue
            if sorted(set(c.nodes)) == want:
                return c
    return None
