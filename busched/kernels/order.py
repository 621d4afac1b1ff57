"""Sort keys for the job order, so heaps compare tuples instead of calling plugins.

Replaces calling ``Session.job_order_fn`` (every job-order plugin in tier
order, the first non-zero answer, then creation time, then uid) at each heap
comparison: when every job-order callback carries a key (`busched.kernels.batch.Keyed`),
the tuple of their keys followed by (created, uid) compares exactly as the
callbacks do.  Only for heaps whose jobs do not change while they wait
(allocate's and enqueue's: a job changes only in its own turn).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from busched import kernels
from busched.kernels.batch import key_of

__all__ = ["job_order_key"]


def job_order_key(ssn: Any) -> Callable[[Any], tuple] | None:
    if not kernels.USE_KERNELS:
        return None
    keys = []
    for row in ssn._tiers("job_order"):
        for _, fn in row:
            k = key_of(fn)
            if k is None:
                return None
            keys.append(k)

    def key(job: Any) -> tuple:
        return (*[k(job) for k in keys], job.created, job.uid)

    return key
