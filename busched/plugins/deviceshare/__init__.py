"""deviceshare: GPUs shared by memory or by number, and HAMi vGPUs (Volcano's deviceshare plugin).

A node's devices are read from what its agent reports, in Volcano's terms (docs/agents.md, "Devices"):
shared GPUs from its capacity (``volcano.sh/gpu-memory``, ``volcano.sh/gpu-number``,
`busched.plugins.deviceshare.gpushare`), vGPUs from its register annotation and allocatable
(`busched.plugins.deviceshare.vgpu`).  When the session opens the plugin builds each node's device
bookkeeping from the tasks on it (the cards their annotations name) and keeps it current with the
session's allocate and deallocate events: an allocated or pipelined task is given its cards and the
annotations that name them (``volcano.sh/gpu-index``, ``volcano.sh/vgpu-ids-new`` ...) go out with its
bind (``TaskInfo.bind_annotations``); a task taken back (an undone allocation, an eviction) frees them.
What a bind may carry is bounded (at most 32 keys, values of at most 4,096 characters: a vGPU assignment of
very many cards, or of cards with long register names, is longer); the bound is checked where the bind is
written, not here (`busched.scheduler.write_bounds` says why): a bind over it fails as a failed bind does.
(Volcano does this bookkeeping in its predicates plugin's event handlers; here it lives with the devices.)

Predicate: a task that asks for an enabled kind of device must have its cards on the node
(Unschedulable otherwise); a node without devices of that kind passes, as in Volcano, and is left to
the resource fit.  Node order (only with ``deviceshare.ScheduleWeight`` > 0): the devices' score under
``deviceshare.SchedulePolicy``, rounded to an integer, times the weight.  Both have fast-path twins
(``predicate_batch``, ``score_batch``): a task asking for no device passes and scores 0 everywhere, so
configuring the plugin leaves the vectorised paths on for every other task.

Arguments (Volcano's names)::

    deviceshare.GPUSharingEnable: true     # GPUs shared by memory (volcano.sh/gpu-memory)
    deviceshare.GPUNumberEnable: false     # whole GPUs by number (volcano.sh/gpu-number); not with the above
    deviceshare.VGPUEnable: false          # HAMi vGPUs (volcano.sh/vgpu-*); not with either of the above
    deviceshare.NodeLockEnable: false      # accepted; busched needs no node lock (one writer per node)
    deviceshare.SchedulePolicy: binpack    # binpack | spread (vGPU card order and score)
    deviceshare.ScheduleWeight: 10
    deviceshare.GPUExclusiveRules: [{app: training}]   # vGPU exclusivity rules (exclusive.py)
    deviceshare.KnownGeometriesCMName / KnownGeometriesCMNamespace   # refused: busched reads no ConfigMap

``deviceshare.AscendMindClusterVNPUEnable`` and ``deviceshare.AscendHAMiVNPUEnable`` (Ascend NPUs) are not
implemented: true is an error naming them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from busched.api.fit import Code, FitError
from busched.api.node import NodeInfo
from busched.api.task import TaskInfo, TaskStatus
from busched.framework import points
from busched.framework.arguments import ArgumentError, Arguments
from busched.framework.decision import fit_error
from busched.framework.session import EventHandler, Session
from busched.plugins.deviceshare.base import DeviceError, Devices, holds_devices
from busched.plugins.deviceshare.exclusive import RULES_KEY, ExclusiveVgpu, parse_rules
from busched.plugins.deviceshare.gpushare import GpuShareDevices, gpu_memory_of, gpu_number_of
from busched.plugins.deviceshare.vgpu import VgpuDevices, request_of

__all__ = ["DeviceSharePlugin", "DeviceShareSettings", "open_devices"]

log = logging.getLogger(__name__)

PLUGIN = "deviceshare"
GPU_SHARING = "deviceshare.GPUSharingEnable"
GPU_NUMBER = "deviceshare.GPUNumberEnable"
NODE_LOCK = "deviceshare.NodeLockEnable"
VGPU = "deviceshare.VGPUEnable"
SCHEDULE_POLICY = "deviceshare.SchedulePolicy"
SCHEDULE_WEIGHT = "deviceshare.ScheduleWeight"
NOT_IMPLEMENTED = ("deviceshare.AscendMindClusterVNPUEnable", "deviceshare.AscendHAMiVNPUEnable")
# a task placed by this session (given devices anew); any other status re-enters holding what it had
_PLACED = frozenset({TaskStatus.Allocated, TaskStatus.Pipelined})


@dataclass(frozen=True)
class DeviceShareSettings:
    gpu_sharing: bool = False  # deviceshare.GPUSharingEnable
    gpu_number: bool = False  # deviceshare.GPUNumberEnable
    vgpu: bool = False  # deviceshare.VGPUEnable
    policy: str = ""  # deviceshare.SchedulePolicy
    weight: int = 0  # deviceshare.ScheduleWeight
    rules: list[dict[str, str]] = field(default_factory=list)  # deviceshare.GPUExclusiveRules

    @classmethod
    def of(cls, arguments: Mapping[str, Any] | None) -> DeviceShareSettings:
        args = Arguments.of(arguments)
        for key in NOT_IMPLEMENTED:
            if args.get_bool(key, False):
                raise ArgumentError(f"{PLUGIN}: {key}: Ascend NPU sharing is not implemented in busched")
        args.get_bool(NODE_LOCK, False)  # accepted and checked; no effect in busched (one writer per node)
        s = cls(gpu_sharing=args.get_bool(GPU_SHARING, False), gpu_number=args.get_bool(GPU_NUMBER, False),
                vgpu=args.get_bool(VGPU, False),
                policy=args.get_str(SCHEDULE_POLICY, ""), weight=args.get_int(SCHEDULE_WEIGHT, 0),
                rules=parse_rules(args.get(RULES_KEY)))
        if s.gpu_sharing and s.gpu_number:
            raise ArgumentError(f"{PLUGIN}: can not define true in both {GPU_SHARING} and {GPU_NUMBER}")
        if (s.gpu_sharing or s.gpu_number) and s.vgpu:
            raise ArgumentError(f"{PLUGIN}: gpu-share ({GPU_SHARING}, {GPU_NUMBER}) and vgpu ({VGPU}) "
                                "can't be used together")
        return s


def open_devices(node: NodeInfo, s: DeviceShareSettings) -> list[Devices]:
    """The node's devices of the enabled kinds, with the tasks on it accounted."""
    found: list[Devices] = []
    if s.gpu_sharing or s.gpu_number:
        share = GpuShareDevices.from_node(node, sharing=s.gpu_sharing, number=s.gpu_number)
        if share is not None:
            found.append(share)
    if s.vgpu:
        vgpu = VgpuDevices.from_node(node)
        if vgpu is not None:
            vgpu.policy = s.policy
            found.append(vgpu)
    for devices in found:
        for task in node.tasks.values():
            if holds_devices(task) and devices.has_request(task):
                devices.add_task(task)
    if s.rules:
        found = [ExclusiveVgpu.open(d, s.rules, node.tasks.values()) if isinstance(d, VgpuDevices) else d
                 for d in found]
    return found


class DeviceSharePlugin:
    name = PLUGIN
    reads_clock = False  # the clock only stamps annotations; no decision depends on it
    # every argument it reads (busched.framework.arguments); the Ascend switches are read to refuse them, and
    # Volcano's KnownGeometriesCM* are not read (busched reads no ConfigMap: naming them is an error)
    reads_arguments = (GPU_SHARING, GPU_NUMBER, NODE_LOCK, VGPU, SCHEDULE_POLICY, SCHEDULE_WEIGHT, RULES_KEY,
                       *NOT_IMPLEMENTED)

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        self.arguments = Arguments.of(arguments)
        self.settings = DeviceShareSettings.of(self.arguments)
        self.devices: dict[str, list[Devices]] = {}
        self.now_ns = 0

    def on_session_open(self, ssn: Session) -> None:
        s = self.settings
        if not (s.gpu_sharing or s.gpu_number or s.vgpu):
            return
        self.now_ns = int(ssn.now * 1_000_000_000)
        self.devices = {}
        for node in ssn.node_list:
            found = open_devices(node, s)
            if found:
                self.devices[node.name] = found
        ssn.add_fn(points.PREDICATE, self.name, self.predicate, twin=self.predicate_batch)
        if s.weight > 0:
            ssn.add_fn(points.NODE_ORDER, self.name, self.score, twin=self.score_batch)
        ssn.add_event_handler(EventHandler(allocate=self.allocated, deallocate=self.deallocated))

    def on_session_close(self, ssn: Session) -> None:
        self.devices = {}

    def _asked(self, task: TaskInfo, node: str) -> list[Devices]:
        return [d for d in self.devices.get(node, ()) if d.has_request(task)]

    def wants_devices(self, task: TaskInfo) -> bool:
        """The task asks for a kind of device that is enabled (else the predicate passes it everywhere)."""
        s = self.settings
        return ((s.gpu_sharing and gpu_memory_of(task) > 0) or (s.gpu_number and gpu_number_of(task) > 0)
                or (s.vgpu and request_of(task) is not None))

    def predicate_batch(self, task: TaskInfo, arrays: Any, rows: Any) -> Any:
        """`predicate` over many nodes at once (the fast path's twin): True where it passes.  A task asking
        for no device passes everywhere; one that does is checked on each node that has devices."""
        ok = np.ones(len(rows), dtype=bool)
        if not self.devices or not self.wants_devices(task):
            return ok
        nodes = arrays.nodes
        for k, r in enumerate(rows.tolist()):
            node = nodes[r]
            if node.name in self.devices:
                try:
                    self.predicate(task, node)
                except FitError:
                    ok[k] = False
        return ok

    def predicate(self, task: TaskInfo, node: NodeInfo) -> None:
        for devices in self._asked(task, node.name):
            reason = devices.filter(task)
            if reason is not None:
                raise fit_error(task, node, reason, self.name, Code.Unschedulable)

    def score(self, task: TaskInfo, node: NodeInfo) -> float:
        s = sum(d.score(task, self.settings.policy) for d in self._asked(task, node.name))
        return float(math.floor(s + 0.5) * self.settings.weight)

    def score_batch(self, task: TaskInfo, arrays: Any, rows: Any) -> Any:
        """`score` for many nodes at once (the fast path's twin): 0 but on the nodes with devices the task asks."""
        out = np.zeros(len(rows), dtype=float)
        if not self.devices or not self.wants_devices(task):
            return out
        nodes = arrays.nodes
        for k, r in enumerate(rows.tolist()):
            node = nodes[r]
            if node.name in self.devices:
                out[k] = self.score(task, node)
        return out

    def allocated(self, task: TaskInfo) -> None:
        for devices in self._asked(task, task.node_name):
            if task.status not in _PLACED:  # back on its node (an eviction undone): what it held
                devices.add_task(task)
                continue
            try:
                given = devices.allocate(task, self.now_ns)
            except DeviceError as e:  # the predicate passed on this very state: should not happen
                log.warning("deviceshare: %s on %s: %s", task.key, task.node_name, e)
                continue
            task.bind_annotations = {**task.bind_annotations, **given}

    def deallocated(self, task: TaskInfo) -> None:
        for devices in self._asked(task, task.node_name):
            dropped = devices.release(task)
            if dropped and task.bind_annotations:
                task.bind_annotations = {k: v for k, v in task.bind_annotations.items() if k not in dropped}
