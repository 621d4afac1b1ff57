"""The tests' edge: the fast path's switches (``BUSCHED_KERNELS``, ``BUSCHED_VERIFY_SHARED``)
are read from the environment here and made the default (busched.fastpath), so the whole
suite can be run with the kernels off or the lending verified."""

from __future__ import annotations

import os

from busched import fastpath

fastpath.use_by_default(fastpath.FastPathSettings.from_env(os.environ))
