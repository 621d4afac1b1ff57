"""A stream's choices on a sampled search: one template's kept vectors held across the turns of a stream
of single-task jobs, and its windows kept between the walks that look at them again.

`busched.fastpath.runchoice.RunChoice` holds a template across a job's turn (a stream holds one
across its turns), and only where every node is searched: a cluster of up to `batch.PLAIN_MAX`
nodes whose search looks at all of them.  On a larger cluster every search is sampled, and each
task of a stream (busched.actions.allocate_stream) went through the per-task layers
(`PredicateHelper.chosen_found`: the search's size and start; `batch.choose`: the node list's rows,
the session's kept templates walked and compared; then `Gradients` made and unwrapped by
`best_node`), a `RunChoice` opened and refused at every turn.

A `StreamChoice` is opened once per stream whose searches are sampled and asked at each turn's
choice.  It keeps the last template found, as `RunChoice` does (a task of the same template,
`rowlocal.same_template`, is answered from it; any other looks its template up as `batch.choose`
does), and then takes `batch.choose`'s steps itself: the template's stills, its rows refreshed
(`_Template.update`), the search's start (the session's ``last_node_index``,
`nodeselect._sample_start`), the draw (`windows.Windows.pick`, `pick.pick_window`'s answer from the
windows kept, on a template kept as arrays; a board's as `batch.choose` takes it), and the start
moved past the nodes the walk looked at (`nodeselect._sample_resume`).  Where `batch.choose` would
answer None (no template, a declined one, a still that no longer holds, no node found, a NaN best,
a twin raising) it answers None before any draw and before the start moves, and allocate's turn
takes the per-task path from the same state, which finds the template kept (counted reused once,
as without the stream: `RunChoice._pass`) and its rows already refreshed (`update` is idempotent).
The turn forgets the held template whenever the per-task path ran (it may have built or dropped
templates).

The per-task path is the reference: tests/fastpath/test_stream_choice.py runs whole cycles with the
stream's choice and without it (every choice through `chosen_found`) on random clusters whose
searches are sampled, and compares every decision, the rotated start, the random source's state,
the templates' trial counts and the session's state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from busched.api.node import NodeInfo
from busched.api.task import TaskInfo
from busched.fastpath import batch
from busched.fastpath.board import NAN
from busched.fastpath.pick import pick_window
from busched.fastpath.runchoice import RunChoice
from busched.fastpath.windows import Windows

__all__ = ["StreamChoice"]


class StreamChoice(RunChoice):
    """A stream's choices from kept templates, its searches sampled."""

    __slots__ = ()

    @classmethod
    def open(cls, ssn: Any, nodes: Sequence[NodeInfo], fn: Callable[[TaskInfo, NodeInfo], None],
             to_find: int) -> StreamChoice | None:
        """The stream's choice over ``nodes`` (every search looking for ``to_find`` of them, fewer
        than all: a whole search is `RunChoice`'s), or None when `batch.choose` could not answer there
        (a node list without its rows) or is not the session's choice (a test's stand-in)."""
        if ssn.fast.batch_choose is not batch.GENUINE_CHOOSE or not 0 < to_find < len(nodes):
            return None
        run = cls(ssn, nodes, fn, to_find)
        if run.arrays.rows_of(nodes) is not run.arrays.all_rows:
            return None
        return run

    def choose(self, task: TaskInfo) -> NodeInfo | None:
        """The node `chosen_found` would choose for ``task`` (`batch.choose`'s answer, its draw made
        and the search's start moved on), or None, nothing drawn or moved, when the per-task path
        must decide."""
        t = self._held(task, False)
        if t is None:
            return None
        arrays = self.arrays
        ssn = self.ssn
        size = self.size
        try:
            for still in t.stills:
                if not still():
                    batch._drop(arrays, t)
                    self.template = None
                    return None
            t.update(size)
            start = ssn.last_node_index % size  # (`nodeselect._sample_start`)
            board = t.board
            if board is not None and board.answers(start, self.to_find):
                row = board.pick(ssn.rng, start)  # (draws last: nothing after it can fail)
                if row is None or row == NAN:
                    self._pass(t)
                    return None  # no node found (the per-task path records the fit errors), or a NaN best
                processed = size
            elif board is None:
                # the walk's windows kept between visits (busched.fastpath.windows: `pick_window`'s answers)
                windows = t.windows
                if windows is None:
                    windows = t.windows = Windows()
                got = windows.pick(t.ok, t.idle.vec, t.total, start, self.to_find, ssn.rng)
                if got is None:
                    self._pass(t)
                    return None
                row, processed = got
            else:
                ok, idle, total = t.arrays()
                got = pick_window(ok, idle, total, start, self.to_find, ssn.rng)
                if got is None:
                    self._pass(t)
                    return None
                row, processed = got
        except Exception:  # noqa: BLE001 - the per-task path calls the twins again and names the plugin
            batch._drop(arrays, t)
            self.template = None
            return None
        ssn.last_node_index = (start + processed) % size  # (`nodeselect._sample_resume`)
        return self.nodes[row]
