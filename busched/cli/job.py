"""`busched job suspend|resume|delete NS/NAME`: Volcano's vcctl job suspend (AbortJob), resume, delete.

``suspend`` sets the job's ``suspend`` (batch/v1 Job's ``spec.suspend``) with a conditional write:
the scheduler evicts its running tasks (reason ``suspended``) and places none of them until
``resume``, which places them again as new attempts; `busched get jobs` shows the job Aborting, then
Aborted (`busched.scheduler.lifecycle`).  ``delete`` deletes the job's tasks, then the job: the
scheduler stops a deleted task's live attempt before it lets it go.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    from busched.cli.connection import add_nats_arguments

    p = sub.add_parser("job", help="suspend, resume or delete a job")
    verbs = p.add_subparsers(dest="verb", required=True)
    for verb, helptext in (("suspend", "evict a job's tasks and place none until it is resumed"),
                           ("resume", "place a suspended job's tasks again"),
                           ("delete", "delete a job and all its tasks")):
        v = verbs.add_parser(verb, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        v.add_argument("name", metavar="NS/NAME", help="the job (namespace default when no NS/ is given)")
        add_nats_arguments(v)
        v.set_defaults(func=cmd_job)


def cmd_job(args: argparse.Namespace) -> int:
    from busched.cli.common import namespaced
    from busched.cli.queue import run

    return run(args, "busched-job", lambda bus: job_command(bus, args.verb, namespaced(args.name)))


async def job_command(bus: Any, verb: str, key: str) -> str:
    import msgspec

    from busched.api.objects import JobSpec
    from busched.bus import messages as m
    from busched.bus import subjects as S
    from busched.bus.edit import DELETE, Refused, change_object, read_kind, read_object

    ns, name = key.split("/", 1)
    if verb == "delete":
        current, _ = await read_object(bus, "job", key)
        if current is None:
            raise Refused(f"no job {key!r}")
        tasks = [t for t in await read_kind(bus, "task", ns) if t.job == name]
        acks = await bus.publish_all((S.state_subject("task", f"{t.namespace}/{t.name}"),
                                      m.TaskDelete(name=t.name, namespace=t.namespace), None) for t in tasks)
        bad = [a.error for a in acks if not a.ok]
        if bad:
            raise RuntimeError(f"cannot delete the tasks of {key}: {bad[0]}")
        await change_object(bus, "job", key, lambda j: DELETE)
        return f"job {key} deleted with its {len(tasks)} task{'s' if len(tasks) != 1 else ''}"

    def change(j: JobSpec | None) -> Any:
        if j is None:
            raise Refused(f"no job {key!r}")
        return msgspec.structs.replace(j, suspend=verb == "suspend")

    await change_object(bus, "job", key, change)
    return f"job {key} {'suspended: its running tasks are evicted' if verb == 'suspend' else 'resumed'}"

