"""The compiled engine's event loop (numba): a binary heap in arrays, one rollout worker per slot
walking a trajectory through its lifecycle as a state machine: quota, create-rate token, create on
the least-loaded host (``base x m(load at its start)``), the body in segments that re-read the load
(the serving pilot's load curve and each body's luck, the host's exec load), teardown, failures,
retries after their backoff and the deadline. It returns to Python (:mod:`.compiled`) for what only
Python draws: a retry's draws and a trajectory's per-step detail.

Every function here is compiled without numba's reference counting (``_nrt=False``): nothing in
the loop allocates, and the counts' atomic operations took about 60% of its time."""

from __future__ import annotations

import numpy as np
from numba import njit

from . import records as rec
from .compiled_heap import J_HSIZE, heapify, pop, push
from .compiled_ops import cut, factor, fail_rate, first_call, first_failure, lost_at, sums

# request codes (the loop's return value); the last two are the training loop's (.compiled_training)
R_DONE, R_RETRY, R_DETAIL, R_PROGRESS, R_INPUTS, R_TIMER, R_NOTIFY = 0, 1, 2, 3, 4, 5, 6
# states of a worker (what it does when its event fires)
(K_NEXT, K_START, K_ATTEMPT, K_ATTEMPT2, K_QUOTA, K_TOKEN, K_PLACE, K_CREATE_END, K_AGAIN, K_BODY,
 K_SEGSTART, K_SEG, K_SEG_END, K_LAST, K_TAIL_END, K_REWARD, K_BODY_END, K_TD, K_TD_OP_END, K_TD_END,
 K_FINISH, K_BATCH, K_BATCH_GO, K_TIMER) = range(24)  # fmt: skip
EPOCH = 32  # a segment's end is scheduled as K_SEG_END + EPOCH x its epoch: a cut one is skipped
# a worker's floats
(F_START, F_DEADLINE, F_T0, F_LAT, F_WAITED, F_WORKER, F_SANDBOX, F_LLM, F_OVER, F_TD, F_LOST, F_BILLED,
 F_COLD, F_UC, F_UE, F_TDB, F_UT, F_BT0, F_TG, F_TO, F_TT, F_PG, F_PO, F_PT, F_SETUP, F_REWARD, F_DONE,
 F_G, F_TIME, F_O, F_SEG, F_PL, F_PE, F_XL, F_XE, F_DU, F_SG, F_SO, F_SD, F_CE, F_RG, F_RT, F_RO,
 F_LUCK, F_LLMB, F_TTAIL, F_TDLAT, F_TASK, F_SEGT0) = range(49)  # fmt: skip
NF = 49
# a worker's integers
(I_I, I_ATT, I_HOST, I_DOM, I_STATUS, I_STEPS, I_FAILS, I_FC, I_EXACT, I_PREV, I_UNITS, I_RS, I_RD, I_TDN,
 I_DET, I_DS0, I_DNS, I_DC0, I_RESUME, I_TAIL, I_HAVE_RD, I_OK, I_EPOCH, I_INSEG,
 I_VER, I_DEAD) = range(26)  # fmt: skip
NI = 26
# globals: floats, integers
G_NOW, G_TOKEN, G_TIMER, G_BOUND = 0, 1, 2, 3  # G_TIMER, G_BOUND: the training loop's
(J_NEXT, _SEQ, _HSIZE, J_AVAIL, J_ALIVE, J_PEAK, J_BODIES, J_NON, J_NOFF, J_REQ, J_REQW, J_DONE,
 J_QH, J_QL, J_ACTIVE, J_BHI, J_BNEXT, J_TOLD, J_RESUME, J_READY) = range(20)  # fmt: skip
NJ = 20
# parameters
(P_TIMEOUT, P_RETRIES, P_BACKOFF, P_RATE, P_MINBILL, P_LOADED, P_QUOTA, P_SCOPE, P_CLIENTS, P_BATCH,
 P_TIMED, P_WEIGHTS, P_N, P_C, P_LOOP) = range(15)  # fmt: skip
# input columns (records.INPUTS)
C_COLD, C_WARM, C_TD, C_UC, C_UE, C_UT, C_CALLS, C_LLM, C_OVER, C_TOOL, C_SETUP, C_REWARD, C_STEPS = range(13)
# the training loop's integers (S[32]): the policy version, group size, groups running / ready /
# trained / started, trajectories started, queued, running, the queue's head and tail, idle workers,
# workers at the closed gate, ready groups the trainer waits for, the budget ran out, requests from
# Python (cut segments: 1 cancels, 2 a barrier; open the gate; top up; set the timer), ready groups
# listed, the gate closed; sync and one_step_off: groups to start at the next top-up whatever the
# bound, the trainer woken after this instant's events scheduled before (SimPy's order); bodies
# paused by an interrupt (at_sync: interrupt; L_CUT 4 asks for one)
(L_VERSION, L_G, L_LIVE, L_NREADY, L_TRAINED, L_NEXTG, L_NEXTI, L_QUEUED, L_RUNNING, L_QH, L_QT, L_NIDLE,
 L_NGATE, L_NEED, L_EXH, L_CUT, L_OPEN, L_TOPUP, L_TIMER, L_RQN, L_GATE, L_START,
 L_DEFER, L_PAUSED) = range(24)  # fmt: skip
NL = 24
# a group's integers (S[36]) and floats (S[37]); a trajectory's loop integers (S[38])
GS_STATE, GS_LEFT, GS_MASK, GS_CAUSE = range(4)
GF_READY, GF_WORKER, GF_SANDBOX, GF_LLM, GF_N = range(5)
T_V0, T_VEND, T_STARTED, T_CANCEL, T_RESUMED = range(5)  # T_RESUMED: turns interrupted
RUNNING, READY, TRAINED, DISCARDED = range(4)  # a group's state
OK, FAILED, TIMEOUT, LOST = rec.OK, rec.FAILED, rec.TIMEOUT, rec.LOST  # a trajectory's status
CANCELLED = rec.CANCELLED
AT_RISK, STILL = 1.25, 0.01


@njit(cache=True, _nrt=False)
def _push(S, t, w, k):
    if S[3][J_HSIZE] >= S[4].size:  # full of cut segments' old ends (the training loop's): drop them
        _compact(S)
    push(S[4], S[5], S[6], S[7], S[3], t, w, k)


@njit(cache=True, _nrt=False)
def _pop(S):
    return pop(S[4], S[5], S[6], S[7], S[3])


@njit(cache=True, _nrt=False)
def _load(S, d, phase):
    """Operations in flight in domain ``d`` (with the running bodies' expected execs), as
    ``phase`` sees them (-1: each counts one)."""
    BY, EXL, P, W = S[11], S[12], S[8], S[13]
    if phase < 0 or P[P_WEIGHTS] == 0.0:
        return BY[0, d] + BY[1, d] + BY[2, d] + EXL[d]
    return W[phase, 0] * BY[0, d] + W[phase, 1] * (BY[1, d] + EXL[d]) + W[phase, 2] * BY[2, d]


@njit(cache=True, _nrt=False)
def _mult(S, d):
    """Generation and exec-overhead multipliers of a body in domain ``d``."""
    curve, FP, TAB, TSZ, GI = S[14], S[15], S[16], S[17], S[3]
    x_l = 1.0
    if curve.size:
        x_l = curve[min(GI[J_BODIES], curve.size - 1)]
    return x_l, factor(FP[1], TAB, TSZ[1], 1.0 + _load(S, d, 1))


@njit(cache=True, _nrt=False)
def _release(S, host, now):
    GI, P, sand, qq = S[3], S[8], S[10], S[18]
    sand[host] -= 1
    GI[J_ALIVE] -= 1
    if P[P_QUOTA] != 0.0:
        if GI[J_QL] > 0:  # the longest waiting get takes it
            w2 = qq[GI[J_QH]]
            GI[J_QH] = (GI[J_QH] + 1) % qq.size
            GI[J_QL] -= 1
            _push(S, now, w2, K_TOKEN)
        else:
            GI[J_AVAIL] += 1


@njit(cache=True, _nrt=False)
def _request(S, w, code, kind):
    S[3][J_REQ] = code
    S[3][J_REQW] = w
    S[1][w, I_RESUME] = kind


@njit(cache=True, _nrt=False)
def _batch(S, kind):
    """Sync batches: the next batch once every worker of the last one is done."""
    G, GI, P, ARR = S[2], S[3], S[8], S[21]
    n, now = int(P[P_N]), G[G_NOW]
    lo = GI[J_BNEXT]
    if lo >= n:
        return
    hi = min(lo + int(P[P_BATCH]), n)
    if kind == K_BATCH and ARR[hi - 1] > now:
        _push(S, ARR[hi - 1], int(P[P_C]), K_BATCH_GO)
        return
    if P[P_TIMED] == 0.0:
        ARR[lo:hi] = now
    GI[J_BHI], GI[J_NEXT], GI[J_BNEXT] = hi, lo, hi
    k = min(int(P[P_C]), hi - lo)
    GI[J_ACTIVE] = k
    for w in range(k):
        _push(S, now, w, K_NEXT)


# ------------------------------------------------------------ the training loop's part
@njit(cache=True, _nrt=False)
def _detail_ready(S, w, i):
    """The training loop's bodies read their steps from their chunk's detail, loaded whole into
    the pools (S[43]: each trajectory's steps and calls there, -1 when not loaded): True when
    trajectory ``i``'s is, its offsets then the worker's."""
    TD = S[43]
    if S[8][P_LOOP] == 0.0 or TD[i, 1] < 0:
        return False
    WI = S[1][w]
    WI[I_DS0], WI[I_DNS], WI[I_DC0], WI[I_DET] = TD[i, 0], TD[i, 1], TD[i, 2], 1
    return True


@njit(cache=True, _nrt=False)
def _dequeue(S, w):
    """The next queued trajectory that was not cancelled (it starts under the current version),
    or -1: the worker waits idle for the next group."""
    LI, QI, TI = S[32], S[33], S[38]
    while LI[L_QH] < LI[L_QT]:
        i = QI[LI[L_QH]]
        LI[L_QH] += 1
        LI[L_QUEUED] -= 1
        if TI[i, T_CANCEL]:
            continue
        LI[L_RUNNING] += 1
        TI[i, T_V0] = LI[L_VERSION]
        TI[i, T_STARTED] = 1
        return i
    S[34][LI[L_NIDLE]] = w
    LI[L_NIDLE] += 1
    return -1


@njit(cache=True, _nrt=False, inline="always")
def _cancelled(WF, WI, steps):
    """A worker's body stops, cancelled, after ``steps`` steps: its outcome so far."""
    WI[I_RS], WI[I_RD] = CANCELLED, steps
    WF[F_RG], WF[F_RT], WF[F_RO] = WF[F_G], WF[F_TIME], WF[F_O]


@njit(cache=True, _nrt=False)
def _park(S, w):
    """A body at a step's start waits for the gate to open."""
    LI = S[32]
    S[35][LI[L_NGATE]] = w
    LI[L_NGATE] += 1


@njit(cache=True, _nrt=False)
def _top_up(S):
    """Start groups while the staleness bound and the rollout slots allow (async: AReaL's rule),
    or the ``L_START`` groups the step being collected still needs (sync, one_step_off), their
    members queued; idle workers take them."""
    G, LI, P, GS = S[2], S[32], S[8], S[36]
    gsz, c, n, now = LI[L_G], int(P[P_C]), int(P[P_N]), G[G_NOW]
    while LI[L_START] > 0 or (LI[L_LIVE] + LI[L_NREADY] + LI[L_TRAINED] < G[G_BOUND]
                              and LI[L_QUEUED] + LI[L_RUNNING] + gsz <= max(c, gsz)):  # fmt: skip
        if LI[L_NEXTI] + gsz > n:  # the trajectory budget ran out
            LI[L_EXH] = 1
            break
        LI[L_START] = max(LI[L_START] - 1, 0)
        g = LI[L_NEXTG]
        LI[L_NEXTG] = g + 1
        LI[L_LIVE] += 1
        GS[g, GS_STATE], GS[g, GS_LEFT] = RUNNING, gsz
        for i in range(LI[L_NEXTI], LI[L_NEXTI] + gsz):
            S[31][i] = S[42][g]
            S[21][i] = now  # its queue wait counts from here
            S[33][LI[L_QT]] = i
            LI[L_QT] += 1
        LI[L_QUEUED] += gsz
        LI[L_NEXTI] += gsz
    LI[L_START] = 0
    for _ in range(min(LI[L_NIDLE], LI[L_QT] - LI[L_QH])):
        LI[L_NIDLE] -= 1
        _push(S, now, S[34][LI[L_NIDLE]], K_NEXT)


@njit(cache=True, _nrt=False)
def _notify(S, w):
    """Wake the trainer (R_NOTIFY) when the groups it waits for are ready or none can come;
    worker ``w`` (-1: none) goes on after it. True when it asked."""
    LI, GI = S[32], S[3]
    need = LI[L_NEED]
    if need > 0 and (LI[L_NREADY] >= need or (LI[L_EXH] and LI[L_LIVE] == 0)):
        LI[L_NEED] = 0
        if LI[L_DEFER]:  # an event after those of this instant already scheduled (run: R_NOTIFY)
            _push(S, S[2][G_NOW], int(S[8][P_C]) + 1, K_TIMER)
            return False
        GI[J_REQ], GI[J_REQW] = R_NOTIFY, w
        if w >= 0:
            S[1][w, I_RESUME] = K_NEXT
        return True
    return False


@njit(cache=True, _nrt=False)
def _finished(S, w, i, status, worker, sandbox, llm):
    """Trajectory ``i`` ended: its group's cost and count (ready once every member is done; a
    failed or timed-out member masked), then the top-up. True when the trainer is woken."""
    LI, GS, GF, TI = S[32], S[36], S[37], S[38]
    LI[L_RUNNING] -= 1
    g = i // LI[L_G]
    GF[g, GF_WORKER] += worker
    GF[g, GF_SANDBOX] += sandbox
    GF[g, GF_LLM] += llm
    GF[g, GF_N] += 1.0
    TI[i, T_VEND] = LI[L_VERSION]
    if GS[g, GS_STATE] == DISCARDED:
        D, cause = S[40], GS[g, GS_CAUSE]
        D[cause, 0] += worker
        D[cause, 1] += sandbox
        D[cause, 2] += llm
        D[cause, 3] += 1.0
    else:
        if status != OK:
            GS[g, GS_MASK] += 1
        GS[g, GS_LEFT] -= 1
        if GS[g, GS_LEFT] == 0:
            GS[g, GS_STATE] = READY
            GF[g, GF_READY] = S[2][G_NOW]
            S[39][LI[L_RQN]] = g
            LI[L_RQN] += 1
            LI[L_LIVE] -= 1
            LI[L_NREADY] += 1
    _top_up(S)
    return _notify(S, w)


@njit(cache=True, _nrt=False)
def _cut_seg(S, w, cancel):
    """A barrier or a cancel: worker ``w``'s segment ends with the step it is in (the gate and
    the cancel are read at the next step's start), or, cancelled, at the step's next check:
    before its first call, or between two calls (the step then does not count)."""
    WF, WI = S[0][w], S[1][w]
    sg, snc, co, ct = S[27], S[28], S[29], S[30]
    el, du, done = S[2][G_NOW] - WF[F_SEGT0], WF[F_DU], WF[F_DONE]
    if WI[I_EXACT] != 1 or done != int(done):  # the loop's bodies read their steps: always exact
        return
    x_l, x_e, luck, task = WF[F_PL], WF[F_PE], WF[F_LUCK], WF[F_TASK]
    ds0, dc0 = WI[I_DS0], WI[I_DC0]
    t = g = o = 0.0
    for m in range(int(du)):
        k = int(done) + m
        gk, n, c0 = sg[ds0 + k] * luck * x_l, snc[ds0 + k], first_call(snc, ds0, k)
        edge, spent = t + gk, 0.0
        if cancel and el < edge and n > 0:  # generating: stopped before the first call
            _reschedule(S, w, edge, m + 0.5, g + gk, o)
            return
        for j in range(n):
            oj = co[dc0 + c0 + j] * x_e
            edge += oj + ct[dc0 + c0 + j] * task
            spent += oj
            if cancel and el < edge and j + 1 < n:  # in a call: stopped before the next one
                _reschedule(S, w, edge, m + 0.5, g + gk, o + spent)
                return
        t, g, o = edge, g + gk, o + spent
        if el < t:  # the step it is in ends here
            if m + 1 < du:
                _reschedule(S, w, t, m + 1.0, g, o)
            return


@njit(cache=True, _nrt=False)
def _compact(S):
    """Drop the heap's entries of segment ends that were cut since (the order of the rest, by
    time and sequence, is unchanged)."""
    ht, hs, hw, hk, GI = S[4], S[5], S[6], S[7], S[3]
    m = 0
    for j in range(GI[J_HSIZE]):
        k = hk[j]
        if k >= EPOCH and k // EPOCH != S[1][hw[j], I_EPOCH]:
            continue
        ht[m], hs[m], hw[m], hk[m] = ht[j], hs[j], hw[j], hk[j]
        m += 1
    GI[J_HSIZE] = m
    heapify(ht, hs, hw, hk, m)


@njit(cache=True, _nrt=False)
def _reschedule(S, w, e, du, g, o):
    """Worker ``w``'s segment now ends ``e`` seconds in, after ``du`` steps (a half: stopped within
    the last), ``g`` generating and ``o`` in exec overhead; its old end is skipped."""
    WF, WI = S[0][w], S[1][w]
    if WF[F_SEGT0] + e >= WF[F_DEADLINE]:  # the deadline comes first
        return
    WF[F_SD], WF[F_DU], WF[F_SG], WF[F_SO] = e, du, g, o
    WI[I_DEAD] = 0
    WI[I_EPOCH] += 1
    _push(S, WF[F_SEGT0] + e, w, K_SEG_END + EPOCH * WI[I_EPOCH])


@njit(cache=True, _nrt=False)
def _pause(S, w):
    """An interrupt (at_sync: interrupt): worker ``w``'s body, if generating, stops its turn and
    waits for the gate to open (the steps before it done); the rest of its step, a segment of
    its own, resumes then (:func:`_resume_paused`)."""
    WF, WI, TI = S[0][w], S[1][w], S[38]
    sg, snc, co, ct = S[27], S[28], S[29], S[30]
    el, du, done = S[2][G_NOW] - WF[F_SEGT0], WF[F_DU], WF[F_DONE]
    if WI[I_EXACT] != 1 or done != int(done) or du != int(du):  # stopping (cancelled): no turn to pause
        return
    x_l, x_e, luck, task = WF[F_PL], WF[F_PE], WF[F_LUCK], WF[F_TASK]
    ds0, dc0 = WI[I_DS0], WI[I_DC0]
    t = g = o = 0.0
    for m in range(int(du)):
        k = int(done) + m
        gk, n, c0 = sg[ds0 + k] * luck * x_l, snc[ds0 + k], first_call(snc, ds0, k)
        edge, ok = t + gk, 0.0
        for j in range(n):
            oj = co[dc0 + c0 + j] * x_e
            edge += oj + ct[dc0 + c0 + j] * task
            ok += oj
        if el < t + gk:  # generating: the steps before it are done, it waits with the rest of its step
            S[41][0 if WI[I_VER] == TI[WI[I_I], T_V0] else 1] += m
            WF[F_DONE], WF[F_O] = done + m, WF[F_O] + o
            # the pause counts as the turn's (generation, as the step engine's wall time of a turn):
            # until it resumes, generation and time hold minus the pause's start
            WF[F_G], WF[F_TIME] = WF[F_G] + g - S[2][G_NOW], WF[F_TIME] + t - S[2][G_NOW]
            WF[F_SD], WF[F_DU], WF[F_SG], WF[F_SO] = edge - t, 1.0, gk, ok
            WF[F_SEGT0] = t - el  # until it resumes: minus the time it is into its step
            S[12][WI[I_DOM]] -= WF[F_CE]
            WI[I_INSEG], WI[I_DEAD] = 2, 0
            WI[I_EPOCH] += 1  # its old end is skipped
            TI[WI[I_I], T_RESUMED] += 1
            S[32][L_PAUSED] += 1
            return
        t, g, o = edge, g + gk, o + ok
        if el < t:  # in its calls: the turn is done, the step goes on
            return


@njit(cache=True, _nrt=False)
def _resume_paused(S):
    """The gate opens: paused bodies resume their step under the new weights (at the deadline, if
    it came first, they time out); a body cancelled while it waited stops at its step's next check."""
    now, c = S[2][G_NOW], int(S[8][P_C])
    sg, snc, co, ct = S[27], S[28], S[29], S[30]
    for w in range(c):
        WF, WI = S[0][w], S[1][w]
        if WI[I_INSEG] != 2:
            continue
        WI[I_INSEG] = 1
        WF[F_SEGT0] += now
        WF[F_G] += now
        WF[F_TIME] += now
        S[12][WI[I_DOM]] += WF[F_CE]
        end = WF[F_SEGT0] + WF[F_SD]
        if end > WF[F_DEADLINE]:  # it times out in its step (at once, if the deadline passed)
            stop = max(WF[F_DEADLINE], now)
            done = int(WF[F_DONE])
            k, g, o = cut(sg, snc, co, ct, WI[I_DS0], WI[I_DC0], done, done + 1, WF[F_PL] * WF[F_LUCK],
                          WF[F_PE], WF[F_TASK], stop - WF[F_SEGT0], False)  # fmt: skip
            WI[I_RD], WI[I_DEAD] = done + k, 1
            WF[F_RG], WF[F_RT], WF[F_RO] = WF[F_G] + g, WF[F_TIME] + stop - WF[F_SEGT0], WF[F_O] + o
            end = stop
        _push(S, end, w, K_SEG_END + EPOCH * WI[I_EPOCH])
        if S[38][WI[I_I], T_CANCEL] == 1:
            _cut_seg(S, w, True)
    S[32][L_PAUSED] = 0


@njit(cache=True, _nrt=False)
def _apply(S):
    """What the training loop asked for at the current time: segments cut (cancels, a barrier),
    the gate opened, the trainer's timer, a top-up; then whether the trainer is to wake."""
    LI, G, c = S[32], S[2], int(S[8][P_C])
    if LI[L_OPEN] and LI[L_PAUSED]:
        _resume_paused(S)
    if LI[L_CUT]:
        barrier = LI[L_CUT] & 2
        for w in range(c):
            if S[1][w, I_INSEG] == 1:
                cancel = S[38][S[1][w, I_I], T_CANCEL] == 1
                if barrier or cancel:
                    _cut_seg(S, w, cancel)
        if LI[L_CUT] & 4:
            for w in range(c):
                if S[1][w, I_INSEG] == 1:
                    _pause(S, w)
        LI[L_CUT] = 0
    if LI[L_OPEN]:
        for k in range(LI[L_NGATE]):
            _push(S, G[G_NOW], S[35][k], K_SEG)
        LI[L_NGATE] = 0
        LI[L_OPEN] = 0
    if LI[L_TIMER]:
        _push(S, G[G_TIMER], c, K_TIMER)
        LI[L_TIMER] = 0
    if LI[L_TOPUP]:
        LI[L_TOPUP] = 0
        _top_up(S)
    _notify(S, -1)


@njit(cache=True, _nrt=False, inline="always")
def _advance(S, w, kind):  # noqa: C901 (one state machine)
    WF, WI, G, GI, P = S[0][w], S[1][w], S[2], S[3], S[8]
    IN, sand, BY, EXL, FP, TAB, TSZ, XS, YS = S[9], S[10], S[11], S[12], S[15], S[16], S[17], S[23], S[24]
    OUT, GEN, SCALE, ON, OFF = S[19], S[20], S[22], S[25], S[26]
    sg, snc, co, ct = S[27], S[28], S[29], S[30]
    now = G[G_NOW]
    loaded = P[P_LOADED] != 0.0
    lm = P[P_LOOP] != 0.0  # the training loop's cell (.compiled_training)
    TASK, TI = S[31], S[38]
    while True:
        i = WI[I_I]
        if kind == K_NEXT:
            if lm:  # the next queued member of a group
                i = _dequeue(S, w)
                if i < 0:
                    return
                WI[I_I] = i
                WI[I_DET] = 0
                kind = K_START
                continue
            if GI[J_NEXT] >= GI[J_BHI]:
                if P[P_BATCH] > 0:
                    GI[J_ACTIVE] -= 1
                    if GI[J_ACTIVE] == 0:
                        _batch(S, K_BATCH)
                return
            if GI[J_NEXT] >= GI[J_READY]:  # its chunk's inputs are still being drawn
                _request(S, w, R_INPUTS, K_NEXT)
                return
            i = GI[J_NEXT]
            GI[J_NEXT] = i + 1
            WI[I_I] = i
            WI[I_DET] = 0
            if P[P_TIMED] != 0.0 and S[21][i] > now:
                _push(S, S[21][i], w, K_START)
                return
            kind = K_START
        elif kind == K_START:
            WF[F_START] = now
            WF[F_DEADLINE] = now + P[P_TIMEOUT]
            for f in (F_WAITED, F_WORKER, F_SANDBOX, F_LLM, F_OVER, F_TD, F_LOST, F_LAT):
                WF[f] = 0.0
            WI[I_ATT], WI[I_STATUS], WI[I_STEPS] = 0, OK, 0
            kind = K_ATTEMPT
        elif kind == K_ATTEMPT:
            WI[I_ATT] += 1
            if WI[I_ATT] == 1:
                WF[F_COLD], WF[F_UC], WF[F_UE] = IN[i, C_COLD], IN[i, C_UC], IN[i, C_UE]
                WF[F_TDB], WF[F_UT] = IN[i, C_TD], IN[i, C_UT]
            elif WI[I_HAVE_RD] == 0:
                _request(S, w, R_RETRY, K_ATTEMPT2)
                return
            kind = K_ATTEMPT2
        elif kind == K_ATTEMPT2:
            WI[I_HAVE_RD] = 0
            WF[F_T0] = now
            kind = K_QUOTA
        elif kind == K_QUOTA:
            if P[P_QUOTA] != 0.0:
                if GI[J_AVAIL] > 0 and GI[J_QL] == 0:
                    GI[J_AVAIL] -= 1
                else:
                    qq = S[18]
                    qq[(GI[J_QH] + GI[J_QL]) % qq.size] = w
                    GI[J_QL] += 1
                    return
            kind = K_TOKEN
        elif kind == K_TOKEN:
            kind = K_PLACE
            if P[P_RATE] > 0:
                t = max(now, G[G_TOKEN])
                G[G_TOKEN] = t + 1.0 / P[P_RATE]
                if t - now > 0:
                    _push(S, t, w, K_PLACE)
                    return
        elif kind == K_PLACE:
            host = int(np.argmin(sand))
            sand[host] += 1
            GI[J_ALIVE] += 1
            GI[J_PEAK] = max(GI[J_PEAK], GI[J_ALIVE])
            WF[F_WAITED] += now - WF[F_T0]
            scope = P[P_SCOPE]
            d = host if scope == 0 else (0 if scope == 1 else i % int(P[P_CLIENTS]))
            WI[I_HOST], WI[I_DOM] = host, d
            WI[I_FAILS] = WF[F_UC] < fail_rate(XS[0], YS[0], _load(S, d, -1) + 1.0)
            BY[0, d] += 1.0
            lat = WF[F_COLD] * factor(FP[0], TAB, TSZ[0], _load(S, d, 0))
            WF[F_TDLAT] = lat
            _push(S, now + lat, w, K_CREATE_END)
            return
        elif kind == K_CREATE_END:
            BY[0, WI[I_DOM]] -= 1.0
            lat = WF[F_TDLAT]
            WF[F_LAT] = lat
            WF[F_WORKER] += lat
            if WI[I_FAILS]:
                _release(S, WI[I_HOST], now)
                WF[F_LOST] += lat
                WF[F_SANDBOX] += max(lat, P[P_MINBILL])
                kind = K_AGAIN
            else:
                WF[F_BILLED] = lat
                kind = K_BODY
        elif kind == K_AGAIN:
            att = WI[I_ATT]
            if att > P[P_RETRIES]:
                WI[I_STATUS] = FAILED
                kind = K_FINISH
            elif P[P_BACKOFF] > 0:
                _push(S, now + P[P_BACKOFF] * 2.0 ** (att - 1), w, K_ATTEMPT)
                return
            else:
                kind = K_ATTEMPT
        elif kind == K_BODY:
            if lm and TI[i, T_CANCEL]:  # cancelled while it waited for its sandbox: no body
                WI[I_STATUS], WI[I_STEPS], WF[F_LLMB], WF[F_OVER], WF[F_RT] = CANCELLED, 0, 0.0, 0.0, 0.0
                kind = K_TD
                continue
            d = WI[I_DOM]
            p_exec = fail_rate(XS[1], YS[1], _load(S, d, -1) + 1.0)
            fc = first_failure(WF[F_UE], p_exec, int(IN[i, C_CALLS]))
            task = TASK[i] if TASK.size else 1.0  # the training loop's prompt factor (LLM and tools)
            luck = SCALE[i] * task
            llm = IN[i, C_LLM] * luck
            tool = IN[i, C_TOOL] * task
            setup, reward, steps = IN[i, C_SETUP], IN[i, C_REWARD], IN[i, C_STEPS]
            whole = setup + llm + IN[i, C_OVER] + tool + reward
            one = not loaded and not lm  # nothing contends and no loop cuts it: one wait
            if (
                WI[I_DET] == 0
                and (fc > 0 or (one and now + whole > WF[F_DEADLINE]))
                and not _detail_ready(S, w, i)
            ):
                _request(S, w, R_DETAIL, K_BODY)
                return
            GI[J_BODIES] += 1
            ON[GI[J_NON]] = now
            GI[J_NON] += 1
            WF[F_LUCK], WF[F_BT0], WF[F_TASK] = luck, now, task
            status, units, WI[I_TAIL] = OK, int(steps), 0
            if fc > 0:
                status = LOST
                units, WF[F_TG], WF[F_TO], WF[F_TT] = lost_at(
                    sg, snc, co, ct, WI[I_DS0], WI[I_DNS], WI[I_DC0], fc, luck
                )
                WF[F_TT] *= task
                WI[I_TAIL] = 1
            WI[I_RS], WI[I_UNITS] = status, units
            if one:  # nothing contends: one wait, cut at the deadline
                if WI[I_TAIL] == 0:
                    g, o, part, done = llm, IN[i, C_OVER], llm + IN[i, C_OVER] + tool, int(steps)
                else:
                    g, o, t = sums(sg, snc, co, ct, WI[I_DS0], WI[I_DC0], 0, units, luck)
                    g, o, t = g + WF[F_TG], o + WF[F_TO], t + WF[F_TT]
                    part, done = g + o + t, units
                dur = setup + part + (reward if status == OK else 0.0)
                if now + dur > WF[F_DEADLINE]:
                    dur, WI[I_RS] = max(WF[F_DEADLINE] - now, 0.0), TIMEOUT
                    done, g, o = 0, 0.0, 0.0
                    if dur > setup:
                        done, g, o = cut(sg, snc, co, ct, WI[I_DS0], WI[I_DC0], 0, int(steps), luck, 1.0,
                                         1.0, dur - setup, False)  # fmt: skip
                    part = dur - setup
                WF[F_RG], WF[F_RT], WF[F_RO], WI[I_RD] = g, part, o, done
                _push(S, now + dur, w, K_BODY_END)
                return
            st = steps if steps else 1.0
            WF[F_PG], WF[F_PO], WF[F_PT] = llm / st, IN[i, C_OVER] / st, tool / st
            if not steps:
                WF[F_PG] = WF[F_PO] = WF[F_PT] = 0.0
            WF[F_SETUP], WF[F_REWARD] = setup, reward
            WF[F_DONE] = WF[F_G] = WF[F_TIME] = WF[F_O] = 0.0
            if setup:
                left = WF[F_DEADLINE] - now
                if setup > left:
                    WI[I_RS], WI[I_RD], WF[F_RG], WF[F_RT], WF[F_RO] = TIMEOUT, 0, 0.0, 0.0, 0.0
                    _push(S, now + max(left, 0.0), w, K_BODY_END)
                    return
                _push(S, now + setup, w, K_SEGSTART)
                return
            kind = K_SEGSTART
        elif kind == K_SEGSTART:
            x_l, x_e = _mult(S, WI[I_DOM])
            rate = WF[F_PG] * x_l + WF[F_PO] * x_e + WF[F_PT]
            exact = (
                lm or WI[I_TAIL] == 1 or now + (WI[I_UNITS] - WF[F_DONE]) * rate * AT_RISK > WF[F_DEADLINE]
            )
            if exact and WI[I_DET] == 0 and not _detail_ready(S, w, i):
                _request(S, w, R_DETAIL, K_SEGSTART)
                return
            WI[I_EXACT], WI[I_PREV], WF[F_SEG] = exact, 0, 1.0
            kind = K_SEG
        elif kind == K_SEG:
            units, done = WI[I_UNITS], WF[F_DONE]
            last = done >= units - 1e-9
            # a step's start (a lost sandbox's last step too): wait while the gate is closed; a
            # cancelled body stops here, and one stopped before a call has no gate to wait for
            if lm and (not last or WI[I_TAIL]):
                if TI[i, T_CANCEL] and done != int(done):
                    _cancelled(WF, WI, int(done))
                    kind = K_BODY_END
                    continue
                if S[32][L_GATE]:
                    _park(S, w)
                    return
                if TI[i, T_CANCEL]:
                    _cancelled(WF, WI, int(done + 1e-9))
                    kind = K_BODY_END
                    continue
            if last:
                kind = K_LAST
                continue
            x_l, x_e = _mult(S, WI[I_DOM])
            if WI[I_PREV]:
                moved = max(abs(x_l / WF[F_PL] - 1.0), abs(x_e / WF[F_PE] - 1.0))
                WF[F_SEG] = WF[F_SEG] * 2 if moved <= STILL else max(1.0, WF[F_SEG] / 2)
            WI[I_PREV], WF[F_PL], WF[F_PE] = 1, x_l, x_e
            exact = WI[I_EXACT] == 1
            du = min(WF[F_SEG], units - done) if loaded else units - done
            if exact and done + du < units:
                du = max(1.0, float(int(du)))
            luck = WF[F_LUCK]
            if exact and done == int(done) and int(done + du) > int(done):
                k1 = min(int(done + du), units)
                g0, o0, t0 = sums(sg, snc, co, ct, WI[I_DS0], WI[I_DC0], int(done), k1, luck)
                t0 *= WF[F_TASK]
                rem = (done + du) - k1
                g0, o0, t0 = g0 + WF[F_PG] * rem, o0 + WF[F_PO] * rem, t0 + WF[F_PT] * rem
            else:
                g0, o0, t0 = WF[F_PG] * du, WF[F_PO] * du, WF[F_PT] * du
            dd = g0 * x_l + o0 * x_e + t0
            left = WF[F_DEADLINE] - now
            if dd > left:  # the deadline falls in this segment
                left = max(left, 0.0)
                if exact and done == int(done):
                    k, g, o = cut(sg, snc, co, ct, WI[I_DS0], WI[I_DC0], int(done),
                                  min(int(done + du) + 1, units), x_l * luck, x_e, WF[F_TASK], left,
                                  False)  # fmt: skip
                else:
                    k, g, o = int(du * left / dd), g0 * x_l * left / dd, o0 * x_e * left / dd
                WI[I_RD] = int(done) + k  # the outcome at the deadline (its status set there)
                WF[F_RG], WF[F_RT], WF[F_RO] = WF[F_G] + g, WF[F_TIME] + left, WF[F_O] + o
                if lm:  # a segment to the deadline: a barrier or a cancel before it cuts it as any
                    WF[F_CE], WF[F_SD], WF[F_DU], WF[F_SG], WF[F_SO] = 0.0, dd, du, g0 * x_l, o0 * x_e
                    WF[F_SEGT0], WI[I_INSEG], WI[I_VER], WI[I_DEAD] = now, 1, S[32][L_VERSION], 1
                    _push(S, now + left, w, K_SEG_END + EPOCH * WI[I_EPOCH])
                    return
                WI[I_RS] = TIMEOUT
                _push(S, now + left, w, K_BODY_END)
                return
            ce = o0 * x_e / dd if dd > 0 else 0.0
            EXL[WI[I_DOM]] += ce
            WF[F_CE], WF[F_SD], WF[F_DU], WF[F_SG], WF[F_SO] = ce, dd, du, g0 * x_l, o0 * x_e
            WF[F_SEGT0], WI[I_INSEG], WI[I_VER] = now, 1, S[32][L_VERSION]
            _push(S, now + dd, w, K_SEG_END + EPOCH * WI[I_EPOCH])
            return
        elif kind == K_SEG_END:
            WI[I_INSEG] = 0
            if WI[I_DEAD]:  # it reached its deadline: the steps it generated, the one cut in too
                WI[I_DEAD], WI[I_RS] = 0, TIMEOUT
                S[41][0 if WI[I_VER] == TI[i, T_V0] else 1] += min(WI[I_RD] - int(WF[F_DONE]) + 1.0, WF[F_DU])
                kind = K_BODY_END
                continue
            if lm:  # generated steps, under the version the segment started in or a newer one
                S[41][0 if WI[I_VER] == TI[i, T_V0] else 1] += np.ceil(WF[F_DU])  # a step cut in counts
            EXL[WI[I_DOM]] -= WF[F_CE]
            WF[F_G] += WF[F_SG]
            WF[F_O] += WF[F_SO]
            WF[F_TIME] += WF[F_SD]
            WF[F_DONE] += WF[F_DU]
            kind = K_SEG
        elif kind == K_LAST:
            if WI[I_TAIL]:  # the lost sandbox's last step, up to the failing call
                x_l, x_e = _mult(S, WI[I_DOM])
                WF[F_XL], WF[F_XE], WF[F_TTAIL] = x_l, x_e, now
                tl = WF[F_TG] * x_l + WF[F_TO] * x_e + WF[F_TT]
                left = WF[F_DEADLINE] - now
                WI[I_OK] = tl <= left
                _push(S, now + (tl if tl <= left else max(left, 0.0)), w, K_TAIL_END)
                return
            kind = K_REWARD
        elif kind == K_TAIL_END:
            spent = now - WF[F_TTAIL]
            gl = WF[F_TG] * WF[F_XL]
            WF[F_G] += min(gl, spent)
            WF[F_O] += min(WF[F_TO] * WF[F_XE], max(spent - gl, 0.0))
            WF[F_TIME] += spent
            if not WI[I_OK]:
                WI[I_RS], WI[I_RD] = TIMEOUT, WI[I_UNITS]
                WF[F_RG], WF[F_RT], WF[F_RO] = WF[F_G], WF[F_TIME], WF[F_O]
                kind = K_BODY_END
                continue
            kind = K_REWARD
        elif kind == K_REWARD:
            WF[F_RG], WF[F_RT], WF[F_RO] = WF[F_G], WF[F_TIME], WF[F_O]
            WI[I_RD] = int(WF[F_DONE] + 1e-9)
            reward = WF[F_REWARD]
            if WI[I_RS] == OK and reward:
                left = WF[F_DEADLINE] - now
                if reward > left:
                    WI[I_RS], WI[I_RD] = TIMEOUT, WI[I_UNITS]
                    _push(S, now + max(left, 0.0), w, K_BODY_END)
                else:
                    _push(S, now + reward, w, K_BODY_END)
                return
            kind = K_BODY_END
        elif kind == K_BODY_END:
            GI[J_BODIES] -= 1
            OFF[GI[J_NOFF]] = now
            GI[J_NOFF] += 1
            g, wt = WF[F_RG], WF[F_RT]
            GEN[i, 0], GEN[i, 1], GEN[i, 2] = WF[F_BT0], now, g / wt if wt > 0 else 0.0
            WI[I_STATUS], WF[F_LLMB], WI[I_STEPS], WF[F_OVER] = WI[I_RS], g, WI[I_RD], WF[F_RO]
            WF[F_RT] = now - WF[F_BT0]  # busy
            kind = K_TD
        elif kind == K_TD:
            d = WI[I_DOM]
            again = WF[F_UT] < fail_rate(XS[2], YS[2], _load(S, d, -1) + 1.0)
            WF[F_TTAIL] = now
            if not loaded:
                _push(S, now + WF[F_TDB] * (2.0 if again else 1.0), w, K_TD_END)
                return
            WI[I_TDN] = 2 if again else 1
            BY[2, d] += 1.0
            _push(S, now + WF[F_TDB] * factor(FP[2], TAB, TSZ[2], _load(S, d, 2)), w, K_TD_OP_END)
            return
        elif kind == K_TD_OP_END:
            d = WI[I_DOM]
            BY[2, d] -= 1.0
            WI[I_TDN] -= 1
            if WI[I_TDN] > 0:
                BY[2, d] += 1.0
                _push(S, now + WF[F_TDB] * factor(FP[2], TAB, TSZ[2], _load(S, d, 2)), w, K_TD_OP_END)
                return
            kind = K_TD_END
        elif kind == K_TD_END:
            td = now - WF[F_TTAIL]
            WF[F_TD] = td
            _release(S, WI[I_HOST], now)
            llm, busy = WF[F_LLMB], WF[F_RT]
            WF[F_LLM] += llm
            WF[F_WORKER] += busy - llm + td
            WF[F_SANDBOX] += max(WF[F_BILLED] + busy + td, P[P_MINBILL])
            kind = K_FINISH
            if WI[I_STATUS] == LOST:
                WF[F_LOST] += WF[F_LAT] + busy - llm + td
                kind = K_AGAIN
        elif kind == K_FINISH:
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
            kind = K_NEXT
            if lm and _finished(S, w, i, WI[I_STATUS], row[rec.R_WORKER], row[rec.R_SANDBOX], row[rec.R_LLM]):
                return
        elif kind == K_BATCH or kind == K_BATCH_GO:
            _batch(S, kind)
            return


@njit(cache=True, _nrt=False, nogil=True)
def run(S):
    """Process events until Python is needed: a request code (R_DONE when the run is over).
    ``_advance`` is inlined here, at its one call: called, it took a third of the loop's time.
    Without the GIL: a thread can take the next chunks of a workload still being drawn."""
    G, GI = S[2], S[3]
    GI[J_REQ] = 0
    if S[8][P_LOOP] != 0.0:  # what the training loop asked for since it last ran
        _apply(S)
        if GI[J_REQ]:
            return GI[J_REQ]
    while True:
        if GI[J_RESUME] >= 0:  # the worker whose request Python answered
            w = GI[J_RESUME]
            GI[J_RESUME] = -1
            k = S[1][w, I_RESUME]
        elif GI[J_HSIZE] > 0:
            t, w, k = _pop(S)
            G[G_NOW] = t
            if k >= EPOCH:  # a segment's end: skipped when the segment was cut since
                if k // EPOCH != S[1][w, I_EPOCH]:
                    continue
                k = k % EPOCH
            elif k == K_TIMER:
                if w > S[8][P_C]:  # the training loop's deferred notice (_notify)
                    GI[J_REQ], GI[J_REQW] = R_NOTIFY, -1
                    return R_NOTIFY
                return R_TIMER
        else:
            return R_DONE
        _advance(S, w, k)
        if GI[J_REQ]:
            return GI[J_REQ]
        if GI[J_DONE] - GI[J_TOLD] >= 8192:
            return R_PROGRESS
