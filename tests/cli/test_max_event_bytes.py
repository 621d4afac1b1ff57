"""`busched run/up --max-event-bytes N` is refused at start below the least a bind adding annotations needs
(`busched.scheduler.write_bounds.MIN_EVENT_BYTES`), naming the option, the value and the minimum; at the minimum
it is taken, and a bind adding annotations on a node and in a shard whose names are at their bound is written."""

from __future__ import annotations

import pytest

from busched.bus import messages as m
from busched.cli.main import build_parser, main
from busched.cli.run import settings_from_args
from busched.scheduler.records import Binding, CycleReport
from busched.scheduler.write_bounds import _WIDEST, LATER, MIN_EVENT_BYTES, bind_problem
from tests.scheduler.test_binding_table import KEY, Decision, World

WIDE = "\x01" * 253  # a node's or a shard's name at its bound, 6 bytes a character in JSON


@pytest.mark.parametrize("command", ["run", "up"])
@pytest.mark.parametrize("value", [str(MIN_EVENT_BYTES - 1), "1700", "0", "-5"])
def test_a_limit_below_the_minimum_is_refused_at_start(command: str, value: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:  # (parsed only: `up` taken would start a server)
        build_parser().parse_args([command, "--max-event-bytes", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--max-event-bytes: {value} is less than {MIN_EVENT_BYTES}, the least a bind adding annotations" in err
    assert f"the {LATER} a later record of its attempt adds" in err


def test_the_minimum_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--max-event-bytes", str(MIN_EVENT_BYTES), "--check"]) == 0
    args = build_parser().parse_args(["run", "--max-event-bytes", str(MIN_EVENT_BYTES)])
    assert settings_from_args(args).max_event_bytes == MIN_EVENT_BYTES
    args = build_parser().parse_args(["up", "--max-event-bytes", str(MIN_EVENT_BYTES)])
    assert settings_from_args(args).max_event_bytes == MIN_EVENT_BYTES
    # (the default stays what it was)
    assert settings_from_args(build_parser().parse_args(["run"])).max_event_bytes == 256 * 1024
    # the help says the minimum as it is
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert f"{MIN_EVENT_BYTES:,}" in " ".join(capsys.readouterr().out.split())


def test_at_the_minimum_the_widest_bind_is_written_and_one_byte_less_refuses_it() -> None:
    size = len(m.encode(_WIDEST))
    ann = dict(_WIDEST.annotations)
    assert bind_problem(KEY, ann, {}, MIN_EVENT_BYTES, lambda: size) is None
    found = bind_problem(KEY, ann, {}, MIN_EVENT_BYTES - 1, lambda: size)
    assert found is not None and found[0] == "size"


def _wide_world(limit: int) -> World:
    w = World(max_event_bytes=limit, shard=WIDE)
    w.live[WIDE] = w.live["n1"]
    w.nodes[WIDE] = w.nodes["n1"]
    w.table.boot = "0123abcd"  # (a scheduler's boot: 8 hex digits)
    return w


def test_the_table_writes_no_wider_record_than_the_minimum_counts() -> None:
    # every field the table sets, at its widest: the minimum is not made from a narrower record than it writes
    w = _wide_world(MIN_EVENT_BYTES)
    w.table.epoch = 2**63 - 1
    rec = w.table.binding_record(KEY, Binding(attempt=2**63 - 1, node=WIDE, version=2**63 - 1,
                                              annotations=dict(_WIDEST.annotations)))
    assert rec.annotations == _WIDEST.annotations and rec.shard == WIDE and rec.node == WIDE
    assert len(m.encode(rec)) <= len(m.encode(_WIDEST))


async def test_an_annotated_bind_at_the_minimum_is_written() -> None:
    w = _wide_world(MIN_EVENT_BYTES)
    report = CycleReport(1)
    await w.table.publish_binds([Decision(KEY, WIDE, annotations={"a": ""})], report)
    assert report.failed_binds == [], report.failed_binds
    (rec,) = [r for _, r, _ in w.bus.records]
    assert (rec.node, rec.state, rec.annotations) == (WIDE, "binding", {"a": ""})
    assert len(m.encode(rec)) + LATER <= MIN_EVENT_BYTES


async def test_a_bind_too_wide_for_a_small_limit_is_refused_though_its_annotations_are_small() -> None:
    # its node's and shard's names at their bound take 3,036 bytes of its record: the bind is measured, not let
    # through on the length of its name and annotations alone (which left 2,048 bytes for all the rest)
    w = _wide_world(4_000)
    report = CycleReport(1)
    await w.table.publish_binds([Decision(KEY, WIDE, annotations={"a": ""})], report)
    assert [(key, field.split(":")[0]) for key, _, field in report.failed_binds] == [(KEY, "size")]
    assert [r.state for _, r, _ in w.bus.records] == []


def test_the_docs_say_the_minimum_as_it_is() -> None:
    from pathlib import Path

    text = " ".join((Path(__file__).parents[2] / "docs" / "bus.md").read_text().split())
    assert f"refuse a `--max-event-bytes` below {MIN_EVENT_BYTES:,} at start" in text
    assert f"with the {LATER:,} bytes a later record of its attempt adds" in text
