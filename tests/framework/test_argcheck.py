"""Configuration honesty: declared arguments cover what each plugin and action reads; an argument no
one reads is a warning, a Volcano argument we lack refuses the configuration."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import msgspec
import pytest

from busched.actions import ACTIONS
from busched.api.objects import ClusterSpec
from busched.builtin import close_session, open_session
from busched.cache.cache import Cache
from busched.cli.main import main
from busched.cli.run import load_scheduler_config
from busched.framework.argcheck import argument_problems, check_arguments
from busched.framework.arguments import Arguments, UndeclaredArgument, declares
from busched.framework.config import ConfigError, parse_config
from busched.framework.registry import Registry
from busched.framework.volcano_arguments import VOLCANO_ACTION_ARGUMENTS, VOLCANO_PLUGIN_ARGUMENTS
from busched.plugins import PLUGINS

BUSCHED_ONLY_PLUGINS = {"busched-agent-feedback"}  # ours alone: Volcano has no such plugin


def _spec() -> ClusterSpec:
    return msgspec.convert({
        "queues": [{"name": "q"}],
        "nodes": [{"name": "n1", "allocatable": {"cpu": "4", "memory": "8Gi", "pods": 10},
                   "labels": {"volcano.sh/revocable-zone": "x"}}],
        "jobs": [{"name": "j", "namespace": "ns", "queue": "q", "minMember": 1},
                 {"name": "r", "namespace": "ns", "queue": "q", "minMember": 1}],
        "tasks": [{"name": "t", "namespace": "ns", "job": "j", "requests": {"cpu": "1", "memory": "1Gi"}},
                  {"name": "run", "namespace": "ns", "job": "r", "node": "n1", "phase": "Running",
                   "requests": {"cpu": "1", "memory": "1Gi"}}],
    }, ClusterSpec)


def _value_sets(declared: tuple[str, ...]) -> list[dict[str, Any]]:
    """Arguments that make conditional reads happen: every declared name (and one member of each family)
    with values of each plain type, so a getter behind ``if args.get(...)`` runs too."""
    names = [d[:-1] + "x" if d.endswith("*") else d for d in declared]
    return [{}] + [{n: v for n in names} for v in ("x", 1, 0.5, True, ["x"], {"x": 1})]


def _exercise(name: str, arguments: dict[str, Any]) -> set[str]:
    """Build the plugin through the registry (which enforces its declaration), open and close a session
    with it and run allocate; the names it asked for."""
    declared = PLUGINS.reads_arguments(name)
    args = Arguments(arguments, declared=declared, owner=f"plugin {name}")  # as the registry builds it
    cache = Cache()
    cache.load(_spec())
    config = parse_config({"actions": "enqueue, allocate, preempt, reclaim, backfill, shuffle",
                           "tiers": [{"plugins": [{"name": name, "arguments": dict(arguments)}]}]})
    try:
        PLUGINS[name].plugin_class()(args)  # type: ignore[attr-defined]
    except UndeclaredArgument:
        raise
    except Exception:  # noqa: BLE001 - a plugin may refuse these made-up values; what it read was still checked
        pass
    try:
        ssn = open_session(cache.snapshot(), config)  # builds it through the registry: enforced there
        for action in config.actions:
            ACTIONS[action]().execute(ssn)
        close_session(ssn)
    except UndeclaredArgument:
        raise
    except Exception:  # noqa: BLE001 - likewise
        pass
    asked = set(args.asked)
    return asked


@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_every_plugin_declares_what_it_reads(name):
    declared = PLUGINS.reads_arguments(name)
    assert declared is not None, f"plugin {name} has no reads_arguments (busched.framework.arguments)"
    assert all(isinstance(d, str) and d for d in declared), name
    for values in _value_sets(declared):
        asked = _exercise(name, values)
        undeclared = {k for k in asked if not declares(declared, k)}
        assert not undeclared, (name, undeclared)


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_every_action_declares_what_it_reads(name):
    declared = ACTIONS.reads_arguments(name)
    assert declared is not None, f"action {name} has no reads_arguments"
    for values in _value_sets(declared):
        cache = Cache()
        cache.load(_spec())
        config = parse_config({"actions": name, "tiers": [{"plugins": [{"name": "gang"}, {"name": "priority"}]}],
                               "configurations": [{"name": name, "arguments": values}]})
        ssn = open_session(cache.snapshot(), config)
        ACTIONS[name]().execute(ssn)  # an undeclared read raises UndeclaredArgument here
        close_session(ssn)


def test_an_undeclared_read_fails_loudly():
    class Sloppy:
        name = "sloppy"
        reads_clock = False
        reads_arguments = ("sloppy.weight",)

        def __init__(self, arguments: Arguments) -> None:
            self.weight = arguments.get_int("sloppy.weight", 1)
            self.extra = arguments.get_bool("sloppy.extra", False)  # not declared

        def on_session_open(self, ssn: Any) -> None:
            pass

    # through the same builder shape the registry uses
    with pytest.raises(UndeclaredArgument, match="sloppy.extra"):
        Sloppy(Arguments({}, declared=Sloppy.reads_arguments, owner="plugin sloppy"))
    for read in (lambda a: a["k"], lambda a: a.get("k"), lambda a: "k" in a, lambda a: a.get_mapping("k")):
        with pytest.raises(UndeclaredArgument):
            read(Arguments({"k": 1}, declared=("other", "fam.*")))
    assert Arguments({"fam.a": 1}, declared=("fam.*",)).get_int("fam.a", 0) == 1
    assert Arguments({"k": 1}).get_int("k", 0) == 1  # no declaration: not checked


def test_outside_the_tests_an_undeclared_read_is_logged_once_and_answered(monkeypatch, caplog) -> None:
    """A declaration missed on a rare path must not fail a live cycle: the read is answered and logged."""
    from busched.framework import arguments

    monkeypatch.setattr(arguments, "STRICT", False)
    monkeypatch.setattr(arguments, "_logged", set())
    args = Arguments({"k": 7}, declared=("other",), owner="plugin lax")
    with caplog.at_level("ERROR", logger="busched.framework.arguments"):
        assert args.get_int("k", 0) == 7
        assert args["k"] == 7
    errors = [r for r in caplog.records if "plugin lax reads the argument 'k'" in r.getMessage()]
    assert len(errors) == 1


def test_our_names_are_volcanos_for_volcanos_plugins_and_actions():
    """A declared name of a plugin Volcano has is one of Volcano's (we do not invent arguments for them)."""
    for name in PLUGINS:
        if name in BUSCHED_ONLY_PLUGINS:
            continue
        volcano = VOLCANO_PLUGIN_ARGUMENTS.get(name, frozenset())
        for d in PLUGINS.reads_arguments(name) or ():
            assert d in volcano, (name, d)
    for name in ACTIONS:
        for d in ACTIONS.reads_arguments(name) or ():
            assert d in VOLCANO_ACTION_ARGUMENTS.get(name, frozenset()), (name, d)


def _config(plugins: list[dict[str, Any]], confs: list[dict[str, Any]] | None = None) -> Any:
    return parse_config({"actions": "allocate", "tiers": [{"plugins": plugins}], "configurations": confs or []},
                        known_plugins=PLUGINS, known_actions=ACTIONS)


def test_unknown_arguments_are_warnings_naming_plugin_and_argument():
    config = _config([{"name": "predicates", "arguments": {"predicate.GPUSharingEnable": True,
                                                           "predicate.NodeAffinityEnable": False}},
                      {"name": "binpack", "arguments": {"binpack.resources.nvidia.com/gpu": 2, "binpack.wieght": 1}}],
                     [{"name": "allocate", "arguments": {"predicateErrorCacheEnable": False, "workers": 4}},
                      {"name": "nosuchaction", "arguments": {"a": 1}}])
    checked = check_arguments(config, plugins=PLUGINS, actions=ACTIONS)
    text = "\n".join(checked.warnings)
    assert len(checked.warnings) == 4, checked.warnings
    assert "plugin predicates: unknown argument 'predicate.GPUSharingEnable'" in text
    assert "plugin binpack: unknown argument 'binpack.wieght'" in text
    assert "action allocate: unknown argument 'workers'" in text and "'nosuchaction'" in text
    assert "NodeAffinityEnable" not in text and "nvidia.com/gpu" not in text  # declared: fine


def test_a_volcano_argument_we_do_not_implement_refuses_the_configuration():
    config = _config([{"name": "predicates", "arguments": {"predicate.VolumeBindingEnable": True}},
                      {"name": "rescheduling", "arguments": {"metricsPeriod": "5m"}}],
                     [{"name": "gangpreempt", "arguments": {"maxDomains": 2}}])
    errors, _ = argument_problems(config, plugins=PLUGINS, actions=ACTIONS)
    assert len(errors) == 2, errors  # (gangpreempt's maxDomains is ours)
    with pytest.raises(ConfigError, match="predicate.VolumeBindingEnable") as e:
        check_arguments(config, plugins=PLUGINS, actions=ACTIONS)
    assert "metricsPeriod" in str(e.value) and "plugin rescheduling" in str(e.value)
    # a registry without one of Volcano's actions: its configuration entry is refused too
    fewer = Registry("action", {k: ACTIONS[k] for k in ACTIONS if k != "gangpreempt"})
    errors, _ = argument_problems(config, plugins=PLUGINS, actions=fewer)
    assert any("Volcano's action 'gangpreempt'" in e for e in errors), errors


def test_a_plugin_that_declares_nothing_is_not_checked():
    class Old:
        name = "old"

        def __init__(self, arguments: Any) -> None:
            pass

    registry = PLUGINS.with_entries({"old": Old})
    config = parse_config({"actions": "", "tiers": [{"plugins": [{"name": "old", "arguments": {"anything": 1}}]}]})
    assert argument_problems(config, plugins=registry, actions=ACTIONS) == ([], [])


def test_busched_run_check_reports_and_refuses(tmp_path: Path, caplog, capsys):
    ok = tmp_path / "ok.yaml"
    ok.write_text('actions: "allocate"\ntiers:\n- plugins:\n  - name: predicates\n'
                  '    arguments: {predicate.GPUSharingEnable: true}\n')
    with caplog.at_level(logging.WARNING, logger="busched.run"):
        assert load_scheduler_config(str(ok)).warnings
        assert main(["run", "--check", "--config", str(ok)]) == 0
    assert "1 warning(s)" in capsys.readouterr().out
    assert any("predicate.GPUSharingEnable" in r.getMessage() and "predicates" in r.getMessage()
               for r in caplog.records)
    bad = tmp_path / "bad.yaml"
    bad.write_text('actions: "allocate"\ntiers:\n- plugins:\n  - name: predicates\n'
                   '    arguments: {predicate.VolumeZoneEnable: true}\n')
    assert main(["run", "--check", "--config", str(bad)]) == 2
    with pytest.raises(ConfigError, match="VolumeZoneEnable"):
        load_scheduler_config(str(bad))
    assert main(["run", "--check"]) == 0  # the built-in configuration is clean
