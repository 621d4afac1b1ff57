"""The NATS connection flags every command shares, and where their values come from: a flag, else its
``BUSCHED_NATS*`` variable, else the busched credential of the command's role discovered in
``$BUSCHED_AUTH_DIR`` or ``./.busched/auth`` (what `busched up` generated).  The environment is read
here, at the command line, and nowhere below it."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from busched.bus.auth import AuthError, Credential, auth_search_dirs, find_credential
from busched.bus.connect import DEFAULT_URL, NatsOptions

__all__ = ["add_nats_arguments", "options_from_args", "discover_credential", "ROLE_BY_NAME"]

log = logging.getLogger("busched.cli")


def add_nats_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("NATS connection")
    # every default is None: `options_from_args` takes a flag, else its BUSCHED_NATS* variable, else what it
    # discovers in ./.busched/auth (the credentials `busched up` generated), so explicit settings always win
    g.add_argument("--nats", metavar="URL", default=None,
                   help=f"NATS server URL(s), comma separated (env BUSCHED_NATS; default: the url of the discovered "
                        f"credentials, else {DEFAULT_URL})")
    g.add_argument("--creds", metavar="FILE", default=None,
                   help="NATS credentials file (JWT + nkey seed; env BUSCHED_NATS_CREDS)")
    g.add_argument("--nkey", metavar="FILE", default=None, help="nkey seed file (env BUSCHED_NATS_NKEY)")
    g.add_argument("--auth", metavar="FILE", default=None,
                   help="busched credentials file (JSON: url, user, password, inbox_prefix) as `busched up` and "
                        "`busched auth` write them (env BUSCHED_NATS_AUTH; default: the one for this command's role "
                        "in $BUSCHED_AUTH_DIR or ./.busched/auth, if any)")
    g.add_argument("--user", default=None, help="user name (env BUSCHED_NATS_USER)")
    g.add_argument("--password", default=None,
                   help="password (prefer env BUSCHED_NATS_PASSWORD or --auth FILE: a flag shows in `ps`)")
    g.add_argument("--token", default=None, help="token (prefer env BUSCHED_NATS_TOKEN: a flag shows in `ps`)")
    g.add_argument("--tls-ca", metavar="FILE", help="CA bundle to verify the server")
    g.add_argument("--tls-cert", metavar="FILE", help="client certificate (mutual TLS)")
    g.add_argument("--tls-key", metavar="FILE", help="client key (mutual TLS)")
    g.add_argument("--tls-insecure", action="store_true", help="do not verify the server certificate")
    g.add_argument("--inbox-prefix", default=None,
                   help="reply subject prefix (env BUSCHED_NATS_INBOX_PREFIX; default _INBOX, or the credentials'); "
                        "give each restricted user its own")


# which busched credential a command connects with when it is given none (by the connection name it uses)
ROLE_BY_NAME = {"busched-scheduler": "scheduler", "busched-run": "scheduler", "busched-agent": "agent",
                "busched-apply": "cli", "busched-delete": "cli", "busched-get": "cli", "busched-queue": "cli",
                "busched-job": "cli", "busched-node": "cli", "busched-describe": "cli", "busched-explain": "cli",
                "busched-events": "cli", "busched-logs": "cli",
                "busched-agent-check": "scheduler"}  # it writes binding records and decisions, as a scheduler
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _arg(args: argparse.Namespace, attr: str, env: str) -> Any:
    v = getattr(args, attr, None)
    return v if v not in (None, "") else (os.environ.get(env) or None)


def _loopback_only(url: str) -> bool:
    from urllib.parse import urlsplit

    for u in url.split(","):
        u = u.strip()
        if not u:
            continue
        try:
            host = urlsplit(u if "://" in u else f"nats://{u}").hostname or ""
        except ValueError:
            return False
        if host not in _LOOPBACK:
            return False
    return True


def _agent_nodes(args: argparse.Namespace) -> list[str] | None:
    """The node names an agent command serves (``args.agent_nodes``, set by `busched agent` before it
    connects): its credential is the one made for exactly those nodes."""
    names = getattr(args, "agent_nodes", None)
    return list(names) if isinstance(names, (list, tuple)) else None


def discover_credential(role: str | None, args: argparse.Namespace | None = None) -> Any:
    """The busched credential (`busched.bus.auth.Credential`) this command would use, or None."""
    path = _arg(args, "auth", "BUSCHED_NATS_AUTH") if args is not None else os.environ.get("BUSCHED_NATS_AUTH")
    if path:
        return Credential.load(path)  # asked for explicitly: an unreadable file is an error (AuthError)
    if role is None:
        return None
    try:
        return find_credential(role, _agent_nodes(args) if role == "agent" and args is not None else None,
                               _auth_dirs())
    except AuthError as e:
        log.warning("%s", e)
        return None


def options_from_args(args: argparse.Namespace, name: str = "busched", role: str | None = None) -> NatsOptions:
    """Connection options: flags, else BUSCHED_NATS* variables, else the busched credential of ``role``
    (default: by ``name``, `ROLE_BY_NAME`) found with `discover_credential` (used only towards a loopback
    server or the url it names, so a local secret is never sent to a server named on the command line)."""
    url = _arg(args, "nats", "BUSCHED_NATS")
    opts = NatsOptions(url=url or DEFAULT_URL, creds=_arg(args, "creds", "BUSCHED_NATS_CREDS"),
                       nkey=_arg(args, "nkey", "BUSCHED_NATS_NKEY"), user=_arg(args, "user", "BUSCHED_NATS_USER"),
                       password=_arg(args, "password", "BUSCHED_NATS_PASSWORD"),
                       token=_arg(args, "token", "BUSCHED_NATS_TOKEN"), tls_ca=getattr(args, "tls_ca", None),
                       tls_cert=getattr(args, "tls_cert", None), tls_key=getattr(args, "tls_key", None),
                       tls_insecure=bool(getattr(args, "tls_insecure", False)),
                       inbox_prefix=_arg(args, "inbox_prefix", "BUSCHED_NATS_INBOX_PREFIX"), name=name)
    if opts.creds or opts.nkey or opts.user or opts.token:
        return opts  # credentials given: no discovery
    role = role or getattr(args, "nats_role", None) or ROLE_BY_NAME.get(name)
    explicit_file = bool(_arg(args, "auth", "BUSCHED_NATS_AUTH"))
    cred = discover_credential(role, args)
    if cred is None:
        if role == "agent" and any(d.is_dir() for d in _auth_dirs()):
            log.warning("no agent credential for exactly these nodes in %s: add one with `busched auth add-agent "
                        "--prefix P --nodes N` (connecting without)", ", ".join(map(str, _auth_dirs())))
        return opts
    if url and not explicit_file and not (_loopback_only(url) or url == cred.url):
        return opts  # a server named explicitly elsewhere: do not hand it a local secret
    if not url and cred.url:
        opts.url = cred.url
    opts.user, opts.password = cred.user, cred.password
    if not opts.inbox_prefix and cred.inbox_prefix:
        opts.inbox_prefix = cred.inbox_prefix
    log.debug("connecting as %s (%s) from its credentials file", cred.user, cred.role)
    return opts


def _auth_dirs() -> list[Path]:
    """Where commands look for credentials: ``$BUSCHED_AUTH_DIR``, else ``./.busched/auth``."""
    return auth_search_dirs(os.environ.get("BUSCHED_AUTH_DIR"))
