"""The base every busched message derives from (`Msg`) and the bounded scalar types their fields share.

Apart from `busched.bus.messages` so that the message families kept in modules of their own
(`busched.bus.state_events`, `busched.bus.request_reply`, `busched.bus.reports`) can derive from it
while `busched.bus.messages` gathers every family into the one tagged union it decodes.  That module
re-exports all of these: import messages from there.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from busched.api.limits import MAX_SHARD_NAME, LabelKey

__all__ = ["Msg", "Version", "Count", "ShardName", "Boot", "BindAnnotations", "MAX_BIND_ANNOTATIONS",
           "MAX_BIND_ANNOTATION_VALUE", "MAX_BOOT", "MAX_REASON", "MAX_STATE_MESSAGE", "cut"]

Version = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
ShardName = Annotated[str, msgspec.Meta(max_length=MAX_SHARD_NAME)]  # a NodeShard's name, "" for no shard
# what a bind adds to its task's annotations (the devices deviceshare gave it: docs/agents.md, "Devices"); a bind
# whose record would break these is never written (`busched.scheduler.write_bounds`)
MAX_BIND_ANNOTATIONS = 32
MAX_BIND_ANNOTATION_VALUE = 4096
BindAnnotations = Annotated[dict[LabelKey, Annotated[str, msgspec.Meta(max_length=MAX_BIND_ANNOTATION_VALUE)]],
                            msgspec.Meta(max_length=MAX_BIND_ANNOTATIONS)]

# a reason or message a producer writes into a record, a result or a status (a binding record's reason, a
# bind.rejected's, a task.phase's, a podgroup condition's): a longer one is cut (`cut`).  The fields' types do not
# say it (a reader must still take what older producers wrote); what they do bound is a state message's size
# (256 KiB, ``SchedulerSettings.max_event_bytes``), which a reason passed on from an agent to a record, with a
# prefix, or several conditions' messages would otherwise pass: readers would refuse the whole message
MAX_REASON = 4096
# an agent's boot (its incarnation: 12 hex digits), which its results and heartbeats name and a binding record
# passes on (`busched.scheduler.write_bounds` keeps room for it): a longer one is refused where it is decoded
MAX_BOOT = 253
Boot = Annotated[str, msgspec.Meta(max_length=MAX_BOOT)]
# the largest state message a scheduler takes by default (``SchedulerSettings.max_event_bytes``): a larger one is
# refused as oversized, so `busched apply` refuses to publish one (`busched.bus.apply.check_cluster`)
MAX_STATE_MESSAGE = 256 * 1024


def cut(text: str, limit: int = MAX_REASON) -> str:
    """``text``, or its first ``limit`` - 3 characters and "..." when it is longer than ``limit``."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Msg(msgspec.Struct, tag_field="type", kw_only=True, rename="camel", omit_defaults=True):
    """Base of every message.  ``version`` is the publisher's counter: informational, never an order (the
    stream's sequence is)."""

    version: Version = 0
