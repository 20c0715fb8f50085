"""A trajectory's lifecycle around its body in the compiled loop (numba), one handler per state a
worker's event runs: the next trajectory, its attempts (quota, create-rate token, the create on the
least-loaded host at ``base x m(load at its start)``, failures and retries after their backoff),
then, after the body (:mod:`.compiled_body`), the teardown and the trajectory's row. Each handler
returns the state the worker goes on to at once, or ``STOP`` when it waits for an event (or for
Python). Named state: :mod:`.compiled_state`; the dispatch: :mod:`.compiled_loop`."""

from __future__ import annotations

import numpy as np
from numba import njit

from . import records as rec
from .compiled_core import batch, load, release, request, schedule
from .compiled_groups import dequeue, finished
from .compiled_ops import factor, fail_rate
from .compiled_state import *  # the state's names


@njit(cache=True, _nrt=False, inline="always")
def on_next(S, w, now):
    """The worker's next trajectory: the next queued member of a group (the training loop's), else
    the next of its batch or of the workload once its chunk's inputs are drawn, at its arrival."""
    WI = S[S_WI][w]
    GI = S[S_GI]
    P = S[S_P]
    lm = P[P_LOOP] != 0.0  # the training loop's cell (.compiled_training)
    if lm:  # the next queued member of a group
        i = dequeue(S, w)
        if i < 0:
            return STOP
        WI[I_I] = i
        WI[I_DET] = 0
        return K_START
    if GI[J_NEXT] >= GI[J_BHI]:
        if P[P_BATCH] > 0:
            GI[J_ACTIVE] -= 1
            if GI[J_ACTIVE] == 0:
                batch(S, K_BATCH)
        return STOP
    if GI[J_NEXT] >= GI[J_READY]:  # its chunk's inputs are still being drawn
        request(S, w, R_INPUTS, K_NEXT)
        return STOP
    i = GI[J_NEXT]
    GI[J_NEXT] = i + 1
    WI[I_I] = i
    WI[I_DET] = 0
    if P[P_TIMED] != 0.0 and S[S_ARR][i] > now:
        schedule(S, S[S_ARR][i], w, K_START)
        return STOP
    return K_START


@njit(cache=True, _nrt=False, inline="always")
def on_start(S, w, now):
    """A trajectory starts: its deadline, its costs at zero."""
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    P = S[S_P]
    WF[F_START] = now
    WF[F_DEADLINE] = now + P[P_TIMEOUT]
    for f in (F_WAITED, F_WORKER, F_SANDBOX, F_LLM, F_OVER, F_TD, F_LOST, F_LAT):
        WF[f] = 0.0
    WI[I_ATT], WI[I_STATUS], WI[I_STEPS] = 0, OK, 0
    return K_ATTEMPT


@njit(cache=True, _nrt=False, inline="always")
def on_attempt(S, w, now):
    """An attempt: the first reads the trajectory's draws, a retry asks Python for its own."""
    i = S[S_WI][w, I_I]
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    IN = S[S_IN]
    WI[I_ATT] += 1
    if WI[I_ATT] == 1:
        WF[F_COLD], WF[F_UC], WF[F_UE] = IN[i, C_COLD], IN[i, C_UC], IN[i, C_UE]
        WF[F_TDB], WF[F_UT] = IN[i, C_TD], IN[i, C_UT]
    elif WI[I_HAVE_RD] == 0:
        request(S, w, R_RETRY, K_ATTEMPT2)
        return STOP
    return K_ATTEMPT2


@njit(cache=True, _nrt=False, inline="always")
def on_attempt_drawn(S, w, now):
    """The attempt's draws are in: it waits for a sandbox from here."""
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    WI[I_HAVE_RD] = 0
    WF[F_T0] = now
    return K_QUOTA


@njit(cache=True, _nrt=False, inline="always")
def on_quota(S, w, now):
    """A sandbox from the quota, or a place in its queue (a release hands one over)."""
    GI = S[S_GI]
    P = S[S_P]
    if P[P_QUOTA] != 0.0:
        if GI[J_AVAIL] > 0 and GI[J_QL] == 0:
            GI[J_AVAIL] -= 1
        else:
            qq = S[S_QQ]
            qq[(GI[J_QH] + GI[J_QL]) % qq.size] = w
            GI[J_QL] += 1
            return STOP
    return K_TOKEN


@njit(cache=True, _nrt=False, inline="always")
def on_token(S, w, now):
    """A create-rate token, or a wait for the next one."""
    G = S[S_G]
    P = S[S_P]
    if P[P_RATE] > 0:
        t = max(now, G[G_TOKEN])
        G[G_TOKEN] = t + 1.0 / P[P_RATE]
        if t - now > 0:
            schedule(S, t, w, K_PLACE)
            return STOP
    return K_PLACE


@njit(cache=True, _nrt=False, inline="always")
def on_place(S, w, now):
    """The create, on the least-loaded host: its latency at the load it starts in, whether it fails."""
    i = S[S_WI][w, I_I]
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    GI = S[S_GI]
    P = S[S_P]
    sand = S[S_SAND]
    BY = S[S_BY]
    FP = S[S_FP]
    TAB = S[S_TAB]
    TSZ = S[S_TSZ]
    XS = S[S_XS]
    YS = S[S_YS]
    host = int(np.argmin(sand))
    sand[host] += 1
    GI[J_ALIVE] += 1
    GI[J_PEAK] = max(GI[J_PEAK], GI[J_ALIVE])
    WF[F_WAITED] += now - WF[F_T0]
    scope = P[P_SCOPE]
    d = host if scope == 0 else (0 if scope == 1 else i % int(P[P_CLIENTS]))
    WI[I_HOST], WI[I_DOM] = host, d
    WI[I_FAILS] = WF[F_UC] < fail_rate(XS[PH_CREATE], YS[PH_CREATE], load(S, d, -1) + 1.0)
    BY[PH_CREATE, d] += 1.0
    lat = WF[F_COLD] * factor(FP[PH_CREATE], TAB, TSZ[PH_CREATE], load(S, d, PH_CREATE))
    WF[F_TDLAT] = lat
    schedule(S, now + lat, w, K_CREATE_END)
    return STOP


@njit(cache=True, _nrt=False, inline="always")
def on_created(S, w, now):
    """The create ends: a failed one is billed and lost, and the trajectory tries again."""
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    P = S[S_P]
    BY = S[S_BY]
    BY[PH_CREATE, WI[I_DOM]] -= 1.0
    lat = WF[F_TDLAT]
    WF[F_LAT] = lat
    WF[F_WORKER] += lat
    if WI[I_FAILS]:
        release(S, WI[I_HOST], now)
        WF[F_LOST] += lat
        WF[F_SANDBOX] += max(lat, P[P_MINBILL])
        return K_AGAIN
    WF[F_BILLED] = lat
    return K_BODY


@njit(cache=True, _nrt=False, inline="always")
def on_again(S, w, now):
    """Another attempt, after its backoff; the trajectory fails once its retries ran out."""
    WI = S[S_WI][w]
    P = S[S_P]
    att = WI[I_ATT]
    if att > P[P_RETRIES]:
        WI[I_STATUS] = FAILED
        return K_FINISH
    if P[P_BACKOFF] > 0:
        schedule(S, now + P[P_BACKOFF] * 2.0 ** (att - 1), w, K_ATTEMPT)
        return STOP
    return K_ATTEMPT


@njit(cache=True, _nrt=False, inline="always")
def on_teardown(S, w, now):
    """The teardown: once, twice when it fails; under load, each operation at the load it starts in."""
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    BY = S[S_BY]
    FP = S[S_FP]
    TAB = S[S_TAB]
    TSZ = S[S_TSZ]
    XS = S[S_XS]
    YS = S[S_YS]
    P = S[S_P]
    loaded = P[P_LOADED] != 0.0
    d = WI[I_DOM]
    again = WF[F_UT] < fail_rate(XS[PH_TEARDOWN], YS[PH_TEARDOWN], load(S, d, -1) + 1.0)
    WF[F_TTAIL] = now
    if not loaded:
        schedule(S, now + WF[F_TDB] * (2.0 if again else 1.0), w, K_TD_END)
        return STOP
    WI[I_TDN] = 2 if again else 1
    BY[PH_TEARDOWN, d] += 1.0
    schedule(
        S,
        now + WF[F_TDB] * factor(FP[PH_TEARDOWN], TAB, TSZ[PH_TEARDOWN], load(S, d, PH_TEARDOWN)),
        w,
        K_TD_OP_END,
    )
    return STOP


@njit(cache=True, _nrt=False, inline="always")
def on_teardown_op_end(S, w, now):
    """A loaded teardown's operation ends: the second one, if it failed."""
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    BY = S[S_BY]
    FP = S[S_FP]
    TAB = S[S_TAB]
    TSZ = S[S_TSZ]
    d = WI[I_DOM]
    BY[PH_TEARDOWN, d] -= 1.0
    WI[I_TDN] -= 1
    if WI[I_TDN] > 0:
        BY[PH_TEARDOWN, d] += 1.0
        schedule(
            S,
            now + WF[F_TDB] * factor(FP[PH_TEARDOWN], TAB, TSZ[PH_TEARDOWN], load(S, d, PH_TEARDOWN)),
            w,
            K_TD_OP_END,
        )
        return STOP
    return K_TD_END


@njit(cache=True, _nrt=False, inline="always")
def on_teardown_end(S, w, now):
    """The sandbox is gone: the attempt's costs; a lost sandbox's trajectory tries again."""
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    P = S[S_P]
    td = now - WF[F_TTAIL]
    WF[F_TD] = td
    release(S, WI[I_HOST], now)
    llm, busy = WF[F_LLMB], WF[F_RT]
    WF[F_LLM] += llm
    WF[F_WORKER] += busy - llm + td
    WF[F_SANDBOX] += max(WF[F_BILLED] + busy + td, P[P_MINBILL])
    if WI[I_STATUS] == LOST:
        WF[F_LOST] += WF[F_LAT] + busy - llm + td
        return K_AGAIN
    return K_FINISH


@njit(cache=True, _nrt=False, inline="always")
def on_finish(S, w, now):
    """The trajectory's row (records.ROW); in a training loop, its group's accounting."""
    i = S[S_WI][w, I_I]
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    GI = S[S_GI]
    OUT = S[S_OUT]
    P = S[S_P]
    lm = P[P_LOOP] != 0.0  # the training loop's cell (.compiled_training)
    failed = WI[I_STATUS] == FAILED
    row = OUT[i]  # the trajectory's row (records.ROW)
    row[rec.R_START], row[rec.R_END], row[rec.R_COLD] = WF[F_START], now, WF[F_LAT]
    row[rec.R_WAIT], row[rec.R_WORKER], row[rec.R_SANDBOX] = WF[F_WAITED], WF[F_WORKER], WF[F_SANDBOX]
    row[rec.R_LLM], row[rec.R_ATTEMPTS], row[rec.R_STATUS] = WF[F_LLM], WI[I_ATT], WI[I_STATUS]
    row[rec.R_WARM], row[rec.R_STEPS], row[rec.R_LOST] = 0.0, WI[I_STEPS], WF[F_LOST]
    row[rec.R_OVERHEAD] = 0.0 if failed else WF[F_OVER]
    row[rec.R_TEARDOWN] = 0.0 if failed else WF[F_TD]
    GI[J_DONE] += 1
    WI[I_DET] = 0
    if lm and finished(S, w, i, WI[I_STATUS], row[rec.R_WORKER], row[rec.R_SANDBOX], row[rec.R_LLM]):
        return STOP
    return K_NEXT
