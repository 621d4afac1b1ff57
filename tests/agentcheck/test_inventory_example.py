"""examples/inventory_agent.py, which docs/integrating.md shows exactly as written: it serves an inventory's
nodes (each passes `busched agent-check`) and prunes a node removed from the file (real nats-server, the
adapter in its own process)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from busched.agentcheck import check_agent
from busched.bus import Bus
from busched.bus import messages as m
from busched.bus import subjects as S
from tests.nats_fixture import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "inventory_agent.py"

INVENTORY = """
nodes:
  - name: inv-a
    allocatable: {cpu: "16", memory: 64Gi}
    labels: {rack: r1}
{more}"""
NODE_B = """  - name: inv-b
    allocatable: {cpu: "16", memory: 64Gi, pods: 50}
"""


def test_integrating_md_shows_the_example_exactly():
    [code] = re.findall(r"^```python\n(.*?)^```$", (ROOT / "docs" / "integrating.md").read_text(), flags=re.M | re.S)
    assert code == EXAMPLE.read_text()


async def _node(bus: Bus, name: str) -> m.Msg | None:
    last = await bus.last_state(S.state_subject("node", name))
    return m.decode(last[1]) if last is not None else None


async def test_the_example_serves_its_inventory_and_prunes_a_removed_node(nats_server, tmp_path):
    bus = await Bus.connect(nats_server.url)
    await bus.ensure_streams()  # the scheduler would have made them
    inv = tmp_path / "lab.yaml"
    inv.write_text(INVENTORY.replace("{more}", NODE_B))
    proc = subprocess.Popen([sys.executable, str(EXAMPLE), "--nats", nats_server.url, str(inv), "--every", "0.2",
                             "--heartbeat", "0.1"],  # the check's quiet periods are three heartbeats each
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for name in ("inv-a", "inv-b"):
            node = await wait_until(lambda name=name: _node(bus, name), what=f"{name} registered")
            assert isinstance(node, m.NodeUpsert) and node.node.labels["busched.io/inventory"] == "lab"
        assert (await _node(bus, "inv-a")).node.allocatable["pods"] == 110  # filled in: the pods rule
        results = await check_agent(bus, "inv-a", timeout=10.0)
        assert {r.rule: r.detail for r in results if r.verdict != "pass"} == {
            "restart": "give --restart-cmd CMD (or --restart-manual) to check it"}

        inv.write_text(INVENTORY.replace("{more}", ""))
        await wait_until(lambda: _node_deleted(bus, "inv-b"), what="inv-b pruned")
        assert isinstance(await _node(bus, "inv-a"), m.NodeUpsert)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        await bus.close()
    assert proc.returncode == 0, err
    assert "pruned inv-b" in err


async def _node_deleted(bus: Bus, name: str) -> bool:
    return isinstance(await _node(bus, name), m.NodeDelete)
