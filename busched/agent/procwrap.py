"""The wrapper that `busched.agent.process` runs each task under (run as a script: stdlib only).

    python procwrap.py RUN_DIR

It is the session and process-group leader of the task (the agent starts it in a new session), and
a child subreaper, so nothing the task starts can leave the group's reach.  It

* joins the run's cgroup when one is given (``cgroup`` in ``spec.json``), else sets the task's
  rlimits on the command (RLIMIT_AS for memory: crude, it counts address space, not resident memory),
* runs the command with stdout and stderr into ``log`` (rotated at ``logMax`` bytes, ``logKeep`` old
  files ``log.1``, ``log.2``, ...),
* ignores SIGTERM itself (the agent's stop sends it to the whole group: the command gets it, the
  wrapper stays to record the end) and never passes one on, so one stop is one SIGTERM to the command
  whenever it comes: one before the command is started means it is not started (recorded as a command
  killed by SIGTERM: 143, Error); from then until the exec SIGTERM is blocked, and the child ends itself
  before its exec when it or the wrapper has one pending (`_term_pending`), and
  when the command ends writes ``exit.json`` (its code, a signal as 128 + the signal, and a reason:
  Completed, Error, OOMKilled, StartError), then kills whatever the command left in the group and
  reaps it.

Because the wrapper, not the agent, waits for the command, the exit code survives the agent: a
restarted agent reads ``exit.json`` (`busched.agent.process.ProcessExecutor.recover`).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import threading
from typing import Any

PR_SET_CHILD_SUBREAPER = 36


def _write_json(path: str, value: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


def _pump(src: Any, path: str, max_bytes: int, keep: int) -> None:
    """Copy the command's output to ``path``, rotating it at ``max_bytes``."""
    out = open(path, "ab")  # noqa: SIM115 - reopened at each rotation
    size = out.tell()
    for chunk in iter(lambda: src.read1(65536), b""):
        while chunk:
            if size >= max_bytes:
                out.close()
                for i in range(keep - 1, 0, -1):
                    if os.path.exists(f"{path}.{i}"):
                        os.replace(f"{path}.{i}", f"{path}.{i + 1}")
                if keep > 0:
                    os.replace(path, f"{path}.1")
                else:
                    os.remove(path)
                out = open(path, "ab")  # noqa: SIM115
                size = 0
            part, chunk = chunk[:max_bytes - size], chunk[max_bytes - size:]
            out.write(part)
            size += len(part)
        out.flush()
    out.close()


def _leftovers(pgid: int) -> list[int]:
    """The live processes of our group, and our children (what left the group is reparented to us)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and (int(fields[2]) == pgid or int(fields[1]) == me):
            found.append(int(entry))
    return found


def _oom_killed(cgroup: str | None) -> bool:
    if not cgroup:
        return False
    try:
        with open(os.path.join(cgroup, "memory.events")) as f:
            return any(line.split()[0] == "oom_kill" and int(line.split()[1]) > 0 for line in f)
    except (OSError, ValueError, IndexError):
        return False


def _own_start_time() -> int:
    """This process's start time in clock ticks (/proc/self/stat, field 22): with the pid, what tells it
    from a later process given the same pid."""
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def _term_pending(pid: int) -> bool:
    """Whether process ``pid`` has a SIGTERM pending (/proc/PID/status: ShdPnd for the process, SigPnd for its
    main thread; a hex mask, signal N at bit N - 1)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            masks = [int(line.split()[1], 16) for line in f if line.startswith(("ShdPnd:", "SigPnd:"))]
    except (OSError, ValueError, IndexError):
        return False
    return any(mask >> (signal.SIGTERM - 1) & 1 for mask in masks)


def main(run_dir: str) -> int:
    with open(os.path.join(run_dir, "spec.json")) as f:
        spec = json.load(f)
    # say who we are before anything runs, then look whether a restarted agent gave this run up (it was
    # started but not yet recorded when its agent died): of the two writes, the later one sees the other's,
    # so either we stop here or the agent finds us and stops us (ProcessExecutor.recover) -- never an orphan
    _write_json(os.path.join(run_dir, "wrapper.json"), {"pid": os.getpid(), "startTime": _own_start_time()})
    if os.path.exists(os.path.join(run_dir, "abandoned")):
        return 0
    # a handler, not SIG_IGN (which the command would inherit): a SIGTERM that comes before the command is
    # started (a stop sent while this wrapper was still starting: a busy host, an evict right after the bind)
    # found a group without the command, so the command is not started at all (below)
    stop_asked: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop_asked.append(True))
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    cgroup = spec.get("cgroup")
    if cgroup:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    exit_path = os.path.join(run_dir, "exit.json")
    # from here to the command's exec SIGTERM is blocked, so that one stop reaches the command once, whenever
    # it comes: before the block its handler has run (pthread_sigmask runs the handlers of what came before it
    # returns) and the command is not started; after it, it is pending in the wrapper (sent before the fork:
    # the child sees that and ends itself before its exec) or in both (sent after the fork: the child dies of it
    # when it unblocks, with the default action back, before its exec); sent after the exec it reaches the
    # command itself.  The wrapper never passes a SIGTERM on: a second one is "force quit" to many programs
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    if stop_asked:
        _write_json(exit_path, {"code": 128 + signal.SIGTERM, "reason": "Error"})  # as a command killed by it
        return 0
    signal.signal(signal.SIGTERM, lambda *_: None)  # what is pending in the wrapper is dropped at the unblock
    memory = spec.get("memory")

    def in_child() -> None:
        """Between fork and exec (the child has the wrapper's mask and Python handler, and no pending signal
        of the wrapper's): the default action back, a stop sent before the fork taken, SIGTERM unblocked."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if memory and not cgroup:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if _term_pending(os.getppid()):
            os.kill(os.getpid(), signal.SIGTERM)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # a pending SIGTERM ends the child here

    try:
        child = subprocess.Popen(spec["argv"], env=spec["env"], cwd=spec.get("cwd") or None, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=in_child)
    except OSError as e:
        _write_json(exit_path, {"code": 127 if isinstance(e, FileNotFoundError) else 126,
                                "reason": f"StartError: {e.strerror or e}"})
        return 0
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    assert child.stdout is not None
    pump = threading.Thread(target=_pump, args=(child.stdout, os.path.join(run_dir, "log"), spec["logMax"],
                                                spec["logKeep"]), daemon=True)
    pump.start()
    rc = child.wait()
    code = rc if rc >= 0 else 128 - rc
    reason = "OOMKilled" if _oom_killed(cgroup) else ("Completed" if code == 0 else "Error")
    # what the command left behind goes with it, and is reaped here (we are their subreaper); then the
    # log is complete (nothing holds the pipe) and the end is recorded
    while True:
        for pid in _leftovers(os.getpgid(0)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    pump.join(timeout=5)
    _write_json(exit_path, {"code": code, "reason": reason})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
