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
    keep = hw[: gi[J_HSIZE]] % 3 != 0  # drop a third, in place, as compiled_core.compact does
    m = int(keep.sum())
    for a in (ht, hs, hw, hk):
        a[:m] = a[: gi[J_HSIZE]][keep]
    gi[J_HSIZE] = m
    heapify(ht, hs, hw, hk, m)
    want = sorted(((float(t), w) for w, t in enumerate(times) if w % 3), key=lambda x: (x[0], x[1]))
    assert _drain(h) == want


def test_a_full_heap_drops_the_old_ends_of_cut_segments_before_a_push():
    """The training loop cuts segments and leaves their old ends in the heap (skipped when they
    come); a push into a full heap drops them first, so the heap never overflows."""
    from simrollout.sim import compiled_loop as L

    wi = np.zeros((4, L.NI), dtype=np.int64)
    wi[:, L.I_EPOCH] = 1
    ht, hs, hw, hk, gi = _heap(6)
    S = (np.zeros((4, L.NF)), wi, np.zeros(4), gi, ht, hs, hw, hk)
    seg_end = L.K_SEG_END + L.EPOCH  # epoch 1
    for w, t in enumerate((5.0, 6.0, 7.0, 8.0)):
        L.schedule(S, t, w, seg_end)
    for w in (0, 1):  # cut: a new end at an earlier time, the old one left behind
        wi[w, L.I_EPOCH] = 2
        L.schedule(S, 1.0 + w, w, L.K_SEG_END + 2 * L.EPOCH)
    assert gi[J_HSIZE] == 6  # full
    L.schedule(S, 3.0, 3, L.K_NEXT)  # worker 3's event: the two stale ends are dropped first
    assert gi[J_HSIZE] == 5
    got = []
    while gi[J_HSIZE]:
        t, w, k = pop(ht, hs, hw, hk, gi)
        got.append((t, w))
    assert got == [(1.0, 0), (2.0, 1), (3.0, 3), (7.0, 2), (8.0, 3)]
