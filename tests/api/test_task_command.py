"""A task's command (Kubernetes container naming): decoded with its bounds, checked by `build.validate`,
carried unchanged to the agent in its bind."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from busched.api import build
from busched.api.objects import TaskSpec
from busched.bus import messages as m


def decode_task(task: dict[str, Any]) -> TaskSpec:
    msg = m.decode(msgspec.json.encode({"type": "task.upsert", "version": 1, "task": {"name": "t", **task}}))
    assert isinstance(msg, m.TaskUpsert)
    return msg.task


def test_command_fields_decode_in_kubernetes_naming_and_round_trip() -> None:
    t = decode_task({"command": ["python3", "-c"], "args": ["print(1)"], "env": {"A_B": "1", "x.y-z": ""},
                     "workingDir": "/tmp", "image": "python:3.11"})
    assert (t.command, t.args, t.env, t.working_dir, t.image) == (["python3", "-c"], ["print(1)"],
                                                                  {"A_B": "1", "x.y-z": ""}, "/tmp", "python:3.11")
    build.validate("task", t)
    bind = m.BindDecision(node="n", attempt=1, task=t)
    again = m.decode(m.encode(bind))
    assert isinstance(again, m.BindDecision) and again.task == t


@pytest.mark.parametrize("task, field", [
    ({"env": {"1BAD": "x"}}, "$.task.env"),
    ({"env": {"": "x"}}, "$.task.env"),
    ({"command": ["x" * 1025]}, "$.task.command[0]"),
    ({"args": ["a"] * 1025}, "$.task.args"),
    ({"workingDir": "/" * 1025}, "$.task.workingDir"),
    ({"env": {"A": "x" * (32 * 1024 + 1)}}, "$.task.env"),
])
def test_bounds_are_refused_while_decoding(task: dict[str, Any], field: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=field.replace("$", r"\$").replace("[", r"\[")):
        decode_task(task)


@pytest.mark.parametrize("task, message", [
    ({"args": ["x"]}, "args: given without a command"),
    ({"command": ["x"], "workingDir": "tmp"}, "workingDir: must be an absolute path"),
    ({"command": ["a\0b"]}, "command: must not contain a NUL"),
    ({"command": ["a"], "env": {"A": "\0"}}, "env: must not contain a NUL"),
])
def test_validate_refuses_what_no_executor_could_run(task: dict[str, Any], message: str) -> None:
    with pytest.raises(build.SpecError, match=f"task default/t: {message}"):
        build.validate("task", decode_task(task))


def test_args_with_an_image_need_no_command() -> None:
    build.validate("task", decode_task({"args": ["--help"], "image": "busybox"}))
