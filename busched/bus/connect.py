"""How to reach NATS: URL, credentials and TLS, as the `Bus` connects with them, and which nats-server
versions busched works with.

Where the values come from (flags, ``BUSCHED_NATS*`` variables, the credentials `busched up`
generated) is the command line's business: `busched.cli.connection`.

The oldest server busched runs against is `MIN_SERVER_VERSION`, the newest of the versions that brought
what it uses (`SERVER_FEATURES`).  Below it the failure would be silent rather than loud: a 2.9 server
(Debian's package) takes a consumer's ``filter_subjects`` without knowing it and delivers every subject
of the stream, so an agent would receive other nodes' decisions.  So `Bus.connect` refuses such a server
by name (`check_server_version`) instead of working around it."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

__all__ = ["NatsOptions", "DEFAULT_URL", "MIN_SERVER_VERSION", "SERVER_FEATURES", "check_server_version",
           "parse_version"]

DEFAULT_URL = "nats://127.0.0.1:4222"

# what busched uses of JetStream, and the nats-server release that brought it; the minimum is the newest (a
# feature added to busched that needs a newer server, e.g. per-message TTLs (2.11), is added here)
SERVER_FEATURES: dict[str, tuple[int, int, int]] = {
    "Nats-Expected-Last-Subject-Sequence (conditional writes)": (2, 3, 0),
    "per-subject limits (max_msgs_per_subject)": (2, 3, 0),
    "stream sources (the state history copy)": (2, 2, 0),
    "direct get (allow_direct)": (2, 9, 0),
    "consumers with several filter subjects (filter_subjects)": (2, 10, 0),
    "stream replicas raised in place (a stream update's num_replicas)": (2, 8, 0),
}
MIN_SERVER_VERSION: tuple[int, int, int] = max(SERVER_FEATURES.values())


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``2.10.4``, ``v2.11.0-RC.1`` or ``2.12.0-dev`` -> (2, 10, 4) ...; None when it names no version."""
    core = text.strip().lstrip("v").split("-", 1)[0].split("+", 1)[0]
    parts = core.split(".")
    try:
        nums = [int(p) for p in parts[:3]]
    except ValueError:
        return None
    if not nums:
        return None
    while len(nums) < 3:
        nums.append(0)
    return nums[0], nums[1], nums[2]


def check_server_version(text: str, where: str = "") -> str | None:
    """Why busched cannot run against a nats-server that says it is ``text`` (None: it can).  A version that
    does not parse is let through (a build of its own): the server's own errors then say what is missing."""
    have = parse_version(text)
    if have is None or have >= MIN_SERVER_VERSION:
        return None
    need = [f for f, v in SERVER_FEATURES.items() if v > have]
    at = f" at {where}" if where else ""
    return (f"nats-server {text}{at} is older than {'.'.join(map(str, MIN_SERVER_VERSION))}, the oldest busched "
            f"supports (it lacks: {'; '.join(need)}); upgrade the server")


@dataclass
class NatsOptions:
    url: str = DEFAULT_URL  # comma separated for several servers
    creds: str | None = None  # a .creds file (JWT + nkey seed)
    nkey: str | None = None  # an nkey seed file
    user: str | None = None
    password: str | None = None
    token: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_insecure: bool = False
    name: str = "busched"
    connect_timeout: float = 5.0
    inbox_prefix: str | None = None  # e.g. _INBOX_node-00: lets a server permit a user only its own replies

    def servers(self) -> list[str]:
        return [u.strip() for u in self.url.split(",") if u.strip()]

    def ssl_context(self) -> ssl.SSLContext | None:
        tls_url = any(u.startswith("tls://") for u in self.servers())
        if not (self.tls_ca or self.tls_cert or tls_url):
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.tls_ca)
        if self.tls_cert:
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
        if self.tls_insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def connect_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"servers": self.servers(), "name": self.name,
                              "connect_timeout": max(1, int(self.connect_timeout))}
        if self.creds:
            kw["user_credentials"] = self.creds
        if self.nkey:
            kw["nkeys_seed"] = self.nkey
        if self.user:
            kw["user"] = self.user
            kw["password"] = self.password or ""
        if self.token:
            kw["token"] = self.token
        ctx = self.ssl_context()
        if ctx is not None:
            kw["tls"] = ctx
        if self.inbox_prefix:
            kw["inbox_prefix"] = self.inbox_prefix
        return kw
