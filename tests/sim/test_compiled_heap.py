"""The compiled engine's event heap: events come out by time, ties in the order scheduled, and a
heap rebuilt after entries were dropped pops the rest in the same order."""

from __future__ import annotations

import numpy as np

from simrollout.sim.compiled_heap import J_HSIZE, heapify, pop, push


def _heap(size: int):
    return np.zeros(size), np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64), \
        np.zeros(size, dtype=np.int64), np.zeros(8, dtype=np.int64)  # fmt: skip


def _drain(h) -> list[tuple[float, int]]:
    out = []
    while h[4][J_HSIZE]:
        t, w, _ = pop(*h)
        out.append((t, w))
    return out


def test_events_by_time_ties_in_order_scheduled():
    rng = np.random.default_rng(3)
    h = _heap(600)
    times = np.round(rng.random(500) * 20) / 2  # many ties
    for w, t in enumerate(times):
        push(*h, float(t), w, 0)
    got = _drain(h)
    assert got == sorted(((float(t), w) for w, t in enumerate(times)), key=lambda x: (x[0], x[1]))


def test_a_heap_rebuilt_after_dropping_entries_pops_the_rest_in_order():
    rng = np.random.default_rng(5)
    h = _heap(600)
    times = np.round(rng.random(500) * 30) / 3
    for w, t in enumerate(times):
        push(*h, float(t), w, 0)
    ht, hs, hw, hk, gi = h
    keep = hw[: gi[J_HSIZE]] % 3 != 0  # drop a third, in place, as compiled_loop._compact does
    m = int(keep.sum())
    for a in (ht, hs, hw, hk):
        a[:m] = a[: gi[J_HSIZE]][keep]
    gi[J_HSIZE] = m
    heapify(ht, hs, hw, hk, m)
    want = sorted(((float(t), w) for w, t in enumerate(times) if w % 3), key=lambda x: (x[0], x[1]))
    assert _drain(h) == want
