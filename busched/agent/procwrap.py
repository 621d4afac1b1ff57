"""The wrapper that `busched.agent.process` runs each task under (run as a script: stdlib only).

    python procwrap.py RUN_DIR

It is the session and process-group leader of the task (the agent starts it in a new session), and
a child subreaper, so nothing the task starts can leave the group's reach.  It

* joins the run's cgroup when one is given (``cgroup`` in ``spec.json``), else sets the task's
  rlimits on the command (RLIMIT_AS for memory: crude, it counts address space, not resident memory),
* runs the command with stdout and stderr into ``log`` (rotated at ``logMax`` bytes, ``logKeep`` old
  files ``log.1``, ``log.2``, ...),
* ignores SIGTERM itself (the agent's stop sends it to the whole group: the command gets it, the
  wrapper stays to record the end; one that comes before the command runs is passed on to it), and
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


def main(run_dir: str) -> int:
    with open(os.path.join(run_dir, "spec.json")) as f:
        spec = json.load(f)
    # say who we are before anything runs, then look whether a restarted agent gave this run up (it was
    # started but not yet recorded when its agent died): of the two writes, the later one sees the other's,
    # so either we stop here or the agent finds us and stops us (ProcessExecutor.recover) -- never an orphan
    _write_json(os.path.join(run_dir, "wrapper.json"), {"pid": os.getpid(), "startTime": _own_start_time()})
    if os.path.exists(os.path.join(run_dir, "abandoned")):
        return 0
    # a handler, not SIG_IGN: the command gets the default back.  A SIGTERM that comes before the command runs
    # (a stop sent while this wrapper was still starting: a busy host, an evict right after the bind) reached a
    # group without the command, so it is passed on to the command once it runs; else the command ran on until
    # the stop's grace ended (30 s by default) and its SIGKILL
    stop_asked: list[bool] = []
    child: subprocess.Popen[bytes] | None = None

    def on_term(*_: Any) -> None:
        if child is None:
            stop_asked.append(True)

    signal.signal(signal.SIGTERM, on_term)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    cgroup = spec.get("cgroup")
    if cgroup:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    memory = spec.get("memory")

    def limits() -> None:
        if memory and not cgroup:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    exit_path = os.path.join(run_dir, "exit.json")
    try:
        child = subprocess.Popen(spec["argv"], env=spec["env"], cwd=spec.get("cwd") or None, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=limits)
    except OSError as e:
        _write_json(exit_path, {"code": 127 if isinstance(e, FileNotFoundError) else 126,
                                "reason": f"StartError: {e.strerror or e}"})
        return 0
    if stop_asked:
        child.send_signal(signal.SIGTERM)
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
