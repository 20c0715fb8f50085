"""The compiled pilot's serving engines (numba): :mod:`.serving`'s continuous batching, KV-cache
admission, LRU prefix cache and routing, transcribed operation for operation (the same float
arithmetic in the same order), on the arrays of :mod:`.pilot_state`.

An engine is a state machine: idle (waiting for a request), in a prefill iteration, in a closed-form
run of decode iterations (which a request's arrival cuts at the next boundary), or in that run's
tail. Each state's end is an event on the pilot's heap, tagged with the engine's epoch so that the
end of a run cut short is ignored."""

from __future__ import annotations

import math

from .compiled_heap import push as heap_push
from .compiled_jit import compiled
from .pilot_state import *  # the state's names
from .turn_seconds import prefill_seconds as prefill_of


@compiled
def push(S, t, target, kind, epoch):
    """Schedule event ``kind`` of ``target`` (a body, or ``n + engine``) at ``t``."""
    heap_push(S[S_HT], S[S_HS], S[S_HW], S[S_HK], S[S_GI], t, target, kind + 16 * epoch)


@compiled
def iteration(S, prefill, decodes, context, pairs, cached):
    """An iteration's seconds (``IterationTime.__call__``)."""
    P = S[S_P]
    if P[P_HAS_PCA] != 0.0:
        att = P[P_PPA] * (pairs - cached) + P[P_PCA] * cached
    else:
        att = P[P_PPA] * pairs
    return P[P_BASE] + P[P_PPT] * prefill + att + P[P_PD] * decodes + P[P_PCT] * context


@compiled
def cached_pairs(S, chunk, prefix):
    below = S[S_P][P_BELOW]
    if below == 0.0 or chunk < below:
        return float(chunk * prefix)
    return 0.0


@compiled
def prefill_seconds(S, tokens, prefix):
    P = S[S_P]
    return prefill_of(P[P_PPT], P[P_PPA], P[P_PCA], P[P_HAS_PCA] != 0.0, int(P[P_BELOW]), tokens, prefix)


@compiled
def run_time(m, t0, slope):
    return m * t0 + slope * m * (m - 1) / 2


@compiled
def iterations_by(elapsed, t0, slope):
    a, b = slope / 2, t0 - slope / 2
    if a <= 0:
        m = int(elapsed / t0)
    else:
        m = int((-b + math.sqrt(b * b + 4 * a * elapsed)) / (2 * a))
    while m > 0 and run_time(m, t0, slope) > elapsed:
        m -= 1
    return m


# ------------------------------------------------------------ KV occupancy, prefixes, homes
@compiled
def mark(S, e):
    EI, EF = S[S_EI], S[S_EF]
    now = S[S_GF][G_NOW]
    dt = now - EF[e, EF_T]
    EF[e, EF_AH] += EI[e, E_HELD] * dt
    EF[e, EF_AU] += (EI[e, E_HELD] + EI[e, E_CACHED]) * dt
    EF[e, EF_T] = now


@compiled
def unlink(S, e, traj):
    """Take trajectory ``traj``'s idle prefix out of engine ``e``'s LRU list."""
    EI, LP, LN, LT = S[S_EI], S[S_LP], S[S_LN], S[S_LT]
    p, q = LP[e, traj], LN[e, traj]
    if p >= 0:
        LN[e, p] = q
    else:
        EI[e, E_HEAD] = q
    if q >= 0:
        LP[e, q] = p
    else:
        EI[e, E_TAIL] = p
    EI[e, E_CACHED] -= LT[e, traj]
    LT[e, traj] = 0


@compiled
def cache_prefix(S, e, traj, tokens):
    """Keep ``traj``'s prefix as the most recently used."""
    EI, LP, LN, LT = S[S_EI], S[S_LP], S[S_LN], S[S_LT]
    tail = EI[e, E_TAIL]
    LP[e, traj], LN[e, traj] = tail, -1
    if tail >= 0:
        LN[e, tail] = traj
    else:
        EI[e, E_HEAD] = traj
    EI[e, E_TAIL] = traj
    LT[e, traj] = tokens
    EI[e, E_CACHED] += tokens


@compiled
def rehome(S, traj, e):
    HOME, HOMED = S[S_HOME], S[S_HOMED]
    old = HOME[traj]
    if old >= 0:
        HOMED[old] -= 1
    HOME[traj] = e
    HOMED[e] += 1


@compiled
def close(S, traj):
    """Trajectory ``traj`` ended: it no longer counts where its prefix is."""
    HOME, HOMED = S[S_HOME], S[S_HOMED]
    old = HOME[traj]
    if old >= 0:
        HOMED[old] -= 1
    HOME[traj] = -1


# ------------------------------------------------------------ requests in and out
@compiled
def wake(S, e):
    """``_wake.succeed()`` unless triggered: an idle engine starts, a decode run is cut."""
    EI = S[S_EI]
    if EI[e, E_WAKE] != 0:
        return
    EI[e, E_WAKE] = 1
    n = int(S[S_P][P_N])
    now = S[S_GF][G_NOW]
    if EI[e, E_STATE] == IDLE:
        push(S, now, n + e, EV_WAKE, EI[e, E_EPOCH])
    elif EI[e, E_STATE] == DECODE:
        push(S, now, n + e, EV_INTR, EI[e, E_EPOCH])


@compiled
def request(S, traj, context, output, reusable, fresh):
    """Send a turn to an engine (sticky to its prefix's engine, else the least loaded); its id."""
    GI, RI, RF, EI, P = S[S_GI], S[S_RI], S[S_RF], S[S_EI], S[S_P]
    if GI[J_NFREE] > 0:  # a training loop's: an id its body is done with
        GI[J_NFREE] -= 1
        r = S[S_FREE][GI[J_NFREE]]
    else:
        r = GI[J_NREQ]
        if r >= RI.shape[0] - 1:  # more requests than an attempt has steps: never (the run stops)
            GI[J_ERR] = 2
        else:
            GI[J_NREQ] = r + 1
    RI[r, R_TRAJ], RI[r, R_CONTEXT], RI[r, R_OUTPUT] = traj, max(context, 1), output
    RI[r, R_REUSABLE], RI[r, R_FRESH] = reusable, fresh
    RI[r, R_REUSE] = RI[r, R_PREFILL] = RI[r, R_DECODE] = RI[r, R_CTX] = 0
    RI[r, R_BLOCKED] = RI[r, R_DONE] = RI[r, R_ABORTED] = 0
    RF[r, RF_ARRIVAL] = S[S_GF][G_NOW]
    RF[r, RF_ADMITTED] = RF[r, RF_FIRST] = RF[r, RF_END] = math.nan
    e = S[S_HOME][traj] if P[P_STICKY] != 0.0 else -1
    if e < 0 or S[S_LT][e, traj] == 0:
        HOMED = S[S_HOMED]
        e = 0
        for k in range(1, EI.shape[0]):
            lk, le = EI[k, E_NRUN] + EI[k, E_QN], EI[e, E_NRUN] + EI[e, E_QN]
            if lk < le or (lk == le and HOMED[k] < HOMED[e]):
                e = k
    RI[r, R_ENGINE] = e
    WQ = S[S_WQ]
    WQ[e, (EI[e, E_QH] + EI[e, E_QN]) % WQ.shape[1]] = r
    EI[e, E_QN] += 1
    wake(S, e)
    return r


@compiled
def remove_running(S, e, r):
    EI, RUN = S[S_EI], S[S_RUN]
    m = EI[e, E_NRUN]
    j = 0
    while RUN[e, j] != r:
        j += 1
    for q in range(j, m - 1):
        RUN[e, q] = RUN[e, q + 1]
    EI[e, E_NRUN] = m - 1


@compiled
def cancel(S, r):
    """A trajectory stopped at its deadline: its request leaves, its tokens are freed."""
    RI, EI = S[S_RI], S[S_EI]
    e = RI[r, R_ENGINE]
    if e < 0 or RI[r, R_DONE] != 0 or unqueue(S, e, r):
        return
    RUN = S[S_RUN]
    for j in range(EI[e, E_NRUN]):
        if RUN[e, j] == r:
            mark(S, e)
            remove_running(S, e, r)
            EI[e, E_HELD] -= RI[r, R_CONTEXT] + RI[r, R_OUTPUT]
            RI[r, R_ENGINE] = -1
            forget(S, e, r)
            wake(S, e)
            return


@compiled
def unqueue(S, e, r):
    """Take request ``r`` out of engine ``e``'s waiting queue: True when it was waiting there."""
    EI, WQ = S[S_EI], S[S_WQ]
    qc = WQ.shape[1]
    h, m = EI[e, E_QH], EI[e, E_QN]
    for j in range(m):
        if WQ[e, (h + j) % qc] == r:
            for q in range(j, m - 1):
                WQ[e, (h + q) % qc] = WQ[e, (h + q + 1) % qc]
            EI[e, E_QN] = m - 1
            return True
    return False


@compiled
def forget(S, e, r):
    """Take a cancelled request out of the iteration in progress (which skips it as it ends; out
    of it, its id can be reused at once)."""
    EI, BD, BA, BT = S[S_EI], S[S_BD], S[S_BA], S[S_BT]
    m = 0
    for j in range(EI[e, E_NB]):
        if BD[e, j] != r:
            BD[e, m] = BD[e, j]
            m += 1
    EI[e, E_NB] = m
    m = 0
    for j in range(EI[e, E_NA]):
        if BA[e, j] != r:
            BA[e, m], BT[e, m] = BA[e, j], BT[e, j]
            m += 1
    EI[e, E_NA] = m


@compiled
def release(S, r):
    """A training loop's body is done with request ``r``: its id can be reused."""
    GI = S[S_GI]
    S[S_FREE][GI[J_NFREE]] = r
    GI[J_NFREE] += 1


@compiled
def generated(S, r):
    """Output tokens request ``r`` generated so far (the prefill's iteration yields the first)."""
    if math.isnan(S[S_RF][r, RF_FIRST]):
        return 0
    return S[S_RI][r, R_OUTPUT] - S[S_RI][r, R_DECODE]


@compiled
def abort(S, r):
    """Interrupt request ``r`` at a weight sync (``ServingTier.abort``): a waiting one leaves at
    once, a running one at the end of the iteration in progress (:func:`reap`)."""
    RI, EI = S[S_RI], S[S_EI]
    e = RI[r, R_ENGINE]
    if e < 0 or RI[r, R_DONE] != 0 or RI[r, R_ABORTED] != 0:
        return
    RI[r, R_ABORTED] = 1
    EI[e, E_ABORTS] += 1
    if unqueue(S, e, r):
        S[S_RF][r, RF_END] = S[S_GF][G_NOW]
        RI[r, R_DONE] = 1
        traj = RI[r, R_TRAJ]
        push(S, S[S_GF][G_NOW], traj, EV_DONE, S[S_TI][traj, B_EPOCH])
    else:
        wake(S, e)


@compiled
def reap(S, e):
    """After an iteration: the running requests aborted meanwhile leave, their tokens out kept."""
    EI, RI, RUN = S[S_EI], S[S_RI], S[S_RUN]
    if EI[e, E_ABORTS] == 0:  # none ever (only a training loop's weight syncs abort)
        return
    now = S[S_GF][G_NOW]
    j = 0
    while j < EI[e, E_NRUN]:
        r = RUN[e, j]
        if RI[r, R_ABORTED] == 0:
            j += 1
            continue
        mark(S, e)
        remove_running(S, e, r)
        EI[e, E_HELD] -= RI[r, R_CONTEXT] + RI[r, R_OUTPUT]
        S[S_RF][r, RF_END] = now
        S[S_GI][J_DECODE] += max(generated(S, r) - 1, 0)
        RI[r, R_DONE] = 1
        traj = RI[r, R_TRAJ]
        push(S, now, traj, EV_DONE, S[S_TI][traj, B_EPOCH])


@compiled
def clear_prefix_cache(S):
    """New weights: every engine's idle prefixes are dropped (``ServingTier.clear_prefix_cache``)."""
    EI, LP, LN, LT = S[S_EI], S[S_LP], S[S_LN], S[S_LT]
    for e in range(EI.shape[0]):
        mark(S, e)
        t = EI[e, E_HEAD]
        while t >= 0:
            q = LN[e, t]
            LP[e, t], LN[e, t], LT[e, t] = -1, -1, 0
            t = q
        EI[e, E_HEAD] = EI[e, E_TAIL] = -1
        EI[e, E_CACHED] = 0


@compiled
def admitted(S, r):
    """The tier's counts and admission wait of a request admitted."""
    GI, RI, RF = S[S_GI], S[S_RI], S[S_RF]
    S[S_KVW][GI[J_REQUESTS]] = RF[r, RF_ADMITTED] - RF[r, RF_ARRIVAL]
    GI[J_REQUESTS] += 1
    GI[J_QUEUED] += RI[r, R_BLOCKED]
    GI[J_COMPACTED] += RI[r, R_FRESH]
    GI[J_PREFILL] += RI[r, R_PREFILL]
    reusable, reuse = RI[r, R_REUSABLE], RI[r, R_REUSE]
    if reusable != 0 and RI[r, R_FRESH] == 0:
        GI[J_REUSABLE] += reusable
        GI[J_REUSED] += min(reuse, reusable)
        lost = max(reusable - reuse, 0)
        GI[J_REPREFILLED] += lost
        S[S_GF][G_REPREFILL_S] += prefill_seconds(S, lost, reuse)


@compiled
def block(S, e):
    """The head of the queue does not fit: it and everything behind it waited."""
    EI, WQ, RI = S[S_EI], S[S_WQ], S[S_RI]
    for j in range(EI[e, E_QN]):
        RI[WQ[e, (EI[e, E_QH] + j) % WQ.shape[1]], R_BLOCKED] = 1


@compiled
def admit(S, e, limit):
    """Admit waiting requests in order while they fit (at most ``limit``; -1: no limit), evicting
    idle prefixes LRU."""
    EI, RI, RF, P, LT, WQ, RUN = S[S_EI], S[S_RI], S[S_RF], S[S_P], S[S_LT], S[S_WQ], S[S_RUN]
    cap = int(P[P_KV])
    start = EI[e, E_NRUN]
    qc = WQ.shape[1]
    while EI[e, E_QN] > 0 and (limit < 0 or EI[e, E_NRUN] - start < limit):
        if EI[e, E_NRUN] >= P[P_MAX_RUN]:
            block(S, e)
            return
        r = WQ[e, EI[e, E_QH]]
        traj = RI[r, R_TRAJ]
        own = LT[e, traj]
        context = RI[r, R_CONTEXT]
        reuse = 0 if (RI[r, R_FRESH] != 0 or P[P_PREFIX] == 0.0) else min(own, context - 1)
        hold = context + RI[r, R_OUTPUT]
        if hold > cap - EI[e, E_HELD]:
            block(S, e)
            return
        mark(S, e)
        if own:
            unlink(S, e, traj)
        while hold > cap - EI[e, E_HELD] - EI[e, E_CACHED]:  # evict idle prefixes, least recent first
            unlink(S, e, EI[e, E_HEAD])
            S[S_GI][J_EVICTED] += 1
        EI[e, E_QH] = (EI[e, E_QH] + 1) % qc
        EI[e, E_QN] -= 1
        EI[e, E_HELD] += hold
        EI[e, E_PEAK] = max(EI[e, E_PEAK], EI[e, E_HELD] + EI[e, E_CACHED])
        RI[r, R_REUSE], RI[r, R_PREFILL] = reuse, context - reuse
        RF[r, RF_ADMITTED] = S[S_GF][G_NOW]
        RUN[e, EI[e, E_NRUN]] = r
        EI[e, E_NRUN] += 1
        admitted(S, r)


@compiled
def finish(S, e, r):
    """Request ``r``'s last token is out: its prefix is cached, its body resumes."""
    EI, RI, RF, GI = S[S_EI], S[S_RI], S[S_RF], S[S_GI]
    now = S[S_GF][G_NOW]
    mark(S, e)
    remove_running(S, e, r)
    EI[e, E_HELD] -= RI[r, R_CONTEXT] + RI[r, R_OUTPUT]
    traj = RI[r, R_TRAJ]
    if S[S_P][P_PREFIX] != 0.0:
        if S[S_LT][e, traj] > 0:
            unlink(S, e, traj)
        cache_prefix(S, e, traj, RI[r, R_CTX])
        rehome(S, traj, e)
    RF[r, RF_END] = now
    out = RI[r, R_OUTPUT]
    GI[J_DECODE] += out - 1
    over = S[S_P][P_OVERHEAD]
    k = GI[J_NFIN]
    S[S_LAT][k] = RF[r, RF_END] - RF[r, RF_ARRIVAL] + over
    S[S_TTFT][k] = RF[r, RF_FIRST] - RF[r, RF_ARRIVAL] + over
    GI[J_NFIN] = k + 1
    if out > 1:
        S[S_TPOT][GI[J_NTPOT]] = (RF[r, RF_END] - RF[r, RF_FIRST]) / (out - 1)
        GI[J_NTPOT] += 1
    RI[r, R_DONE] = 1
    push(S, now, traj, EV_DONE, S[S_TI][traj, B_EPOCH])


# ------------------------------------------------------------ iterations
@compiled
def go(S, e, woke):
    """The top of the engine's loop: admit, then begin an iteration, a decode run, or wait."""
    EI, EF, RI, RUN, BD, BA, BT, P = S[S_EI], S[S_EF], S[S_RI], S[S_RUN], S[S_BD], S[S_BA], S[S_BT], S[S_P]
    now = S[S_GF][G_NOW]
    n = int(P[P_N])
    admit(S, e, 1 if woke else -1)
    EI[e, E_EPOCH] += 1
    nrun = EI[e, E_NRUN]
    if nrun == 0:
        EI[e, E_STATE], EI[e, E_WAKE] = IDLE, 0
        if EI[e, E_QN] > 0:
            S[S_GI][J_ERR] = 1  # a waiting request can never fit this engine's KV cache
        return
    nb, ctx, prefills = 0, 0, False
    for j in range(nrun):
        r = RUN[e, j]
        if RI[r, R_PREFILL] == 0:
            BD[e, nb] = r
            nb += 1
            ctx += RI[r, R_CTX]
        else:
            prefills = True
    EI[e, E_NB] = nb
    if prefills:  # one iteration with a chunk of prefill
        budget, na, pairs, cached, tokens = max(int(P[P_MAX_BATCH]) - nb, 0), 0, 0.0, 0.0, 0
        for j in range(nrun):
            r = RUN[e, j]
            left = RI[r, R_PREFILL]
            if left == 0:
                continue
            take = min(left, budget)
            if take <= 0:
                break
            BA[e, na], BT[e, na] = r, take
            na += 1
            budget -= take
            pairs += take * (RI[r, R_CONTEXT] - left + take / 2)  # causal attention
            cached += cached_pairs(S, take, RI[r, R_REUSE])
            tokens += take
        EI[e, E_NA] = na
        dt = iteration(S, tokens, nb, ctx, pairs, cached)
        EF[e, EF_DT] = dt
        EI[e, E_STATE] = PREFILL
        push(S, now + dt, n + e, EV_ITER, EI[e, E_EPOCH])
        return
    k = RI[BD[e, 0], R_DECODE]  # decode only: k iterations until the first decode completes
    for j in range(1, nb):
        k = min(k, RI[BD[e, j], R_DECODE])
    t0 = iteration(S, 0, nb, ctx, 0.0, 0.0)
    slope = P[P_PCT] * nb
    EF[e, EF_START], EF[e, EF_T0], EF[e, EF_SLOPE] = now, t0, slope
    EI[e, E_K], EI[e, E_WAKE], EI[e, E_STATE] = k, 0, DECODE
    run = run_time(k, t0, slope)
    EF[e, EF_RUN] = run
    push(S, now + run, n + e, EV_RUNEND, EI[e, E_EPOCH])


@compiled
def step(S, e, m, seconds):
    """``m`` iterations lasting ``seconds`` in all: every decode of the batch gains ``m`` tokens."""
    EI, RI, BD = S[S_EI], S[S_RI], S[S_BD]
    S[S_EF][e, EF_BUSY] += seconds
    EI[e, E_ITERS] += m
    for j in range(EI[e, E_NB]):
        r = BD[e, j]
        if RI[r, R_ENGINE] < 0:  # cancelled meanwhile
            continue
        RI[r, R_DECODE] -= m
        RI[r, R_CTX] += m
        if RI[r, R_DECODE] == 0:
            finish(S, e, r)


@compiled
def on_engine(S, e, kind):
    """Engine ``e``'s event ``kind`` (its epoch checked by the caller)."""
    EI, EF, RI, BA, BT = S[S_EI], S[S_EF], S[S_RI], S[S_BA], S[S_BT]
    now = S[S_GF][G_NOW]
    if kind == EV_WAKE:
        go(S, e, True)
    elif kind == EV_ITER:
        step(S, e, 1, EF[e, EF_DT])
        for j in range(EI[e, E_NA]):
            r = BA[e, j]
            if RI[r, R_ENGINE] < 0:
                continue
            RI[r, R_PREFILL] -= BT[e, j]
            if RI[r, R_PREFILL] == 0:  # the prefill's iteration yields the first token
                S[S_RF][r, RF_FIRST] = now
                RI[r, R_CTX] = RI[r, R_CONTEXT] + 1
                RI[r, R_DECODE] = RI[r, R_OUTPUT] - 1
                if RI[r, R_DECODE] == 0:
                    finish(S, e, r)
        reap(S, e)
        go(S, e, False)
    elif kind == EV_RUNEND or kind == EV_TAIL:
        step(S, e, EI[e, E_K], now - EF[e, EF_START])
        reap(S, e)
        go(S, e, False)
    elif kind == EV_INTR:  # a request came: stop at the next boundary
        start, t0, slope = EF[e, EF_START], EF[e, EF_T0], EF[e, EF_SLOPE]
        done = min(iterations_by(now - start, t0, slope) + 1, EI[e, E_K])
        EI[e, E_K], EI[e, E_STATE] = done, TAIL
        EI[e, E_EPOCH] += 1
        push(S, now + max(start + run_time(done, t0, slope) - now, 0.0), int(S[S_P][P_N]) + e, EV_TAIL,
             EI[e, E_EPOCH])  # fmt: skip
