"""busched.agentcheck: a conformance kit for node agents in any language (`busched agent-check`).

It drives one node's running agent through the protocol without a scheduler (bind, duplicate bind,
stale attempt and fence, evict, evict of an unknown task, a restart, heartbeats, results for its own
node only) and says which rule holds (docs/agents.md)::

    from busched.agentcheck import check_agent
    results = await check_agent(bus, "n1", restart=restart_my_agent)
    assert not any(r.failed for r in results)
"""

from busched.agentcheck.checks import RULES, Restart, RuleResult, check_agent
from busched.agentcheck.probe import Probe

__all__ = ["RULES", "Restart", "RuleResult", "check_agent", "Probe"]
