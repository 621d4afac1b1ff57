"""Batch callbacks: a plugin's per-node function with its vectorised twin (`batch`).

The array kernels themselves, and the switch that turns them off, live in busched.fastpath.
"""
