"""The process executor (``busched agent --exec``): tasks as processes on this host.

Each run gets a directory ``STATE/<node>/<ns%2Fname>/<attempt>/`` and a wrapper process
(`busched.agent.procwrap`) started in a new session, so the run is one process group led by the
wrapper.  The task's ``command`` + ``args`` run with its ``env`` (over ``base_env``: a PATH, or what
``busched agent --exec`` passes: its own PATH, HOME, LANG, TZ) in its ``workingDir`` (default: the
run directory).  Limits come from the task's requests:

* where cgroup v2 is mounted and writable, each run gets its own cgroup under ``cgroup_root`` with
  ``memory.max`` (the memory request) and ``cpu.max`` (the cpu request), and an OOM kill is reported
  as ``OOMKilled``;
* else the memory request becomes RLIMIT_AS of the command (crude: address space, not resident
  memory; a process over it sees allocations fail rather than being killed, so no OOMKilled) and the
  cpu request is not enforced.

Stop: SIGTERM to the group, ``grace`` seconds, SIGKILL to the group (the wrapper also kills what the command
leaves when it ends); with no grace, SIGKILL alone. ``run.json`` in the run directory (node, task, attempt,
boot, the wrapper's pid and its start time from /proc/PID/stat, so a reused pid is never taken for it) lets
a restarted agent `recover` its runs: a wrapper still alive is waited for by polling /proc, and its exit
code read from the ``exit.json`` it writes; a dead one without ``exit.json`` is reported Lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, unquote

import msgspec

from busched.agent import procwrap
from busched.agent.executor import Exit, StartError, TaskRun
from busched.agent.usage import ProcMeter
from busched.api.objects import NodeUsageSpec, TaskSpec
from busched.api.resource import Resource

__all__ = ["ProcessExecutor", "cgroup_v2_root", "process_start_time", "alive"]

log = logging.getLogger("busched.agent")

STOP_STEP = 0.01  # seconds between two looks for a stopped attempt's processes still alive after SIGKILL
STOP_WAIT_STEPS = 500  # ... at most this many (5 s): then it is logged, and the stop goes on

BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}  # under the task's env; `busched agent --exec` passes its own


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (clock ticks since boot), None for no such live process (a zombie is dead)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def group_alive(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
                out.append(int(entry))
    return out


def alive(pid: int, start_time: int) -> bool:
    return pid > 0 and process_start_time(pid) == start_time


def cgroup_v2_root(path: str = "/sys/fs/cgroup") -> Path | None:
    """``path`` if it is a cgroup v2 hierarchy with the cpu and memory controllers that we may write, else None."""
    p = Path(path)
    try:
        controllers = (p / "cgroup.controllers").read_text().split()
    except OSError:
        return None
    if not {"cpu", "memory"} <= set(controllers) or not os.access(p, os.W_OK):
        return None
    return p


class ProcessExecutor:
    """An `busched.agent.executor.Executor` (and ``Recovering``) running tasks as local process groups."""

    def __init__(self, state_dir: str | Path, *, log_max: int = 10 * 2**20, log_keep: int = 2, poll: float = 0.2,
                 cgroup: str | None = "/sys/fs/cgroup", python: str = sys.executable,
                 base_env: Mapping[str, str] = BASE_ENV, meter: ProcMeter | None = None) -> None:
        self.state_dir = Path(state_dir)
        # this host's load, the same for every node it serves (busched.agent.usage): what heartbeats report
        self.meter = meter if meter is not None else ProcMeter(time.time)
        self.log_max = log_max
        self.log_keep = log_keep
        self.poll = poll  # how often a recovered run (not our child) is looked for in /proc
        self.python = python
        self.base_env = dict(base_env)  # every task's environment, under its own env
        self.cgroup_root = self._cgroup_base(cgroup) if cgroup else None
        if self.cgroup_root is None:
            log.info("process executor: no writable cgroup v2; memory requests become RLIMIT_AS, cpu is not limited")
        else:
            log.info("process executor: a cgroup per task under %s (memory.max, cpu.max)", self.cgroup_root)

    # -- the Executor protocol ----------------------------------------------------------------------------------
    async def usage(self, node: str) -> NodeUsageSpec | None:
        """This host's cpu and memory load from /proc (`busched.agent.usage.MeasuresUsage`)."""
        return self.meter.measure()

    async def start(self, run: TaskRun) -> None:
        spec = run.spec
        if spec.image:
            raise StartError(f"this agent runs processes, not images (image {spec.image!r})")
        if not spec.command:
            raise StartError("the task has no command")
        d = self.run_dir(run.node, run.key, run.attempt)
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        env = {**self.base_env, **spec.env}
        req = Resource.from_list(spec.requests, field=f"task {run.key}: requests").to_dict()
        memory = int(req.get("memory", 0)) or None
        cg = self._make_cgroup(run, memory, int(req.get("cpu", 0)))
        _write(d / "spec.json", {"argv": [*spec.command, *spec.args], "env": env, "cwd": spec.working_dir or str(d),
                                  "memory": memory, "cgroup": str(cg) if cg else None, "logMax": self.log_max,
                                  "logKeep": self.log_keep})
        with open(d / "wrapper.err", "ab") as err:
            proc = await asyncio.create_subprocess_exec(self.python, procwrap.__file__, str(d), start_new_session=True,
                                                        stdin=asyncio.subprocess.DEVNULL,
                                                        stdout=asyncio.subprocess.DEVNULL, stderr=err)
        started = process_start_time(proc.pid) or 0
        run.state.update(pid=proc.pid, start_time=started, dir=str(d), proc=proc)
        _write(d / "run.json", {"node": run.node, "key": run.key, "attempt": run.attempt, "boot": run.boot,
                                "pid": proc.pid, "startTime": started,
                                "spec": msgspec.json.decode(msgspec.json.encode(spec))})

    async def wait(self, run: TaskRun) -> Exit:
        proc = run.state.get("proc")
        if proc is not None:
            await proc.wait()
        else:
            while alive(run.state["pid"], run.state["start_time"]):
                await asyncio.sleep(self.poll)
        return self._ended(run)

    async def stop(self, run: TaskRun, grace: float) -> None:
        pid = run.state.get("pid")
        if pid:
            # no grace (an older attempt found at recovery): SIGKILL alone.  A SIGTERM followed at once by the
            # SIGKILL only raced it: the wrapper, when it ran between the two, recorded the command's end by
            # SIGTERM (143, Error) and the run said Error or Killed as the host's load decided
            if grace > 0 and alive(pid, run.state["start_time"]):
                _killpg(pid, signal.SIGTERM)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.wait(run), timeout=grace)
            _killpg(pid, signal.SIGKILL)  # the wrapper, and anything left in its group
            proc = run.state.get("proc")
            if proc is not None:
                await proc.wait()
            # a killed process dies when it is next scheduled, not when the signal is sent: the attempt is
            # reported stopped only once no member of its group still runs (a busy host took a moment)
            for _ in range(STOP_WAIT_STEPS):
                if not group_alive(pid):
                    break
                _killpg(pid, signal.SIGKILL)
                await asyncio.sleep(STOP_STEP)
            else:
                log.error("task %s attempt %d: processes of group %d still alive after SIGKILL", run.key,
                          run.attempt, pid)
        self.forget(run)

    async def status(self, run: TaskRun) -> Exit | None:
        if run.state.get("pid") and alive(run.state["pid"], run.state["start_time"]):
            return None
        return self._ended(run)

    # -- Recovering ------------------------------------------------------------------------------------------------
    async def recover(self, nodes: list[str]) -> list[TaskRun]:
        found = []
        for node in nodes:
            base = self.state_dir / quote(node, safe="")
            for task_dir in sorted(base.iterdir()) if base.is_dir() else []:
                for f in task_dir.glob("*/run.json"):
                    try:
                        rec = json.loads(f.read_text())
                        spec = msgspec.convert(rec["spec"], TaskSpec)
                        run = TaskRun(node, rec["key"], int(rec["attempt"]), spec, boot=str(rec["boot"]),
                                      state={"pid": int(rec["pid"]), "start_time": int(rec["startTime"]),
                                             "dir": str(f.parent)})
                    except (OSError, ValueError, KeyError, TypeError, msgspec.ValidationError) as e:
                        log.warning("cannot read %s (dropped): %s", f, e)
                        f.unlink(missing_ok=True)
                        continue
                    found.append(run)
            self._stop_unrecorded(base)
        # one run per task: the newest attempt; an older one still here is stopped (never left running)
        newest: dict[tuple[str, str], TaskRun] = {}
        for run in sorted(found, key=lambda r: r.attempt):
            old = newest.get((run.node, run.key))
            if old is not None:
                await self.stop(old, 0)
            newest[(run.node, run.key)] = run
        return list(newest.values())

    def _stop_unrecorded(self, base: Path) -> None:
        """Runs an earlier incarnation started but died before recording (a wrapper, no ``run.json``, no
        ``exit.json``): the scheduler heard at most bind.accepted of them and this boot cannot hold them, so
        they are given up (``abandoned``, which a wrapper not yet past its start reads and stops at) and a
        wrapper already running is killed with its group (procwrap's ``wrapper.json`` names it)."""
        for spec in base.glob("*/*/spec.json") if base.is_dir() else []:
            d = spec.parent
            if (d / "run.json").exists() or (d / "exit.json").exists() or (d / "abandoned").exists():
                continue
            (d / "abandoned").touch()
            try:
                rec = json.loads((d / "wrapper.json").read_text())
                pid, started = int(rec["pid"]), int(rec["startTime"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # never started, or it will read the mark first
            if alive(pid, started):
                log.warning("a run an earlier incarnation started but never recorded (%s): stopped", d)
                _killpg(pid, signal.SIGKILL)

    def forget(self, run: TaskRun) -> None:
        d = run.state.get("dir")
        if d:
            (Path(d) / "run.json").unlink(missing_ok=True)
        cg = self._cgroup_of(run)
        if cg is not None:
            with contextlib.suppress(OSError):
                cg.rmdir()

    # -- for `busched logs` ------------------------------------------------------------------------------------------
    def run_dir(self, node: str, key: str, attempt: int) -> Path:
        return self.state_dir / quote(node, safe="") / quote(key, safe="") / str(attempt)

    def log_file(self, node: str, key: str) -> Path | None:
        """The log of the newest attempt of ``key`` run on ``node``, if any."""
        base = self.state_dir / quote(node, safe="") / quote(key, safe="")
        attempts = sorted((int(p.name) for p in base.iterdir() if p.name.isdigit()), reverse=True) \
            if base.is_dir() else []
        return base / str(attempts[0]) / "log" if attempts else None

    def read_log(self, node: str, key: str, attempt: int, offset: int,
                 limit: int) -> tuple[bytes, int, int, bool] | None:
        """`busched.agent.logs.LogReader`: ``limit`` bytes of the run's log from ``offset`` (negative: from
        the end; past the end, as after a rotation: from 0)."""
        log_path = self.run_dir(node, key, attempt) / "log" if attempt else self.log_file(node, key)
        if log_path is None or not log_path.parent.is_dir():
            return None
        ended = (log_path.parent / "exit.json").exists()
        try:
            with open(log_path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                start = max(0, size + offset) if offset < 0 else (offset if offset <= size else 0)
                f.seek(start)
                data = f.read(limit)
        except FileNotFoundError:
            return b"", 0, 0, ended
        nxt = start + len(data)
        return data, start, nxt, ended and nxt >= size

    def tasks(self, node: str) -> list[str]:
        base = self.state_dir / quote(node, safe="")
        return sorted(unquote(p.name) for p in base.iterdir()) if base.is_dir() else []

    # -- internals -------------------------------------------------------------------------------------------------
    def _ended(self, run: TaskRun) -> Exit:
        proc = run.state.get("proc")
        try:
            rec = json.loads((Path(run.state["dir"]) / "exit.json").read_text())
            return Exit(int(rec["code"]), str(rec.get("reason", "")))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if proc is not None and proc.returncode is not None and proc.returncode < 0:
            return Exit(128 - proc.returncode, "Killed")
        return Exit(137, "Lost: the task's process ended unrecorded")

    def _cgroup_base(self, root: str) -> Path | None:
        top = cgroup_v2_root(root)
        if top is None:
            return None
        base = top / "busched"
        try:
            with open(top / "cgroup.subtree_control", "w") as f:
                f.write("+cpu +memory")
            base.mkdir(exist_ok=True)
            with open(base / "cgroup.subtree_control", "w") as f:
                f.write("+cpu +memory")
        except OSError as e:
            log.warning("cgroup v2 at %s, but cannot set up %s (%s): using rlimits", top, base, e)
            return None
        return base

    def _cgroup_of(self, run: TaskRun) -> Path | None:
        if self.cgroup_root is None:
            return None
        return self.cgroup_root / f"{quote(run.node, safe='')}.{quote(run.key, safe='')}.{run.attempt}"

    def _make_cgroup(self, run: TaskRun, memory: int | None, milli_cpu: int) -> Path | None:
        cg = self._cgroup_of(run)
        if cg is None:
            return None
        try:
            cg.mkdir(exist_ok=True)
            if memory:
                (cg / "memory.max").write_text(str(memory))
            if milli_cpu:
                (cg / "cpu.max").write_text(f"{milli_cpu * 100} 100000")
        except OSError as e:
            raise StartError(f"cannot make the task's cgroup {cg}: {e}") from None
        return cg


def _write(path: Path, value: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(msgspec.json.encode(value))
    os.replace(tmp, path)


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
