"""How to reach NATS: URL, credentials and TLS, as the `Bus` connects with them.

Where the values come from (flags, ``BUSCHED_NATS*`` variables, the credentials `busched up`
generated) is the command line's business: `busched.cli.connection`."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

__all__ = ["NatsOptions", "DEFAULT_URL"]

DEFAULT_URL = "nats://127.0.0.1:4222"


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
