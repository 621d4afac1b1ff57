"""The fast path: kernels against their oracles, lent snapshots, fast object builds."""
