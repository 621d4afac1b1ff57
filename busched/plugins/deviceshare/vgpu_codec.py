"""The text formats of Volcano's vGPU (HAMi) annotations: a node's card register, a task's assigned cards.

The node register ``volcano.sh/node-vgpu-register`` lists the cards a device plugin found, one per
``:``-separated entry of six comma-separated fields::

    GPU-0,10,30000,NVIDIA-Tesla-V100,true,hami-core:GPU-1,10,30000,NVIDIA-Tesla-V100,true,hami-core:

(UUID, how many tasks may share it, its memory in MiB, its type, healthy, sharing mode).  A card's index
is its entry's position.  An entry with fewer than six fields makes the whole register unreadable, as in
Volcano; a count or memory that is not a number reads as 0.

A task's assignment ``volcano.sh/vgpu-ids-new`` (and its copy ``volcano.sh/devices-to-allocate``) is one
group per container, groups joined by ``;``, each a list of ``UUID,type,memory,cores:`` entries; an
entry that does not parse is skipped.  busched tasks are one container, so one group.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CardEntry", "ContainerDevice", "decode_register", "encode_pod_devices", "decode_pod_devices",
           "parse_go_bool", "HAMI_CORE", "MIG"]

HAMI_CORE = "hami-core"
MIG = "mig"


@dataclass(frozen=True)
class CardEntry:
    index: int
    uuid: str
    number: int
    memory: int
    type: str
    health: bool
    mode: str


@dataclass(frozen=True)
class ContainerDevice:
    uuid: str
    type: str
    used_mem: int
    used_cores: int


def parse_go_bool(text: str) -> bool:
    return text in ("1", "t", "T", "true", "TRUE", "True")


def _atoi(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def decode_register(text: str) -> list[CardEntry] | None:
    """The cards of a node register; None when it is unreadable (no ``:``, or a short entry)."""
    if ":" not in text:
        return None
    cards = []
    for index, entry in enumerate(text.split(":")):
        if "," not in entry:
            continue
        items = entry.split(",")
        if len(items) < 6:
            return None
        mode = MIG if items[5] == MIG else HAMI_CORE
        cards.append(CardEntry(index, items[0], _atoi(items[1]), _atoi(items[2]), items[3],
                               parse_go_bool(items[4]), mode))
    return cards


def encode_pod_devices(containers: list[list[ContainerDevice]]) -> str:
    return ";".join("".join(f"{d.uuid},{d.type},{d.used_mem},{d.used_cores}:" for d in devs)
                    for devs in containers)


def _uint(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def decode_pod_devices(text: str) -> list[list[ContainerDevice]]:
    if not text:
        return []
    out = []
    for group in text.split(";"):
        devs = []
        for entry in group.split(":"):
            if "," not in entry:
                continue
            items = entry.split(",")
            if len(items) < 4:
                continue
            mem, cores = _uint(items[2]), _uint(items[3])
            if mem is None or cores is None:
                continue
            devs.append(ContainerDevice(items[0], items[1], mem, cores))
        out.append(devs)
    return out
