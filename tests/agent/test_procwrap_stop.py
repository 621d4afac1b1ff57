"""One stop, one SIGTERM: the agent's stop (SIGTERM to the wrapper's group) at each point of the wrapper's start.

The wrapper is run as the agent runs it (a new session) from a driver that patches one call to hold it at a
chosen point until the test has sent the SIGTERM: before it blocks SIGTERM (the command is never started),
inside its child between fork and exec (the command never runs), and after the exec while the wrapper is still
inside `subprocess.Popen` (the command got the SIGTERM itself: the wrapper must not send another; programs read
a second SIGTERM as "force quit" and skip their graceful shutdown).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from busched.agent import procwrap
from busched.agent.executor import Exit
from busched.agent.process import ProcessExecutor
from tests.agent.test_process_executor import _group_alive, _run, _unrecorded, ex  # noqa: F401


def _counting(tmp_path: Path) -> str:
    """A command that says it started (``ready``), counts the SIGTERMs it gets, and writes the count to
    ``terms`` when a second one comes or 3 s after it started."""
    return (f"import signal, time\nn = []\n"
            f"signal.signal(signal.SIGTERM, lambda *_: n.append(1))\n"
            f"open({str(tmp_path / 'ready')!r}, 'w').close()\n"
            f"end = time.time() + 3\nwhile time.time() < end and len(n) < 2: time.sleep(0.01)\n"
            f"time.sleep(0.3)\nopen({str(tmp_path / 'terms')!r}, 'w').write(str(len(n)))\n")


def _spec(d: Path, **changes: object) -> None:
    spec = json.loads((d / "spec.json").read_text())
    spec.update(changes)
    (d / "spec.json").write_text(json.dumps(spec))


async def _stop_held_wrapper(d: Path, patch: str) -> subprocess.Popen[bytes]:
    """Run the wrapper on ``d`` with ``patch`` (driver code that creates ``HELD`` where the wrapper is to be held
    and then waits for ``GO``), send the agent's stop once it is held, let it go, and wait for it to end."""
    held, go = d / "held", d / "go"
    driver = ("import os, resource, signal, subprocess, sys, time, runpy\n"
              f"HELD, GO = {str(held)!r}, {str(go)!r}\n"
              "def hold():\n"
              "    open(HELD, 'w').close()\n"
              "    while not os.path.exists(GO): time.sleep(0.01)\n"
              f"{patch}"
              f"sys.argv = [{procwrap.__file__!r}, {str(d)!r}]\n"
              f"runpy.run_path({procwrap.__file__!r}, run_name='__main__')\n")
    wrapper = subprocess.Popen([sys.executable, "-c", driver], start_new_session=True, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            if held.exists():
                break
            await asyncio.sleep(0.02)
        assert held.exists(), "the wrapper never got to where it is held"
        os.killpg(wrapper.pid, signal.SIGTERM)  # the agent's stop: the whole group gets it
        await asyncio.sleep(0.2)
        go.touch()
        await asyncio.to_thread(wrapper.wait, 10)
        assert _group_alive(wrapper.pid) == []
        return wrapper
    finally:
        if wrapper.poll() is None:
            os.killpg(wrapper.pid, signal.SIGKILL)
            wrapper.wait()


def _stopped_unstarted(ex: ProcessExecutor, d: Path) -> None:  # noqa: F811
    """The run ended as a stop ends a command (143, Error: what a command killed by SIGTERM is recorded as),
    and the agent reports that."""
    assert json.loads((d / "exit.json").read_text()) == {"code": 128 + signal.SIGTERM, "reason": "Error"}
    run = _run("x")
    run.state["dir"] = str(d)
    assert ex._ended(run) == Exit(128 + signal.SIGTERM, "Error")


async def test_a_stop_before_the_wrapper_blocks_sigterm_means_the_command_never_starts(
        ex: ProcessExecutor, tmp_path: Path) -> None:  # noqa: F811
    d = _unrecorded(ex, _run("x"))
    _spec(d, argv=[sys.executable, "-c", _counting(tmp_path)])
    await _stop_held_wrapper(d, "mask = signal.pthread_sigmask\n"
                                "def held(how, sigs):\n"
                                "    if how == signal.SIG_BLOCK: hold()\n"
                                "    return mask(how, sigs)\n"
                                "signal.pthread_sigmask = held\n")
    assert not (tmp_path / "ready").exists(), "the command ran after its stop"
    _stopped_unstarted(ex, d)


async def test_a_stop_while_the_wrapper_starts_the_command_means_it_never_runs(
        ex: ProcessExecutor, tmp_path: Path) -> None:  # noqa: F811
    """The stop comes while the wrapper is inside `subprocess.Popen`, before the fork: the SIGTERM is pending
    in the wrapper, which its child sees before the exec."""
    d = _unrecorded(ex, _run("x"))
    _spec(d, argv=[sys.executable, "-c", _counting(tmp_path)])
    await _stop_held_wrapper(d, "popen = subprocess.Popen\n"
                                "def held(*a, **kw):\n"
                                "    hold()\n"
                                "    return popen(*a, **kw)\n"
                                "subprocess.Popen = held\n")
    assert not (tmp_path / "ready").exists(), "the command ran after its stop"
    _stopped_unstarted(ex, d)


async def test_a_stop_between_fork_and_exec_means_the_command_never_runs(
        ex: ProcessExecutor, tmp_path: Path) -> None:  # noqa: F811
    """The wrapper's child is held in its preexec_fn (the rlimit, set when there is no cgroup): it has the
    wrapper's Python handler until the exec, which would drop a SIGTERM it caught."""
    d = _unrecorded(ex, _run("x"))
    _spec(d, argv=[sys.executable, "-c", _counting(tmp_path)], memory=1 << 40)
    await _stop_held_wrapper(d, "setrlimit = resource.setrlimit\n"
                                "def held(*a):\n"
                                "    hold()\n"
                                "    return setrlimit(*a)\n"
                                "resource.setrlimit = held\n")
    assert not (tmp_path / "ready").exists(), "the command ran after its stop"
    _stopped_unstarted(ex, d)


async def test_a_sigterm_that_reached_the_running_command_is_not_sent_to_it_again(
        ex: ProcessExecutor, tmp_path: Path) -> None:  # noqa: F811
    """The stop comes after the command was exec'd but while the wrapper is still inside `subprocess.Popen`
    (descheduled on a busy host after reading the exec's errpipe EOF): the command got the SIGTERM itself."""
    d = _unrecorded(ex, _run("x"))
    _spec(d, argv=[sys.executable, "-c", _counting(tmp_path)])
    await _stop_held_wrapper(d, "popen = subprocess.Popen\n"
                                "def held(*a, **kw):\n"
                                "    p = popen(*a, **kw)\n"  # the command runs (exec'd) ...
                                f"    while not os.path.exists({str(tmp_path / 'ready')!r}): time.sleep(0.01)\n"
                                "    hold()\n"  # ... and the wrapper has not yet returned from Popen
                                "    return p\n"
                                "subprocess.Popen = held\n")
    terms = (tmp_path / "terms").read_text()
    assert terms == "1", f"the command got {terms} SIGTERMs for one stop"
    assert json.loads((d / "exit.json").read_text()) == {"code": 0, "reason": "Completed"}


async def test_a_stop_after_the_wrapper_started_the_command_reaches_it_once(
        ex: ProcessExecutor, tmp_path: Path) -> None:  # noqa: F811
    """The ordinary stop: the command runs, the wrapper waits for it."""
    d = _unrecorded(ex, _run("x"))
    _spec(d, argv=[sys.executable, "-c", _counting(tmp_path)])
    await _stop_held_wrapper(d, "wait = subprocess.Popen.wait\n"
                                f"def held(self, *a, **kw):\n"
                                f"    while not os.path.exists({str(tmp_path / 'ready')!r}): time.sleep(0.01)\n"
                                "    hold()\n"
                                "    return wait(self, *a, **kw)\n"
                                "subprocess.Popen.wait = held\n")
    terms = (tmp_path / "terms").read_text()
    assert terms == "1", f"the command got {terms} SIGTERMs for one stop"
