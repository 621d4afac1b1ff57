"""`KeyedQueue.peek` (busched.framework.pqueue), which allocate's stream of single-task jobs reads to
know the job execute would pop next (busched.actions.allocate_stream): on random pushes before the
first pop (sorted once, ties falling back to the heap), pushes after it (heaped) and pops, every peek
must show the item the next pop returns and leave the queue as it was.  The case that matters is a
later push (a job pushed back) whose key precedes the sorted head: peek must show the heap's head."""

from __future__ import annotations

import random

from busched.framework.pqueue import KeyedQueue


def _never(a: object, b: object) -> bool:
    raise AssertionError("a keyed queue never calls less")


def _key(item: tuple) -> tuple:
    return item[0]


def _drive(rng: random.Random, counts: dict) -> None:
    n = rng.choice([1, 2, 5, 30, 120])
    ties = rng.random() < 0.3  # (then the sorted part falls back to the heap)
    items = [((rng.randint(0, 3 if ties else 10**6),), i) for i in range(n)]
    rng.shuffle(items)
    first = rng.randint(1, n)
    q = KeyedQueue(_never, _key)
    for e in items[:first]:
        q.push(e)
    left = items[first:]
    while not q.empty() or left:
        if left and (q.empty() or rng.random() < 0.35):
            q.push(left.pop())
            continue
        size = len(q)
        seen = q.peek()
        assert q.peek() is seen and len(q) == size  # peek leaves the queue as it was
        # (a heaped item shown ahead of a sorted one: the case a peek of the sorted head gets wrong)
        counts["heap_ahead"] += bool(q._h and q._sorted and seen is q._h[0][1])
        counts["peeks"] += 1
        assert q.pop() is seen


def test_peek_shows_what_pop_returns():
    counts = {"heap_ahead": 0, "peeks": 0}
    for seed in range(60):
        _drive(random.Random(seed), counts)
    assert counts["heap_ahead"] > 0, counts  # the random sequences reach the case that matters


def test_peek_shows_a_later_push_ahead_of_the_sorted_head():
    """A job pushed back after the first pop with a smaller key than every sorted one (a higher
    priority): peek and pop must both take it first."""
    q = KeyedQueue(_never, _key)
    for k in (5, 3, 9):
        q.push(((k,), f"s{k}"))
    assert q.peek() == q.pop() == ((3,), "s3")
    q.push(((1,), "late"))
    assert q.peek() == ((1,), "late")
    assert q.pop() == ((1,), "late")
    assert q.peek() == q.pop() == ((5,), "s5")
