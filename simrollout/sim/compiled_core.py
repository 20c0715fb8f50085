"""The compiled loop's shared steps (numba): the event heap over the state's slots, the load a
domain's operations see, a body's multipliers, a sandbox's release (the quota's queue) and the sync
batches. Named state: :mod:`.compiled_state`."""

from __future__ import annotations

from .compiled_heap import heapify, pop, push
from .compiled_jit import compiled
from .compiled_ops import factor
from .compiled_state import *  # the state's names


@compiled
def schedule(S, t, w, k):
    if S[S_GI][J_HSIZE] >= S[S_HT].size:  # full of cut segments' old ends (the training loop's): drop them
        compact(S)
    push(S[S_HT], S[S_HS], S[S_HW], S[S_HK], S[S_GI], t, w, k)


@compiled
def next_event(S):
    return pop(S[S_HT], S[S_HS], S[S_HW], S[S_HK], S[S_GI])


@compiled
def load(S, d, phase):
    """Operations in flight in domain ``d`` (with the running bodies' expected execs), as
    ``phase`` sees them (-1: each counts one)."""
    BY, EXL, P, W = S[S_BY], S[S_EXL], S[S_P], S[S_W]
    if phase < 0 or P[P_WEIGHTS] == 0.0:
        return BY[PH_CREATE, d] + BY[PH_EXEC, d] + BY[PH_TEARDOWN, d] + EXL[d]
    return (
        W[phase, PH_CREATE] * BY[PH_CREATE, d]
        + W[phase, PH_EXEC] * (BY[PH_EXEC, d] + EXL[d])
        + W[phase, PH_TEARDOWN] * BY[PH_TEARDOWN, d]
    )


@compiled
def multipliers(S, d):
    """Generation and exec-overhead multipliers of a body in domain ``d``."""
    curve, FP, TAB, TSZ, GI = S[S_CURVE], S[S_FP], S[S_TAB], S[S_TSZ], S[S_GI]
    x_l = 1.0
    if curve.size:
        x_l = curve[min(GI[J_BODIES], curve.size - 1)]
    return x_l, factor(FP[PH_EXEC], TAB, TSZ[PH_EXEC], 1.0 + load(S, d, PH_EXEC))


@compiled
def release(S, host, now):
    GI, P, sand, qq = S[S_GI], S[S_P], S[S_SAND], S[S_QQ]
    sand[host] -= 1
    GI[J_ALIVE] -= 1
    if P[P_QUOTA] != 0.0:
        if GI[J_QL] > 0:  # the longest waiting get takes it
            w2 = qq[GI[J_QH]]
            GI[J_QH] = (GI[J_QH] + 1) % qq.size
            GI[J_QL] -= 1
            schedule(S, now, w2, K_TOKEN)
        else:
            GI[J_AVAIL] += 1


@compiled
def request(S, w, code, kind):
    S[S_GI][J_REQ] = code
    S[S_GI][J_REQW] = w
    S[S_WI][w, I_RESUME] = kind


@compiled
def batch(S, kind):
    """Sync batches: the next batch once every worker of the last one is done."""
    G, GI, P, ARR = S[S_G], S[S_GI], S[S_P], S[S_ARR]
    n, now = int(P[P_N]), G[G_NOW]
    lo = GI[J_BNEXT]
    if lo >= n:
        return
    hi = min(lo + int(P[P_BATCH]), n)
    if kind == K_BATCH and ARR[hi - 1] > now:
        schedule(S, ARR[hi - 1], int(P[P_C]), K_BATCH_GO)
        return
    if P[P_TIMED] == 0.0:
        ARR[lo:hi] = now
    GI[J_BHI], GI[J_NEXT], GI[J_BNEXT] = hi, lo, hi
    k = min(int(P[P_C]), hi - lo)
    GI[J_ACTIVE] = k
    for w in range(k):
        schedule(S, now, w, K_NEXT)


@compiled
def compact(S):
    """Drop the heap's entries of segment ends that were cut since (the order of the rest, by
    time and sequence, is unchanged)."""
    ht, hs, hw, hk, GI = S[S_HT], S[S_HS], S[S_HW], S[S_HK], S[S_GI]
    m = 0
    for j in range(GI[J_HSIZE]):
        k = hk[j]
        if k >= EPOCH and k // EPOCH != S[S_WI][hw[j], I_EPOCH]:
            continue
        ht[m], hs[m], hw[m], hk[m] = ht[j], hs[j], hw[j], hk[j]
        m += 1
    GI[J_HSIZE] = m
    heapify(ht, hs, hw, hk, m)
