"""What many tasks hold at once instead of one copy each.

A cluster holds two `TaskInfo` per placed task (the job's and the node's, busched.fastpath.lending),
and most tasks of a big cluster are alike: the same requests, no labels, no tolerations.  A task
converted from its spec (busched.api.build.task_info) gets

* one `SharedResource` per distinct request, as both its ``resreq`` and its ``init_resreq``, in
  place of two vectors and two scalar maps of its own (a task's requests are replaced, never
  changed in place: a shared one raises if a method would change it);
* the empty containers below for the fields its spec leaves empty, in place of ten fresh ones
  (and a converted job for its own five).

A task or job spec (busched.api.objects) does the same with its own empty fields as it is decoded
or made, keeps one string for the names many repeat (namespace, job, node, phase, queue) and one
map for each distinct request map (`one_request`): a spec is replaced, never changed in place.

Nothing changes a task's containers in place either (a clone already shares them with its task);
`empties_intact` says whether that still holds (busched.fastpath.verify checks it with every lease).
"""

from __future__ import annotations

from typing import Any, TypeVar

from busched.api.resource import Resource

__all__ = ["SharedResource", "NO_MAP", "NO_LIST", "SPEC_NO_MAP", "SPEC_NO_LIST", "empties_intact", "known_name",
           "one_request", "one_name"]

_new = object.__new__

# (one dict for every map a task or a job leaves empty: labels, annotations, node selector, bind
# annotations, extra, a job's minimum per task; one list for every list: tolerations, spread
# constraints, ports, gates, images, a job's sub-group policy and conditions)
NO_MAP: dict[Any, Any] = {}
NO_LIST: list[Any] = []
# (and the same for the specs, busched.api.objects: a task spec's or a job spec's empty fields)
SPEC_NO_MAP: dict[Any, Any] = {}
SPEC_NO_LIST: list[Any] = []


# request maps as specs give them (items in order -> the first such map), bounded: specs are
# untrusted input, and a cleared memo only means the next ones are kept again
_REQUESTS: dict[tuple[Any, ...], dict[Any, Any]] = {}
_REQUESTS_MAX = 4096


def one_request(m: dict[Any, Any]) -> dict[Any, Any]:
    """The one map every spec with these requests (the same items in the same order) holds; only
    text quantities are shared (1, 1.0 and True are equal keys, but not the same request)."""
    key = tuple(m.items())
    for k, v in key:
        if type(k) is not str or type(v) is not str:
            return m
    return _first(_REQUESTS, _REQUESTS_MAX, key, m)


# names many objects repeat (namespaces, job keys, nodes, phases, queues) -> the first such string,
# bounded: not `sys.intern`, whose strings some Pythons never free (3.12.0-3.12.4, free-threaded
# builds: cpython gh-113993), and a job key comes from untrusted specs, new with every job
_NAMES: dict[str, str] = {}
_NAMES_MAX = 1 << 20


# the memo's own lookup, for a decoder's hot path (`TaskSpec.__post_init__`): ``known_name(s) or one_name(s)``
# is ``one_name(s)`` with a call fewer when the name is known ("" is never known: `one_name` keeps it)
known_name = _NAMES.get


def one_name(s: str) -> str:
    """The one string every object naming ``s`` holds (while the memo holds it)."""
    seen = _NAMES.get(s)  # (the usual case without a call: four names per spec decoded)
    return seen if seen is not None else _first(_NAMES, _NAMES_MAX, s, s)


K = TypeVar("K")
V = TypeVar("V")


def _first(memo: dict[K, V], bound: int, key: K, value: V) -> V:
    """The value ``memo`` holds for ``key``, else ``value`` kept as it; a full memo is emptied first
    (what it is fed comes from untrusted specs: a cleared memo only means the next ones are kept)."""
    seen = memo.get(key)
    if seen is None:
        if len(memo) >= bound:
            memo.clear()
        memo[key] = seen = value
    return seen


def empties_intact() -> bool:
    return not NO_MAP and not NO_LIST and not SPEC_NO_MAP and not SPEC_NO_LIST


class _Scalars(dict):  # type: ignore[type-arg]
    """A shared request's scalar map: read as a dict, never written."""

    __slots__ = ()

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise TypeError("a shared request is never changed in place (its scalars)")

    __setitem__ = __delitem__ = pop = popitem = setdefault = update = clear = __ior__ = _refuse


class SharedResource(Resource):
    """A request many tasks hold: `clone` gives a plain `Resource` to change; changing this one
    in place raises (every cpu or memory write does, a write to its scalars, ``set``,
    ``add_scalar`` and ``fit_delta``). A copy of it is itself."""

    __slots__ = ()

    @classmethod
    def of(cls, r: Resource) -> SharedResource:
        out = _new(cls)
        put = object.__setattr__
        put(out, "cpu", r.cpu)
        put(out, "memory", r.memory)
        put(out, "scalars", _Scalars(r.scalars))
        put(out, "max_task_num", r.max_task_num)
        return out

    def __setattr__(self, name: str, value: object) -> None:
        raise TypeError(f"a shared request is never changed in place (set {name})")

    def set(self, name: str, v: float) -> None:
        raise TypeError(f"a shared request is never changed in place (set {name})")

    def add_scalar(self, name: str, v: float) -> None:
        raise TypeError(f"a shared request is never changed in place (add {name})")

    def fit_delta(self, rr: Resource) -> Resource:
        raise TypeError("a shared request is never changed in place (fit_delta)")

    def __copy__(self) -> SharedResource:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedResource:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (SharedResource.of, (self.clone(),))
