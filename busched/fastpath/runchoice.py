"""Allocate's choices for a job's turn, asked of one template's kept vectors without the per-task layers.

A gang's replicas come to allocate's turn one after another, and for each the per-task path goes
through the same layers to reach the template's board (`busched.fastpath.batch`): the node search's
conditions and sampling start (`nodeselect.PredicateHelper.chosen_found`), the rows of the node list
(`NodeArrays.rows_of`), the session's kept templates walked and compared (`batch._template`), the
node wrapped as gradients and unwrapped by `best_node`.  Within one turn the answers to all but the
template are the same for every task: the node list, the search's size and start, the arrays.

A `RunChoice` takes them once per turn, and for the template keeps the last one found: a task of
the same template (`rowlocal.same_template`, the same test `_template` makes) is answered from it; any
other task looks its template up as `batch.choose` does.  Then the same steps as `batch.choose`'s
board path: the template's stills, its rows refreshed (`_Template.update`), `Board.pick` (the one
random draw).  It answers only where `batch.choose` would take the board (a plain template, every
node searched: start 0 and no resume of the sampled start); anything else answers None before any
draw, and allocate takes the per-task path from the same state (which then finds the rows already
refreshed: `update` is idempotent).  The per-task path is the reference
(tests/fastpath/test_run_choice.py: whole cycles compared decision by decision).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from busched.api.node import NodeInfo
from busched.api.task import TaskInfo
from busched.fastpath import batch, rowlocal
from busched.fastpath.board import NAN

__all__ = ["RunChoice"]


class RunChoice:
    """One job turn's choices from kept templates (``open`` says whether the turn may use one)."""

    __slots__ = ("ssn", "nodes", "fn", "size", "to_find", "arrays", "template")

    def __init__(self, ssn: Any, nodes: Sequence[NodeInfo], fn: Callable[[TaskInfo, NodeInfo], None],
                 to_find: int) -> None:
        self.ssn, self.nodes, self.fn, self.to_find = ssn, nodes, fn, to_find
        self.size = len(nodes)
        self.arrays = ssn.arrays
        self.template: batch._Template | None = None

    @classmethod
    def open(cls, ssn: Any, nodes: Sequence[NodeInfo], fn: Callable[[TaskInfo, NodeInfo], None],
             to_find: int) -> RunChoice | None:
        """A run for a turn over ``nodes`` whose every search looks for ``to_find`` nodes, or None
        when its choices could not come from a board (a sampled search, nodes without their rows)."""
        size = len(nodes)
        # the choice a run stands in for is `batch.choose` itself: a session whose fast path chooses
        # otherwise (a test's stand-in) gets no run, and every choice goes through its own
        if ssn.fast.batch_choose is not batch.GENUINE_CHOOSE or not size or to_find < size or size > batch.PLAIN_MAX:
            return None
        run = cls(ssn, nodes, fn, to_find)
        if run.arrays.rows_of(nodes) is not run.arrays.all_rows:
            return None
        return run

    def forget(self) -> None:
        """The per-task path ran between two choices (it may have built or dropped templates)."""
        self.template = None

    def choose(self, task: TaskInfo) -> NodeInfo | None:
        """The node `batch.choose` would answer for ``task`` from a board (its draw made), or None,
        no draw made, when the per-task path must decide."""
        t = self._held(task, True)
        if t is None:
            return None
        arrays = self.arrays
        try:
            for still in t.stills:
                if not still():
                    batch._drop(arrays, t)
                    self.template = None
                    return None
            t.update(self.size)
            board = t.board
            if board is None or not board.answers(0, self.to_find):
                self.template = None
                self._pass(t)
                return None
            row = board.pick(self.ssn.rng, 0)  # (draws last: nothing after it can fail)
        except Exception:  # noqa: BLE001 - the per-task path calls the twins again and names the plugin
            batch._drop(arrays, t)
            self.template = None
            return None
        if row is None or row == NAN:
            self._pass(t)
            return None  # no node found (the per-task path records the fit errors), or a NaN best
        return self.nodes[row]

    def _held(self, task: TaskInfo, board: bool) -> batch._Template | None:
        """The template ``task`` is chosen from: the one held when ``task`` is of it (counted as
        `_template` counts one found again), else the one `batch._template` finds or builds, held from
        now on; None, nothing drawn, when the per-task path must decide (a raising twin, no template, a
        declined one, or, with ``board``, one without a board)."""
        t = self.template
        if t is not None and (t.task is task or rowlocal.same_template(t.task, task)):
            self.arrays.cache[batch._KEY].reused += 1
            return t
        self.template = None
        try:
            t = batch._template(self.ssn, self.arrays, task, self.nodes, self.fn, self.to_find)
        except Exception:  # noqa: BLE001 - a twin or declaration raised: the per-task path names the plugin
            return None
        if t is None:
            return None
        if t.declined or (board and t.board is None):
            self._pass(t)
            return None
        self.template = t
        return t

    def _pass(self, t: batch._Template) -> None:
        """Leave ``t``'s task to the per-task path, which finds ``t`` kept and counts it reused: the
        run's own finding (or building) of it must not count as well, or templates used once would
        look used twice and `batch`'s trial (`batch.TRIAL`) would never stop building them."""
        self.arrays.cache[batch._KEY].reused -= 1
