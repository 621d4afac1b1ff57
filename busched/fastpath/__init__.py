"""The fast path: array kernels, lent snapshots and cross-session memos, behind one border.

Everything here only makes the scheduler faster; the framework's plain loops are the
reference it is tested against (tests/test_kernels*.py, tests/test_shared_snapshot.py).
"""
