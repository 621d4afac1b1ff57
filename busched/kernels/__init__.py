"""The private array fast path.  Every kernel names the plain code it replaces, and
tests check both give the same answers on random clusters."""
