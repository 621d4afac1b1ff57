"""A hypernode's members, checked once and resolved against the nodes there are now.

Volcano's HyperNode lists members of type ``Node`` or ``HyperNode``, each picked by one selector:
``exactMatch: {name}``, ``regexMatch: {pattern}`` or ``labelMatch`` (a metav1.LabelSelector over the
nodes' labels).  Volcano's scheduler (`hypernodeutil.GetMembers`) resolves a node member against the
nodes it knows, again whenever they change, so a node added later that a pattern or labels match joins
its hypernode without the hypernode being applied again; a hypernode member is only ever an exact name.

The regular expressions are RE2's (``google-re2``), as Go's ``regexp`` is: the same syntax (no
backreferences or lookarounds, which RE2 refuses) and a match in time linear in the name, so a
pattern from a message cannot make the scheduler backtrack for ever.  Go's ``MatchString`` finds the
pattern anywhere in the name (``node-1`` matches ``node-10``), and so does `resolve`: anchor with
``^``/``$`` to match whole names.

A plain string member (busched's older shape) stays what it was: a lower hypernode when one has that
name, else a node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import re2

from busched.api import k8s
from busched.api import objects as o
from busched.api.queue import HyperNode

__all__ = ["MemberError", "Members", "compile_members", "resolve", "selects_by_node"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the sender's error, told in MemberError; not a log line


class MemberError(ValueError):
    """A member Volcano's admission would refuse; the message names the hypernode and the member."""


@dataclass(frozen=True)
class _NodeSelector:
    pattern: Any = None  # a compiled RE2 pattern
    labels: k8s.Selector = None  # a parsed label selector (None selects nothing)


@dataclass(frozen=True)
class Members:
    """One hypernode's members, checked: names as written, and the selectors to run over the nodes."""

    plain: tuple[str, ...]  # untyped names: a hypernode when one is so named, else a node
    hypernodes: tuple[str, ...]  # members of type HyperNode (exact names)
    nodes: tuple[str, ...]  # members of type Node named exactly
    selectors: tuple[_NodeSelector, ...]  # members of type Node by pattern or labels


def _compile_one(m: o.HyperNodeMember, where: str) -> tuple[str, str | _NodeSelector | None]:
    sel = m.selector
    given = [f for f, v in (("exactMatch", sel.exact_match), ("regexMatch", sel.regex_match),
                            ("labelMatch", sel.label_match)) if v is not None]
    if len(given) != 1:
        raise MemberError(f"{where}: selector: exactly one of exactMatch, regexMatch or labelMatch "
                          f"(given: {', '.join(given) or 'none'})")
    if sel.exact_match is not None:
        if not sel.exact_match.name:
            raise MemberError(f"{where}: selector.exactMatch.name: empty")
        return m.type, sel.exact_match.name
    if sel.regex_match is not None:
        pattern = sel.regex_match.pattern
        if not pattern:
            raise MemberError(f"{where}: selector.regexMatch.pattern: empty")
        try:
            compiled = re2.compile(pattern, options=_OPTIONS)
        except re2.error as e:
            raise MemberError(f"{where}: selector.regexMatch.pattern: {pattern!r} is not a regular expression "
                              f"RE2 (Go's regexp) accepts: {_text(e)}") from None
        return m.type, (_NodeSelector(pattern=compiled) if m.type == "Node" else None)
    raw = msgspec.to_builtins(sel.label_match)
    if not k8s.label_selector_valid(raw):
        raise MemberError(f"{where}: selector.labelMatch: an expression Kubernetes refuses "
                          "(In/NotIn need values, Exists/DoesNotExist take none)")
    if not raw.get("matchLabels") and not raw.get("matchExpressions"):
        return m.type, None  # an empty labelMatch selects no node (Volcano's GetMembers)
    return m.type, (_NodeSelector(labels=k8s.parse_label_selector(raw)) if m.type == "Node" else None)


def _text(e: BaseException) -> str:
    arg = e.args[0] if e.args else e
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)


def compile_members(spec: o.HyperNodeSpec) -> Members:
    """The spec's members checked (raises `MemberError` naming the member) and their patterns compiled.
    A hypernode member picked by pattern or labels is kept out (Volcano's scheduler ignores it)."""
    plain: list[str] = []
    hypernodes: list[str] = []
    nodes: list[str] = []
    selectors: list[_NodeSelector] = []
    for i, m in enumerate(spec.members):
        if isinstance(m, str):
            plain.append(m)
            continue
        kind, what = _compile_one(m, f"hyperNode {spec.name}: members[{i}]")
        if isinstance(what, str):
            (nodes if kind == "Node" else hypernodes).append(what)
        elif what is not None:
            selectors.append(what)
    return Members(tuple(plain), tuple(hypernodes), tuple(nodes), tuple(selectors))


def selects_by_node(members: Members) -> bool:
    """Whether which nodes belong depends on the nodes there are (a pattern or labels)."""
    return bool(members.selectors)


def _matches(sel: _NodeSelector, node: o.NodeSpec) -> bool:
    if sel.pattern is not None:
        return sel.pattern.search(node.name) is not None
    return k8s.selector_matches(sel.labels, node.labels)


def resolve(spec: o.HyperNodeSpec, members: Members, nodes: Iterable[o.NodeSpec]) -> HyperNode:
    """The hypernode with its node members found among ``nodes`` (exact names kept even before their
    node registers, as Volcano keeps them), in the order of ``nodes`` after the exact ones."""
    found = list(members.nodes)
    if members.selectors:
        seen = set(found)
        for n in nodes:
            if n.name not in seen and any(_matches(s, n) for s in members.selectors):
                found.append(n.name)
                seen.add(n.name)
    return HyperNode(spec.name, spec.tier, spec.tier_name, list(members.plain),
                     hypernode_members=list(members.hypernodes), node_members=found)
