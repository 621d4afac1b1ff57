"""`busched auth init|export|add-agent`: the generated NATS users of a busched deployment (busched/bus/auth.py)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (a command imports what it uses when it runs: a fast `busched --help`)
    from busched.bus.auth import AuthDir


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("auth", help="generated NATS credentials: init, export the server's authorization, add an agent",
                       description="Manage the NATS users `busched up` generates in DATA_DIR/auth (0600 files): "
                                   "scheduler.json, cli.json, agent-<name>.json and the server's nats.conf.")
    asub = p.add_subparsers(dest="auth_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--data-dir", default=".busched", help="where auth/ lives (default %(default)s)")
        q.add_argument("--url", default=None, help="the server's URL, recorded in every credentials file")

    q = asub.add_parser("init", help="create the scheduler and cli credentials unless present")
    common(q)
    q.set_defaults(func=cmd_init)

    q = asub.add_parser("export", help="print (or write, 0600) the nats-server authorization block",
                        description="The `authorization { users = [...] }` block for your own nats-server "
                                    "(creating the credentials first if needed).  It holds the passwords: "
                                    "prefer -o FILE (written 0600) to standard output.")
    common(q)
    q.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (mode 0600) instead of standard output")
    q.set_defaults(func=cmd_export)

    q = asub.add_parser("add-agent", help="a credential for an agent serving exactly the given nodes",
                        description="Create (or update) agent-NAME.json for the nodes `busched agent --nodes N "
                                    "--prefix P [--start S]` serves, regenerate the server configuration and have "
                                    "the nats-server `busched up` started reload it (SIGHUP).")
    common(q)
    q.add_argument("--prefix", default="node", help="node name prefix, as for `busched agent` (default %(default)s)")
    q.add_argument("--nodes", type=int, default=1, help="how many nodes (default %(default)s)")
    q.add_argument("--start", type=int, default=0, help="first node index (default %(default)s)")
    q.add_argument("--node", action="append", default=[], metavar="NAME",
                   help="a node by name (may repeat; instead of --prefix/--nodes)")
    q.add_argument("--name", default=None, help="credential name (default: the prefix, or the one node's name)")
    q.set_defaults(func=cmd_add_agent)


def _dir(args: argparse.Namespace) -> AuthDir:
    from busched.bus.auth import AuthDir

    return AuthDir.of_data_dir(args.data_dir)


def cmd_init(args: argparse.Namespace) -> int:
    from busched.bus.auth import AuthError

    auth = _dir(args)
    try:
        creds = auth.ensure(url=args.url)
    except (AuthError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for c in creds:
        print(f"{auth.path / c.file_name}: user {c.user} ({c.role})")
    print(f"{auth.server_config}: the nats-server authorization (include it in your server's configuration)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from busched.bus.auth import AuthError, render_authorization, write_private

    auth = _dir(args)
    try:
        text = render_authorization(auth.ensure(url=args.url))
        if args.output:
            write_private(args.output, text)
            print(f"wrote {args.output} (0600)", file=sys.stderr)
        else:
            sys.stdout.write(text)
    except (AuthError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def cmd_add_agent(args: argparse.Namespace) -> int:
    from busched.agent.fleet import fleet_nodes
    from busched.bus.auth import AuthError

    auth = _dir(args)
    try:
        if args.node:
            nodes = list(args.node)
            name = args.name or (nodes[0] if len(nodes) == 1 else None)
            if name is None:
                raise AuthError("several --node: give the credential a --name")
        else:
            nodes = [n.name for n in fleet_nodes(args.nodes, prefix=args.prefix, start=args.start)]
            name = args.name or args.prefix
        auth.ensure(url=args.url)
        cred = auth.add_agent(name, nodes, url=args.url)
    except (AuthError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{auth.path / cred.file_name}: user {cred.user} for {', '.join(cred.nodes)} "
          f"(inbox prefix {cred.inbox_prefix})")
    pid = auth.reload_server()
    if pid is not None:
        print(f"nats-server (pid {pid}) reloads {auth.server_config}")
    else:
        print(f"no running nats-server of `busched up` found; {auth.server_config} is regenerated "
              "(reload your server, or the next `busched up` uses it)")
    if len(cred.nodes) > 1:
        # a fleet's agent may not create its own consumer: make it now as the scheduler (or the next `busched up`)
        import asyncio

        why = asyncio.run(_prepare(auth, cred.nodes))
        print("its decision consumer is ready" if not why else
              f"its decision consumer is not made yet ({why}): the next `busched up` makes it, or run this again "
              "while the server runs")
    return 0


async def _prepare(auth: AuthDir, nodes: list[str]) -> str:
    from busched.bus import Bus, BusError
    from busched.bus.auth import prepare_agent_consumer
    from busched.bus.connect import NatsOptions

    c = auth.get("scheduler")
    if c is None or not c.url:
        return "no scheduler credential with a url"
    try:
        bus = await Bus.connect(NatsOptions(url=c.url, user=c.user, password=c.password, inbox_prefix=c.inbox_prefix,
                                            name="busched-auth"), wait=3)
    except BusError as e:
        return str(e)
    try:
        await prepare_agent_consumer(bus, nodes)
        return ""
    except Exception as e:  # noqa: BLE001 - reported as one line
        return f"{type(e).__name__}: {e}"
    finally:
        await bus.close()
