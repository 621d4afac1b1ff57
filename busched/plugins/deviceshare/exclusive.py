"""GPU exclusivity rules (Volcano's gpuexclusive.go): tasks matching a rule never share a vGPU card.

``deviceshare.GPUExclusiveRules`` is a list of label maps; a task matches a rule when it carries every
label of it with that value.  A card that holds a task of some rule is *reserved* for that rule: another
task matching the same rule may not share it (it is treated as full for that task), while tasks of other
rules, and tasks matching none, still may.  A task matching several rules avoids the cards of all of them.

The reservations of a node are built when the session opens, from the tasks on it: the cards they hold
in the device bookkeeping, or, for a task that holds none there (a Releasing one), the cards its
``volcano.sh/vgpu-ids-new`` names.  Allocating a matching task adds its cards; releasing it drops a card
from its rules' reservations once no other rule-matching task is on the card.  Volcano also carries its
reservations from one session to the next, for pods whose bind annotations the API server has not shown
it yet; busched's cache has a bind's annotations from its binding record on, so it needs no such memory.
Only hami-core nodes take part (MIG isolates in hardware), as in Volcano.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from busched.api.task import TaskInfo
from busched.plugins.deviceshare import vgpu_codec as codec
from busched.plugins.deviceshare.vgpu import ASSIGNED_IDS, DEVICE_NAME, VgpuDevices

__all__ = ["RULES_KEY", "parse_rules", "matching_rules", "ExclusiveVgpu"]

RULES_KEY = "deviceshare.GPUExclusiveRules"

Rule = dict[str, str]


def parse_rules(raw: Any) -> list[Rule]:
    """The rules of the argument's value: a list of label maps; anything else, and empty maps, give none
    (Volcano's parseExclusiveRules keeps only string values)."""
    if not isinstance(raw, list):
        return []
    rules = []
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        labels = {k: v for k, v in item.items() if isinstance(k, str) and isinstance(v, str)}
        if labels:
            rules.append(labels)
    return rules


def matching_rules(labels: Mapping[str, str], rules: list[Rule]) -> list[int]:
    return [i for i, rule in enumerate(rules) if all(labels.get(k) == v for k, v in rule.items())]


class ExclusiveVgpu:
    """A node's vGPUs with the rules' reservations (the plugin's `Devices` for the node)."""

    name = DEVICE_NAME

    def __init__(self, inner: VgpuDevices, rules: list[Rule]) -> None:
        self.inner = inner
        self.rules = rules
        self.rule_cards: dict[int, set[int]] = {}  # rule -> cards reserved for it
        self.task_rules: dict[str, set[int]] = {}  # task uid -> the rules it matches (matching tasks only)

    @classmethod
    def open(cls, inner: VgpuDevices, rules: list[Rule], tasks: Iterable[TaskInfo]) -> ExclusiveVgpu:
        ex = cls(inner, rules)
        by_uuid = {c.uuid: i for i, c in inner.cards.items()}
        for task in tasks:
            matched = matching_rules(task.labels, rules)
            if not matched:
                continue
            ex.task_rules[task.uid] = set(matched)
            cards = ex.cards_of(task.uid)
            if not cards:  # not in the bookkeeping: the cards its annotation names
                cards = {by_uuid[d.uuid] for devs in codec.decode_pod_devices(task.annotations.get(ASSIGNED_IDS, ""))
                         for d in devs if d.uuid in by_uuid}
            ex.reserve(matched, cards)
        return ex

    def cards_of(self, uid: str) -> set[int]:
        return {i for i, c in self.inner.cards.items() if uid in c.tasks}

    def reserve(self, rules: Iterable[int], cards: set[int]) -> None:
        for r in rules:
            if cards:
                self.rule_cards.setdefault(r, set()).update(cards)

    def reserved_for(self, task: TaskInfo) -> frozenset[int]:
        """The cards the task may not share: those of every rule it matches."""
        out: set[int] = set()
        for r in matching_rules(task.labels, self.rules):
            out |= self.rule_cards.get(r, set())
        return frozenset(out)

    # -- the `Devices` operations ----------------------------------------------------------------------
    def has_request(self, task: TaskInfo) -> bool:
        return self.inner.has_request(task)

    def add_task(self, task: TaskInfo) -> None:
        self.inner.add_task(task)
        matched = matching_rules(task.labels, self.rules)
        if matched:
            self.task_rules[task.uid] = set(matched)
            self.reserve(matched, self.cards_of(task.uid))

    def filter(self, task: TaskInfo) -> str | None:
        return self.inner.filter(task, self.reserved_for(task))

    def score(self, task: TaskInfo, policy: str) -> float:
        return self.inner.score(task, policy, self.reserved_for(task))

    def allocate(self, task: TaskInfo, now_ns: int) -> dict[str, str]:
        annotations = self.inner.allocate(task, now_ns, self.reserved_for(task))
        matched = matching_rules(task.labels, self.rules)
        if matched:
            self.task_rules[task.uid] = set(matched)
            self.reserve(matched, self.cards_of(task.uid))
        return annotations

    def release(self, task: TaskInfo) -> list[str]:
        keys = self.inner.release(task)
        self.untrack(task.uid)
        return keys

    def untrack(self, uid: str) -> None:
        """Drop the task's rules; a card stays reserved while another rule-matching task is on it."""
        rules = self.task_rules.pop(uid, None)
        if rules is None:
            return
        for r in rules:
            cards = self.rule_cards.get(r)
            if cards is None:
                continue
            for i in list(cards):
                card = self.inner.cards.get(i)
                if card is None:
                    continue
                if not any(other != uid and other in self.task_rules for other in card.tasks):
                    cards.discard(i)
            if not cards:
                del self.rule_cards[r]
