"""Arguments: each getter's accepted and refused values, and one answer for "yes" in every action."""

from __future__ import annotations

import logging

import pytest

from busched.actions.preempt import PreemptAction
from busched.actions.reclaim import ReclaimAction
from busched.actions.util import PREDICATE_ERROR_CACHE_KEY, predicate_error_cache
from busched.framework.arguments import (
    ArgumentError,
    Arguments,
    decode_bool,
    decode_field,
    decode_float,
    decode_int,
    decode_mapping,
    decode_str,
)
from busched.framework.config import SchedulerConfig, parse_config


@pytest.mark.parametrize("value, expected", [
    (True, True), (False, False),
    ("true", True), ("True", True), ("TRUE", True), ("t", True), ("T", True), ("1", True),
    ("false", False), ("False", False), ("FALSE", False), ("f", False), ("F", False), ("0", False),
])
def test_get_bool_accepts_bools_and_go_bool_strings(value: object, expected: bool) -> None:
    assert Arguments({"k": value}).get_bool("k", not expected) is expected


@pytest.mark.parametrize("value", ["yes", "no", "on", "", " true", 1, 0, 1.0, None, [True], {"a": 1}])
def test_get_bool_refuses_the_rest_and_keeps_the_default(value: object, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="busched.framework.arguments"):
        assert Arguments({"k": value}).get_bool("k", True) is True
        assert Arguments({"k": value}).get_bool("k", False) is False
    assert "for key k to bool" in caplog.text


def test_a_missing_key_is_the_default_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    a = Arguments({})
    with caplog.at_level(logging.WARNING, logger="busched.framework.arguments"):
        assert a.get_bool("k", True) is True
        assert a.get_int("k", 7) == 7
        assert a.get_float("k", 0.5) == 0.5
        assert a.get_str("k", "x") == "x"
        assert a.get_duration("k", 3.0) == 3.0
        assert a.get_mapping("k") is None
    assert caplog.text == ""


def test_get_int_takes_only_integers() -> None:
    assert Arguments({"k": 5}).get_int("k", 1) == 5
    assert Arguments({"k": -3}).get_int("k", 1) == -3
    for refused in (True, False, 2.0, 2.5, "7", " 7", None, [1]):
        assert Arguments({"k": refused}).get_int("k", 1) == 1, refused


def test_get_float_takes_integers_and_floats() -> None:
    assert Arguments({"k": 1.5}).get_float("k", 0.0) == 1.5
    v = Arguments({"k": 2}).get_float("k", 0.0)
    assert v == 2.0 and isinstance(v, float)
    for refused in (True, "1.5", None, [1.0]):
        assert Arguments({"k": refused}).get_float("k", 0.25) == 0.25, refused


def test_get_str_takes_only_strings() -> None:
    assert Arguments({"k": "cpu,memory"}).get_str("k", "") == "cpu,memory"
    assert Arguments({"k": ""}).get_str("k", "x") == ""
    for refused in (1, True, None, ["a"]):
        assert Arguments({"k": refused}).get_str("k", "x") == "x", refused


def test_get_duration_reads_go_durations() -> None:
    assert Arguments({"k": "1m30s"}).get_duration("k", 0.0) == 90.0
    assert Arguments({"k": "250ms"}).get_duration("k", 0.0) == pytest.approx(0.25)
    for refused in ("soon", "", 60, None):
        assert Arguments({"k": refused}).get_duration("k", 5.0) == 5.0, refused


def test_get_mapping_reads_nested_arguments() -> None:
    nested = Arguments({"t": {"cpu": 50, "mem": "x"}}).get_mapping("t")
    assert isinstance(nested, Arguments)
    assert nested.get_int("cpu", 80) == 50 and nested.get_int("mem", 80) == 80
    for refused in ("80", [1], {1: 2}):
        assert Arguments({"t": refused}).get_mapping("t") is None, refused


def test_arguments_is_the_mapping_it_was_given() -> None:
    raw = {"a": 1, "b": "two"}
    a = Arguments(raw)
    assert a == raw and dict(a) == raw and len(a) == 2 and a.get("c") is None
    assert Arguments.of(a) is a
    assert Arguments.of(None) == {}


class _Session:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config


@pytest.mark.parametrize("value, expected", [("yes", True), ("no", True), ("false", False), (False, False),
                                             ("1", True), ("0", False), (0, True)])
def test_every_action_reads_predicate_error_cache_enable_alike(value: object, expected: bool) -> None:
    """One answer per value for allocate, backfill, preempt and reclaim (allocate and backfill used to read
    "yes" as true and "no" as false, preempt and reclaim both as the default)."""
    actions = ("allocate", "backfill", "preempt", "reclaim")
    config = parse_config({
        "actions": ", ".join(actions),
        "tiers": [{"plugins": [{"name": "priority"}]}],
        "configurations": [{"name": a, "arguments": {PREDICATE_ERROR_CACHE_KEY: value}} for a in actions],
    })
    assert [predicate_error_cache(config, a) for a in actions] == [expected] * 4
    preempt, reclaim = PreemptAction(), ReclaimAction()
    preempt._parse_arguments(_Session(config))  # type: ignore[arg-type]
    reclaim._parse_arguments(_Session(config))  # type: ignore[arg-type]
    assert preempt.enable_predicate_error_cache is expected and reclaim.enable_predicate_error_cache is expected


def test_action_arguments_are_arguments() -> None:
    config = parse_config({"actions": "allocate", "tiers": [{"plugins": [{"name": "priority"}]}]})
    args = config.action_arguments("allocate")
    assert isinstance(args, Arguments) and args == {}


def test_strict_decoding_names_the_field() -> None:
    assert decode_int(None, "w") == 0 and decode_int(3, "w") == 3 and decode_int(2.0, "w") == 2
    assert decode_float(None, "r") == 0.0 and decode_float(4, "r") == 4.0
    assert decode_str(None, "t") == "" and decode_bool(None, "e") is False and decode_mapping(None, "m") == {}
    assert decode_field({"Weight": 2}, "weight") == 2 and decode_field({}, "weight") is None
    for fn, bad in ((decode_int, "3"), (decode_int, True), (decode_float, "0.5"), (decode_str, 1),
                    (decode_bool, "true"), (decode_mapping, [1])):
        with pytest.raises(ArgumentError, match="a.b"):
            fn(bad, "a.b")  # type: ignore[operator]
