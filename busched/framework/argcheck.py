"""Configuration honesty: every argument given to a plugin or action is one it reads, or we say so.

Volcano reads the arguments it knows and ignores the rest without a word, so a misspelt
``predicate.GPUSharingEnable`` (the key is ``deviceshare.GPUSharingEnable``) changes nothing and
nobody is told.  We check each configured argument against what the plugin or action declares it
reads (its ``reads_arguments``, kept true by busched.framework.arguments):

- declared: fine;
- not declared, but one of Volcano's names for that plugin or action
  (busched.framework.volcano_arguments): an ERROR -- the configuration asks for a Volcano feature
  busched does not implement, and running without it would schedule differently from what the
  file says.  `check_arguments` raises `ConfigError` naming it, so the file is refused as any
  invalid one is (at start, and on reload the previous configuration stays);
- neither: a WARNING naming plugin and argument (Volcano ignores it, and so do we), returned as
  text; the caller logs it and the status page shows it (`SchedulerConfig.warnings`).

A plugin or action that declares nothing (``reads_arguments`` absent: one not adopted yet) is not
checked: its arguments are reported neither way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from busched.framework.arguments import declares
from busched.framework.config import ConfigError, SchedulerConfig
from busched.framework.registry import Registry
from busched.framework.volcano_arguments import VOLCANO_ACTION_ARGUMENTS, VOLCANO_PLUGIN_ARGUMENTS

__all__ = ["check_arguments", "argument_problems"]


def _judge(kind: str, name: str, where: str, arguments: Mapping[str, Any], ours: tuple[str, ...] | None,
           volcano: frozenset[str], errors: list[str], warnings: list[str]) -> None:
    if ours is None:
        return
    for key in arguments:
        if declares(ours, key):
            continue
        if declares(volcano, key):
            errors.append(f"{where}: {kind} {name}: argument {key!r} is Volcano's, but busched does not implement "
                          f"it (it would be ignored here: remove it, or run Volcano)")
        else:
            warnings.append(f"{where}: {kind} {name}: unknown argument {key!r} (Volcano ignores it, and so does "
                            f"busched)")


def argument_problems(config: SchedulerConfig, *, plugins: Registry, actions: Registry,
                      where: str = "config") -> tuple[list[str], list[str]]:
    """(errors, warnings) for the arguments of ``config``'s plugins and actions."""
    errors: list[str] = []
    warnings: list[str] = []
    for ti, tier in enumerate(config.tiers):
        for pi, opt in enumerate(tier.plugins):
            if opt.name not in plugins:
                continue
            _judge("plugin", opt.name, f"{where}.tiers[{ti}].plugins[{pi}].arguments", opt.arguments,
                   plugins.reads_arguments(opt.name), VOLCANO_PLUGIN_ARGUMENTS.get(opt.name, frozenset()),
                   errors, warnings)
    for name, arguments in config.configurations.items():
        cw = f"{where}.configurations[{name}]"
        if name not in actions:
            if name in VOLCANO_ACTION_ARGUMENTS:
                errors.append(f"{cw}: arguments for Volcano's action {name!r}, which busched does not implement")
            elif arguments:
                warnings.append(f"{cw}: no action is called {name!r}: its arguments are ignored (as Volcano does)")
            continue
        _judge("action", name, f"{cw}.arguments", arguments, actions.reads_arguments(name),
               VOLCANO_ACTION_ARGUMENTS.get(name, frozenset()), errors, warnings)
    return errors, warnings


def check_arguments(config: SchedulerConfig, *, plugins: Registry, actions: Registry,
                    where: str = "config") -> SchedulerConfig:
    """``config`` with its argument warnings attached; `ConfigError` naming every argument that is
    Volcano's but not ours."""
    errors, warnings = argument_problems(config, plugins=plugins, actions=actions, where=where)
    if errors:
        raise ConfigError("; ".join(errors))
    return dataclasses.replace(config, warnings=tuple(warnings))
