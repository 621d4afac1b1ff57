"""How to reach NATS: URL, credentials and TLS, shared by every command."""

from __future__ import annotations

import argparse
import os
import ssl
from dataclasses import dataclass
from typing import Any

__all__ = ["NatsOptions", "add_nats_arguments", "options_from_args", "DEFAULT_URL"]

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


def add_nats_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("NATS connection")
    g.add_argument("--nats", metavar="URL", default=os.environ.get("BUSCHED_NATS", DEFAULT_URL),
                   help="NATS server URL(s), comma separated (env BUSCHED_NATS; default %(default)s)")
    g.add_argument("--creds", metavar="FILE", default=os.environ.get("BUSCHED_NATS_CREDS"),
                   help="NATS credentials file (JWT + nkey seed)")
    g.add_argument("--nkey", metavar="FILE", default=os.environ.get("BUSCHED_NATS_NKEY"), help="nkey seed file")
    g.add_argument("--user", default=os.environ.get("BUSCHED_NATS_USER"))
    g.add_argument("--password", default=os.environ.get("BUSCHED_NATS_PASSWORD"))
    g.add_argument("--token", default=os.environ.get("BUSCHED_NATS_TOKEN"))
    g.add_argument("--tls-ca", metavar="FILE", help="CA bundle to verify the server")
    g.add_argument("--tls-cert", metavar="FILE", help="client certificate (mutual TLS)")
    g.add_argument("--tls-key", metavar="FILE", help="client key (mutual TLS)")
    g.add_argument("--tls-insecure", action="store_true", help="do not verify the server certificate")
    g.add_argument("--inbox-prefix", default=os.environ.get("BUSCHED_NATS_INBOX_PREFIX"),
                   help="reply subject prefix (default _INBOX); give each restricted user its own")


def options_from_args(args: argparse.Namespace, name: str = "busched") -> NatsOptions:
    return NatsOptions(url=args.nats, creds=args.creds, nkey=args.nkey, user=args.user, password=args.password,
                       token=args.token, tls_ca=args.tls_ca, tls_cert=args.tls_cert, tls_key=args.tls_key,
                       tls_insecure=args.tls_insecure, inbox_prefix=args.inbox_prefix, name=name)
