"""The events stream under the generated roles (busched/bus/auth.py): the scheduler writes events, the cli
role reads them (`busched events`) and writes none, an agent neither."""

from __future__ import annotations

import asyncio

from busched.agent import Agent, fleet_nodes
from busched.bus import Bus
from busched.bus import messages as m
from busched.bus import subjects as S
from busched.bus.apply import apply_cluster
from busched.cli.main import main
from busched.scheduler import Scheduler, SchedulerSettings
from tests.bus.test_bus_auth import NODE, _cluster, _opts
from tests.nats_fixture import FAST, wait_until
from tests.scheduler.test_sched_events import held_events

FORGED = m.Event(involved_object=m.EventObject(kind="task", namespace="p", name="j-0"), reason="Scheduled",
                 message="Successfully assigned p/j-0 to nowhere")


async def test_the_cli_reads_events_and_no_role_but_the_scheduler_writes_them(secured, capsys):
    srv, auth = secured
    sbus = await Bus.connect(_opts(auth, "scheduler"))
    cbus = await Bus.connect(_opts(auth, "cli"))
    abus = await Bus.connect(_opts(auth, "agent", NODE))
    sched = Scheduler(sbus, None, SchedulerSettings(**FAST))
    agent = Agent(abus, fleet_nodes(1), heartbeat_interval=0.1)
    loop = None
    try:
        await sched.start()
        await agent.start()
        loop = asyncio.ensure_future(sched.run_forever())
        await apply_cluster(cbus, _cluster())

        async def scheduled() -> bool:  # read with the cli's credential
            return any(e.reason == "Scheduled" for e in await held_events(cbus, "task", "p/j-0"))
        await wait_until(scheduled, what="the Scheduled event, read by the cli role")
        argv = ["events", "task/p/j-0", "--auth", str(auth.path / "cli.json")]
        assert await asyncio.to_thread(main, argv) == 0
        assert "Successfully assigned p/j-0 to node-00" in capsys.readouterr().out

        subject = S.event_subject("task", "p/j-0", "forged")
        assert not (await cbus.publish(subject, FORGED, timeout=1)).ok
        assert not (await abus.publish(subject, FORGED, timeout=1)).ok
        assert (await sbus.publish(subject, FORGED, timeout=1)).ok
    finally:
        await sched.stop()
        if loop is not None:
            await asyncio.wait_for(loop, 5)
        await agent.stop()
        for b in (abus, cbus, sbus):
            await b.close()
