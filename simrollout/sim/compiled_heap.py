"""The compiled engine's event heap: a binary heap of (time, sequence) in arrays, its size and the
next sequence number kept in the loop's integer globals."""

from __future__ import annotations

from numba import njit

from .compiled_jit import compiled

J_SEQ, J_HSIZE = 1, 2  # in the loop's integer globals (compiled_loop.J_*)


@compiled
def push(ht, hs, hw, hk, GI, t, w, k):
    """Schedule worker ``w``'s state ``k`` at ``t`` (ties in the order scheduled)."""
    n = GI[J_HSIZE]
    seq = GI[J_SEQ]
    GI[J_SEQ] = seq + 1
    GI[J_HSIZE] = n + 1
    while n > 0:  # sift up
        p = (n - 1) >> 1
        if ht[p] < t or (ht[p] == t and hs[p] < seq):
            break
        ht[n], hs[n], hw[n], hk[n] = ht[p], hs[p], hw[p], hk[p]
        n = p
    ht[n], hs[n], hw[n], hk[n] = t, seq, w, k


@njit(cache=True, _nrt=False, inline="always")
def _sift_down(ht, hs, hw, hk, i, n, lt, ls, lw, lk):
    """Place the entry ``(lt, ls, lw, lk)`` at or below slot ``i`` of a heap of ``n`` entries."""
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and (ht[c + 1] < ht[c] or (ht[c + 1] == ht[c] and hs[c + 1] < hs[c])):
            c += 1
        if lt < ht[c] or (lt == ht[c] and ls < hs[c]):
            break
        ht[i], hs[i], hw[i], hk[i] = ht[c], hs[c], hw[c], hk[c]
        i = c
    ht[i], hs[i], hw[i], hk[i] = lt, ls, lw, lk


@compiled
def pop(ht, hs, hw, hk, GI):
    """The earliest event: ``(time, worker, state)``."""
    t, w, k = ht[0], hw[0], hk[0]
    n = GI[J_HSIZE] - 1
    GI[J_HSIZE] = n
    _sift_down(ht, hs, hw, hk, 0, n, ht[n], hs[n], hw[n], hk[n])
    return t, w, k


@compiled
def heapify(ht, hs, hw, hk, n):
    """Order the first ``n`` entries as a heap again (after entries were dropped)."""
    for top in range(n // 2 - 1, -1, -1):
        _sift_down(ht, hs, hw, hk, top, n, ht[top], hs[top], hw[top], hk[top])
