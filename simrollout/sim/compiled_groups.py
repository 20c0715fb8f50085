"""The training loop's part of the compiled loop (numba): group members queued and dequeued, the
gate the bodies wait at, a group's accounting when a member ends, the top-up, the trainer's wake-up,
and the segments a barrier or a cancel cuts (:mod:`.compiled_training` drives it from Python).
Named state: :mod:`.compiled_state`."""

from __future__ import annotations

from numba import njit

from .compiled_core import schedule
from .compiled_jit import compiled
from .compiled_ops import cut, first_call
from .compiled_state import *  # the state's names


@compiled
def detail_ready(S, w, i):
    """The training loop's bodies read their steps from their chunk's detail, loaded whole into
    the pools (S[S_TD]: each trajectory's steps and calls there, -1 when not loaded): True when
    trajectory ``i``'s is, its offsets then the worker's."""
    TD = S[S_TD]
    if S[S_P][P_LOOP] == 0.0 or TD[i, 1] < 0:
        return False
    WI = S[S_WI][w]
    WI[I_DS0], WI[I_DNS], WI[I_DC0], WI[I_DET] = TD[i, 0], TD[i, 1], TD[i, 2], 1
    return True


@compiled
def dequeue(S, w):
    """The next queued trajectory that was not cancelled (it starts under the current version),
    or -1: the worker waits idle for the next group."""
    LI, QI, TI = S[S_LI], S[S_QI], S[S_TI]
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
    S[S_IDLE][LI[L_NIDLE]] = w
    LI[L_NIDLE] += 1
    return -1


@njit(cache=True, _nrt=False, inline="always")
def cancelled(WF, WI, steps):
    """A worker's body stops, cancelled, after ``steps`` steps: its outcome so far."""
    WI[I_RS], WI[I_RD] = CANCELLED, steps
    WF[F_RG], WF[F_RT], WF[F_RO] = WF[F_G], WF[F_TIME], WF[F_O]


@compiled
def park(S, w):
    """A body at a step's start waits for the gate to open."""
    LI = S[S_LI]
    S[S_GATE][LI[L_NGATE]] = w
    LI[L_NGATE] += 1


@compiled
def top_up(S):
    """Start groups while the staleness bound and the rollout slots allow (async: AReaL's rule),
    or the ``L_START`` groups the step being collected still needs (sync, one_step_off), their
    members queued; idle workers take them."""
    G, LI, P, GS = S[S_G], S[S_LI], S[S_P], S[S_GS]
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
            S[S_TASK][i] = S[S_TASKG][g]
            S[S_ARR][i] = now  # its queue wait counts from here
            S[S_QI][LI[L_QT]] = i
            LI[L_QT] += 1
        LI[L_QUEUED] += gsz
        LI[L_NEXTI] += gsz
    LI[L_START] = 0
    for _ in range(min(LI[L_NIDLE], LI[L_QT] - LI[L_QH])):
        LI[L_NIDLE] -= 1
        schedule(S, now, S[S_IDLE][LI[L_NIDLE]], K_NEXT)


@compiled
def notify(S, w):
    """Wake the trainer (R_NOTIFY) when the groups it waits for are ready or none can come;
    worker ``w`` (-1: none) goes on after it. True when it asked."""
    LI, GI = S[S_LI], S[S_GI]
    need = LI[L_NEED]
    if need > 0 and (LI[L_NREADY] >= need or (LI[L_EXH] and LI[L_LIVE] == 0)):
        LI[L_NEED] = 0
        if LI[L_DEFER]:  # an event after those of this instant already scheduled (run: R_NOTIFY)
            schedule(S, S[S_G][G_NOW], int(S[S_P][P_C]) + 1, K_TIMER)
            return False
        GI[J_REQ], GI[J_REQW] = R_NOTIFY, w
        if w >= 0:
            S[S_WI][w, I_RESUME] = K_NEXT
        return True
    return False


@compiled
def finished(S, w, i, status, worker, sandbox, llm):
    """Trajectory ``i`` ended: its group's cost and count (ready once every member is done; a
    failed or timed-out member masked), then the top-up. True when the trainer is woken."""
    LI, GS, GF, TI = S[S_LI], S[S_GS], S[S_GF], S[S_TI]
    LI[L_RUNNING] -= 1
    g = i // LI[L_G]
    GF[g, GF_WORKER] += worker
    GF[g, GF_SANDBOX] += sandbox
    GF[g, GF_LLM] += llm
    GF[g, GF_N] += 1.0
    TI[i, T_VEND] = LI[L_VERSION]
    if GS[g, GS_STATE] == DISCARDED:
        D, cause = S[S_DISC], GS[g, GS_CAUSE]
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
            GF[g, GF_READY] = S[S_G][G_NOW]
            S[S_RQ][LI[L_RQN]] = g
            LI[L_RQN] += 1
            LI[L_LIVE] -= 1
            LI[L_NREADY] += 1
    top_up(S)
    return notify(S, w)


@compiled
def cut_segment(S, w, cancel):
    """A barrier or a cancel: worker ``w``'s segment ends with the step it is in (the gate and
    the cancel are read at the next step's start), or, cancelled, at the step's next check:
    before its first call, or between two calls (the step then does not count)."""
    WF, WI = S[S_WF][w], S[S_WI][w]
    sg, snc, co, ct = S[S_SG], S[S_SNC], S[S_CO], S[S_CT]
    el, du, done = S[S_G][G_NOW] - WF[F_SEGT0], WF[F_DU], WF[F_DONE]
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
            reschedule(S, w, edge, m + 0.5, g + gk, o)
            return
        for j in range(n):
            oj = co[dc0 + c0 + j] * x_e
            edge += oj + ct[dc0 + c0 + j] * task
            spent += oj
            if cancel and el < edge and j + 1 < n:  # in a call: stopped before the next one
                reschedule(S, w, edge, m + 0.5, g + gk, o + spent)
                return
        t, g, o = edge, g + gk, o + spent
        if el < t:  # the step it is in ends here
            if m + 1 < du:
                reschedule(S, w, t, m + 1.0, g, o)
            return


@compiled
def reschedule(S, w, e, du, g, o):
    """Worker ``w``'s segment now ends ``e`` seconds in, after ``du`` steps (a half: stopped within
    the last), ``g`` generating and ``o`` in exec overhead; its old end is skipped."""
    WF, WI = S[S_WF][w], S[S_WI][w]
    if WF[F_SEGT0] + e >= WF[F_DEADLINE]:  # the deadline comes first
        return
    WF[F_SD], WF[F_DU], WF[F_SG], WF[F_SO] = e, du, g, o
    WI[I_DEAD] = 0
    WI[I_EPOCH] += 1
    schedule(S, WF[F_SEGT0] + e, w, K_SEG_END + EPOCH * WI[I_EPOCH])


@compiled
def pause(S, w):
    """An interrupt (at_sync: interrupt): worker ``w``'s body, if generating, stops its turn and
    waits for the gate to open (the steps before it done); the rest of its step, a segment of
    its own, resumes then (:func:`resume_paused`)."""
    WF, WI, TI = S[S_WF][w], S[S_WI][w], S[S_TI]
    sg, snc, co, ct = S[S_SG], S[S_SNC], S[S_CO], S[S_CT]
    el, du, done = S[S_G][G_NOW] - WF[F_SEGT0], WF[F_DU], WF[F_DONE]
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
            S[S_GENC][0 if WI[I_VER] == TI[WI[I_I], T_V0] else 1] += m
            WF[F_DONE], WF[F_O] = done + m, WF[F_O] + o
            # the pause counts as the turn's (generation, as the step engine's wall time of a turn):
            # until it resumes, generation and time hold minus the pause's start
            WF[F_G], WF[F_TIME] = WF[F_G] + g - S[S_G][G_NOW], WF[F_TIME] + t - S[S_G][G_NOW]
            WF[F_SD], WF[F_DU], WF[F_SG], WF[F_SO] = edge - t, 1.0, gk, ok
            WF[F_SEGT0] = t - el  # until it resumes: minus the time it is into its step
            S[S_EXL][WI[I_DOM]] -= WF[F_CE]
            WI[I_INSEG], WI[I_DEAD] = 2, 0
            WI[I_EPOCH] += 1  # its old end is skipped
            TI[WI[I_I], T_RESUMED] += 1
            S[S_LI][L_PAUSED] += 1
            return
        t, g, o = edge, g + gk, o + ok
        if el < t:  # in its calls: the turn is done, the step goes on
            return


@compiled
def resume_paused(S):
    """The gate opens: paused bodies resume their step under the new weights (at the deadline, if
    it came first, they time out); a body cancelled while it waited stops at its step's next check."""
    now, c = S[S_G][G_NOW], int(S[S_P][P_C])
    sg, snc, co, ct = S[S_SG], S[S_SNC], S[S_CO], S[S_CT]
    for w in range(c):
        WF, WI = S[S_WF][w], S[S_WI][w]
        if WI[I_INSEG] != 2:
            continue
        WI[I_INSEG] = 1
        WF[F_SEGT0] += now
        WF[F_G] += now
        WF[F_TIME] += now
        S[S_EXL][WI[I_DOM]] += WF[F_CE]
        end = WF[F_SEGT0] + WF[F_SD]
        if end > WF[F_DEADLINE]:  # it times out in its step (at once, if the deadline passed)
            stop = max(WF[F_DEADLINE], now)
            done = int(WF[F_DONE])
            k, g, o = cut(sg, snc, co, ct, WI[I_DS0], WI[I_DC0], done, done + 1, WF[F_PL] * WF[F_LUCK],
                          WF[F_PE], WF[F_TASK], stop - WF[F_SEGT0], False)  # fmt: skip
            WI[I_RD], WI[I_DEAD] = done + k, 1
            WF[F_RG], WF[F_RT], WF[F_RO] = WF[F_G] + g, WF[F_TIME] + stop - WF[F_SEGT0], WF[F_O] + o
            end = stop
        schedule(S, end, w, K_SEG_END + EPOCH * WI[I_EPOCH])
        if S[S_TI][WI[I_I], T_CANCEL] == 1:
            cut_segment(S, w, True)
    S[S_LI][L_PAUSED] = 0


@compiled
def apply_requests(S):
    """What the training loop asked for at the current time: segments cut (cancels, a barrier),
    the gate opened, the trainer's timer, a top-up; then whether the trainer is to wake."""
    LI, G, c = S[S_LI], S[S_G], int(S[S_P][P_C])
    if LI[L_OPEN] and LI[L_PAUSED]:
        resume_paused(S)
    if LI[L_CUT]:
        barrier = LI[L_CUT] & 2
        for w in range(c):
            if S[S_WI][w, I_INSEG] == 1:
                cancel = S[S_TI][S[S_WI][w, I_I], T_CANCEL] == 1
                if barrier or cancel:
                    cut_segment(S, w, cancel)
        if LI[L_CUT] & 4:
            for w in range(c):
                if S[S_WI][w, I_INSEG] == 1:
                    pause(S, w)
        LI[L_CUT] = 0
    if LI[L_OPEN]:
        for k in range(LI[L_NGATE]):
            schedule(S, G[G_NOW], S[S_GATE][k], K_SEG)
        LI[L_NGATE] = 0
        LI[L_OPEN] = 0
    if LI[L_TIMER]:
        schedule(S, G[G_TIMER], c, K_TIMER)
        LI[L_TIMER] = 0
    if LI[L_TOPUP]:
        LI[L_TOPUP] = 0
        top_up(S)
    notify(S, -1)
