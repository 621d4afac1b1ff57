"""Resource vectors with Volcano's arithmetic and comparison rules.

A `Resource` holds milli-cpu, memory bytes and a map of scalar resources
(``pods`` as a plain count, every other scalar such as ``nvidia.com/gpu`` in
thousandths, as Volcano's ``NewResource`` does).  Comparisons treat values
closer than `MIN_RESOURCE` as equal, and a scalar missing on one side takes
the *dimension default* (`ZERO` or `INFINITY`) given by the caller.

(Over 400 lines on purpose: one value type with the whole of Volcano's comparison vocabulary
from ``resource_info.go``, each method a few lines; split up, a reader would lose the one place
where every comparison's treatment of missing scalars can be read side by side.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from busched.api import limits, quantity

__all__ = ["Resource", "MIN_RESOURCE", "ZERO", "INFINITY", "CPU", "MEMORY", "PODS", "GPU"]

MIN_RESOURCE = 0.1
ZERO = 0
INFINITY = -1
CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
GPU = "nvidia.com/gpu"
_IGNORED_SCALARS = frozenset({PODS})
# Kubernetes resource names that count objects in a quota, never a node's capacity.
_COUNT_PREFIX = "count/"


def is_scalar_resource_name(name: str) -> bool:
    """Kubernetes' IsScalarResourceName: extended (domain/name, not kubernetes.io), hugepages-*,
    prefixed native (kubernetes.io/...) or attachable-volumes-*.  A bare name like ``rdma`` is not."""
    if name.startswith(("hugepages-", "attachable-volumes-")):
        return True
    if "/" not in name:
        return False
    if "kubernetes.io/" in name:
        return True
    return not name.startswith("requests.")


_new_resource = object.__new__
_MAX_MILLI_SCALAR = limits.MAX_SCALAR * 1000


def _out_of_bounds(raw: object, v: int, limit: str) -> None:
    shown = f'"{raw}"' if isinstance(raw, str) else repr(raw)
    if v < 0:
        raise quantity.QuantityError(f"must not be negative (got {shown})")
    raise quantity.QuantityError(f"must not exceed {limit} (got {shown})")


def _le(a: float, b: float) -> bool:
    return a < b or abs(a - b) < MIN_RESOURCE


class Resource:
    """milli-cpu, memory bytes and scalar resources; mutating methods return self."""

    __slots__ = ("cpu", "memory", "scalars", "max_task_num")

    def __init__(self, cpu: float = 0.0, memory: float = 0.0, scalars: Mapping[str, float] | None = None,
                 max_task_num: int = 0) -> None:
        self.cpu = float(cpu)
        self.memory = float(memory)
        self.scalars: dict[str, float] = dict(scalars) if scalars else {}
        self.max_task_num = max_task_num

    # -- construction -------------------------------------------------------
    @classmethod
    def from_list(cls, rl: Mapping[str, object] | None, *, field: str = "resources") -> Resource:
        """Build from a Kubernetes resource list (``{"cpu": "500m", ...}``).

        Raises `quantity.QuantityError` naming ``field.<resource>`` on a bad value, a negative one, or
        one beyond `busched.api.limits` (10^7 cores of cpu, 2^62 of anything else).
        """
        r = cls()
        if not rl:
            return r
        for name, raw in rl.items():
            try:
                if name == CPU:
                    v = quantity.milli_value(raw)  # type: ignore[arg-type]
                    if not 0 <= v <= limits.MAX_MILLI_CPU:
                        _out_of_bounds(raw, v, "10^7 cores")
                    r.cpu += v
                elif name == MEMORY:
                    v = quantity.value(raw)  # type: ignore[arg-type]
                    if not 0 <= v <= limits.MAX_SCALAR:
                        _out_of_bounds(raw, v, "2^62")
                    r.memory += v
                elif name == PODS:
                    v = quantity.value(raw)  # type: ignore[arg-type]
                    if not 0 <= v <= limits.MAX_SCALAR:
                        _out_of_bounds(raw, v, "2^62")
                    r.max_task_num += v
                    r.add_scalar(PODS, float(v))
                elif name.startswith(_COUNT_PREFIX) or (name != "ephemeral-storage"
                                                        and not is_scalar_resource_name(name)):
                    continue  # quota counters and names Kubernetes would not schedule on
                else:  # ephemeral-storage and the scalars, in thousandths
                    v = quantity.milli_value(raw)  # type: ignore[arg-type]
                    if not 0 <= v <= _MAX_MILLI_SCALAR:
                        _out_of_bounds(raw, v, "2^62")
                    r.add_scalar(name, float(v))
            except quantity.QuantityError as e:
                raise quantity.QuantityError(f"{field}.{name}: {e}") from None
        return r

    @classmethod
    def infinite(cls) -> Resource:
        return cls(math.inf, math.inf, None, 2**62)

    def clone(self) -> Resource:
        # what Resource(self.cpu, self.memory, self.scalars, self.max_task_num) gives, without the call
        r = _new_resource(Resource)
        r.cpu = float(self.cpu)
        r.memory = float(self.memory)
        r.scalars = dict(self.scalars) if self.scalars else {}
        r.max_task_num = self.max_task_num
        return r

    # -- access --------------------------------------------------------------
    def get(self, name: str) -> float:
        if name == CPU:
            return self.cpu
        if name == MEMORY:
            return self.memory
        return self.scalars.get(name, 0.0)

    def set(self, name: str, v: float) -> None:
        if name == CPU:
            self.cpu = v
        elif name == MEMORY:
            self.memory = v
        else:
            self.scalars[name] = v

    def names(self) -> list[str]:
        """Resource names with a value of at least `MIN_RESOURCE` (ResourceNames)."""
        out = []
        if self.cpu >= MIN_RESOURCE:
            out.append(CPU)
        if self.memory >= MIN_RESOURCE:
            out.append(MEMORY)
        out.extend(n for n, v in self.scalars.items() if v >= MIN_RESOURCE)
        return out

    def all_names(self) -> list[str]:
        return [CPU, MEMORY, *self.scalars]

    def is_empty(self) -> bool:
        """True for a BestEffort request: nothing but (possibly) pods."""
        if self.cpu >= MIN_RESOURCE or self.memory >= MIN_RESOURCE:
            return False
        return all(v < MIN_RESOURCE for n, v in self.scalars.items() if n not in _IGNORED_SCALARS)

    def is_zero(self, name: str) -> bool:
        return self.get(name) < MIN_RESOURCE

    # -- arithmetic ------------------------------------------------------------
    def add(self, rr: Resource) -> Resource:
        self.cpu += rr.cpu
        self.memory += rr.memory
        for n, v in rr.scalars.items():
            self.scalars[n] = self.scalars.get(n, 0.0) + v
        return self

    def sub(self, rr: Resource) -> Resource:
        """Subtract without checking sufficiency (Volcano's sub / SubWithoutAssert).

        Like Volcano, scalars the left side lacks are left alone.
        """
        self.cpu -= rr.cpu
        self.memory -= rr.memory
        if self.scalars:
            for n, v in rr.scalars.items():
                self.scalars[n] = self.scalars.get(n, 0.0) - v
        return self

    def add_scalar(self, name: str, v: float) -> None:
        self.scalars[name] = self.scalars.get(name, 0.0) + v

    def multi(self, ratio: float) -> Resource:
        self.cpu *= ratio
        self.memory *= ratio
        for n in self.scalars:
            self.scalars[n] *= ratio
        return self

    def set_max(self, rr: Resource) -> Resource:
        self.cpu = max(self.cpu, rr.cpu)
        self.memory = max(self.memory, rr.memory)
        for n, v in rr.scalars.items():
            if n not in self.scalars or v > self.scalars[n]:
                self.scalars[n] = v
        return self

    def min_dimension(self, rr: Resource, default: int = ZERO) -> Resource:
        """Per-dimension minimum (MinDimensionResource)."""
        self.cpu = min(self.cpu, rr.cpu)
        self.memory = min(self.memory, rr.memory)
        for n, v in self.scalars.items():
            if n in rr.scalars:
                self.scalars[n] = min(v, rr.scalars[n])
            elif default != INFINITY:
                self.scalars[n] = 0.0
        return self

    def fit_delta(self, rr: Resource) -> Resource:
        if rr.cpu > 0:
            self.cpu -= rr.cpu + MIN_RESOURCE
        if rr.memory > 0:
            self.memory -= rr.memory + MIN_RESOURCE
        for n, v in rr.scalars.items():
            if v > 0:
                self.scalars[n] = self.scalars.get(n, 0.0) - (v + MIN_RESOURCE)
        return self

    def __add__(self, rr: Resource) -> Resource:
        return self.clone().add(rr)

    def __sub__(self, rr: Resource) -> Resource:
        return self.clone().sub(rr)

    # -- comparison ------------------------------------------------------------
    def less_equal(self, rr: Resource, default: int = ZERO) -> bool:
        # _le written out: the scheduler asks this several times for every task it places
        a, b = self.cpu, rr.cpu
        if not (a < b or abs(a - b) < MIN_RESOURCE):
            return False
        a, b = self.memory, rr.memory
        if not (a < b or abs(a - b) < MIN_RESOURCE):
            return False
        if not self.scalars:
            if default == INFINITY:
                return not rr.scalars
            return True
        if default == INFINITY:
            for n in rr.scalars:
                if n not in self.scalars:
                    return False
        for n, lv in self.scalars.items():
            if n not in rr.scalars:
                if default == INFINITY:
                    continue
                rv = 0.0
            else:
                rv = rr.scalars[n]
            if not _le(lv, rv):
                return False
        return True

    def less_equal_with_names(self, rr: Resource, default: int = ZERO) -> tuple[bool, list[str]]:
        bad: list[str] = []
        if not _le(self.cpu, rr.cpu):
            bad.append(CPU)
        if not _le(self.memory, rr.memory):
            bad.append(MEMORY)
        for n, lv in self.scalars.items():
            if n not in rr.scalars and default == INFINITY:
                continue
            if not _le(lv, rr.scalars.get(n, 0.0)):
                bad.append(n)
        return (not bad), bad

    def less(self, rr: Resource, default: int = ZERO) -> bool:
        if not self.cpu < rr.cpu or not self.memory < rr.memory:
            return False
        if default == INFINITY:
            for n in rr.scalars:
                if n not in self.scalars:
                    return False
        for n, lv in self.scalars.items():
            if n not in rr.scalars:
                if default == INFINITY:
                    continue
                rv = 0.0
            else:
                rv = rr.scalars[n]
            if not lv < rv:
                return False
        return True

    def less_partly(self, rr: Resource, default: int = ZERO) -> bool:
        if self.cpu < rr.cpu or self.memory < rr.memory:
            return True
        if default == ZERO:
            for n in rr.scalars:
                if n not in self.scalars:
                    return True
        for n, lv in self.scalars.items():
            if n not in rr.scalars:
                if default == INFINITY:
                    return True
                rv = 0.0
            else:
                rv = rr.scalars[n]
            if lv < rv:
                return True
        return False

    def less_equal_partly(self, rr: Resource, default: int = ZERO) -> bool:
        if _le(self.cpu, rr.cpu) or _le(self.memory, rr.memory):
            return True
        if default == ZERO:
            for n in rr.scalars:
                if n not in self.scalars:
                    return True
        for n, lv in self.scalars.items():
            if n not in rr.scalars:
                if default == INFINITY:
                    return True
                rv = 0.0
            else:
                rv = rr.scalars[n]
            if _le(lv, rv):
                return True
        return False

    def equal(self, rr: Resource, default: int = ZERO) -> bool:
        def eq(a: float, b: float) -> bool:
            return a == b or abs(a - b) < MIN_RESOURCE

        if not eq(self.cpu, rr.cpu) or not eq(self.memory, rr.memory):
            return False
        return all(eq(v, rr.scalars.get(n, 0.0)) for n, v in self.scalars.items())

    def less_equal_with_dimension(self, rr: Resource | None, req: Resource | None) -> tuple[bool, list[str]]:
        """Compare only the dimensions ``req`` asks for (LessEqualWithDimensionAndResourcesName)."""
        if rr is None:
            return False, self.names()
        if req is None:
            return self.less_equal_with_names(rr, ZERO)
        bad = []
        if req.cpu > 0 and self.cpu > rr.cpu:
            bad.append(CPU)
        if req.memory > 0 and self.memory > rr.memory:
            bad.append(MEMORY)
        if self.scalars:
            for n, q in req.scalars.items():
                if n in _IGNORED_SCALARS:
                    continue
                if q > 0 and self.scalars.get(n, 0.0) > rr.scalars.get(n, 0.0):
                    bad.append(n)
        return (not bad), bad

    def plus_less_equal_with_dimension(self, add: Resource, rr: Resource) -> bool:
        """``self.clone().add(add).less_equal_with_dimension(rr, add)[0]``, compared off the sums
        (the same float additions) without building them: asked for every task allocate places."""
        if add.cpu > 0 and self.cpu + add.cpu > rr.cpu:
            return False
        if add.memory > 0 and self.memory + add.memory > rr.memory:
            return False
        if add.scalars:
            have, cap = self.scalars, rr.scalars
            for n, q in add.scalars.items():
                if n not in _IGNORED_SCALARS and q > 0 and have.get(n, 0.0) + q > cap.get(n, 0.0):
                    return False
        return True

    def greater_partly_with_dimension(self, rr: Resource | None, req: Resource | None) -> tuple[bool, list[str]]:
        if req is None:
            return False, []
        rr = rr or Resource()
        bad = []
        if req.cpu > 0 and self.cpu > rr.cpu:
            bad.append(CPU)
        if req.memory > 0 and self.memory > rr.memory:
            bad.append(MEMORY)
        for n, q in req.scalars.items():
            if n in _IGNORED_SCALARS:
                continue
            if q > 0 and self.get(n) > rr.get(n):
                bad.append(n)
        return bool(bad), bad

    # -- presentation ----------------------------------------------------------
    def to_dict(self) -> dict[str, float]:
        out: dict[str, float] = {CPU: self.cpu, MEMORY: self.memory}
        for n in sorted(self.scalars):
            out[n] = self.scalars[n]
        return out

    def __repr__(self) -> str:
        parts = [f"cpu {self.cpu:.2f}", f"memory {self.memory:.2f}"]
        parts += [f"{n} {self.scalars[n]:.2f}" for n in sorted(self.scalars)]
        return "Resource(" + ", ".join(parts) + ")"

    def __eq__(self, other: object) -> bool:  # exact, for tests
        if not isinstance(other, Resource):
            return NotImplemented
        return (self.cpu, self.memory) == (other.cpu, other.memory) and {
            k: v for k, v in self.scalars.items() if v
        } == {k: v for k, v in other.scalars.items() if v}

    __hash__ = None  # type: ignore[assignment]


GO_INFINITY = -1.0  # Volcano marks an unlimited scalar with -1 in Diff


def diff(left: Resource, right: Resource) -> tuple[Resource, Resource]:
    """Volcano's ``Resource.Diff`` (ZERO default): (increased, decreased) going from right to left.

    Scalar keys matter (callers compare results exactly): a scalar appears on the side it moved to.
    """
    inc, dec = Resource(), Resource()
    if left.cpu > right.cpu:
        inc.cpu = left.cpu - right.cpu
    else:
        dec.cpu = right.cpu - left.cpu
    if left.memory > right.memory:
        inc.memory = left.memory - right.memory
    else:
        dec.memory = right.memory - left.memory
    for name in {**left.scalars, **right.scalars}:
        lq, rq = left.scalars.get(name, 0.0), right.scalars.get(name, 0.0)
        if lq == GO_INFINITY:
            inc.scalars[name] = lq
        elif rq == GO_INFINITY:
            dec.scalars[name] = rq
        elif lq > rq:
            inc.scalars[name] = lq - rq
        else:
            dec.scalars[name] = rq - lq
    return inc, dec


def exceeded_part(left: Resource, right: Resource) -> Resource:
    """The part of ``left`` above ``right`` (ExceededPart); only scalars that exceed are present."""
    return diff(left, right)[0]


def res_max(l: Resource, r: Resource) -> Resource:
    """Volcano's ``helpers.Max``: dimension-wise maximum; negative scalars are dropped."""
    out = Resource(max(l.cpu, r.cpu), max(l.memory, r.memory))
    for name, q in l.scalars.items():
        if q >= 0:
            out.scalars[name] = q
    for name, q in r.scalars.items():
        if q >= 0:
            out.scalars[name] = max(q, out.scalars.get(name, 0.0))
    return out


def total(rs: Iterable[Resource]) -> Resource:
    out = Resource()
    for r in rs:
        out.add(r)
    return out
