"""Actions (busched.actions): preempt, reclaim, shuffle and eviction properties."""
