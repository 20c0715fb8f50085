"""The compiled pilot's bodies at step fidelity (numba) and its event loop: :mod:`.body_steps`'s
steps without the training loop's hooks, transcribed wait for wait (the same times, computed the
same way), on the serving engines of :mod:`.pilot_serving`.

A body runs from its start (handed over by the SimPy lifecycle) until it ends; :func:`advance`
runs the pilot's events before a time and returns at the first body that ends, for the lifecycle
to go on at that instant."""

from __future__ import annotations

import math

from ..sim.records import CANCELLED, LOST, OK, TIMEOUT
from .compiled_heap import pop
from .compiled_jit import compiled
from .compiled_state import L_GATE, L_VERSION, T_CANCEL, T_RESUMED, T_V0
from .pilot_serving import cancel, close, generated, mark, on_engine, push, release, request
from .pilot_state import *  # the state's names


@compiled
def until(S, i, dur, pc):
    """Wait ``dur`` or until the deadline (``waits.until``), then resume at ``pc``."""
    TI = S[S_TI]
    now = S[S_GF][G_NOW]
    left = S[S_TF][i, BF_DEADLINE] - now
    TI[i, B_PC] = pc
    if dur > left:
        push(S, now + max(left, 0.0), i, EV_LATE, TI[i, B_EPOCH])
    else:
        push(S, now + dur, i, EV_OK, TI[i, B_EPOCH])


@compiled
def exec_factor(S, d):
    """The exec overhead's multiplier at the domain's load (a slope; ``Fleet.load``)."""
    P = S[S_P]
    if P[P_WEIGHTED] != 0.0:
        n = P[P_WC] * S[S_CR][d] + P[P_WE] * (S[S_EX][d] + S[S_XL][d]) + P[P_WT] * S[S_TD][d] + P[P_BG]
    else:
        n = S[S_OPS][d] + S[S_XL][d] + P[P_BG]
    return 1.0 + P[P_SLOPE] * (n - 1.0) if n > 1.0 else 1.0


@compiled
def end(S, i, status):
    close(S, i)
    S[S_GI][J_BODIES] -= 1
    S[S_GI][J_ENDED] = i
    S[S_TI][i, B_STATUS] = status
    S[S_TI][i, B_PC] = PC_END
    return True


@compiled
def turn(S, i, s):
    """Step ``s``'s request in tokens (``StepBody._turn``): its context, whether compacted, the
    tokens a cached prefix could serve and its output."""
    TI, P = S[S_TI], S[S_P]
    append = S[S_SAPP][s]
    if P[P_LOOP] != 0.0:  # a training loop's prompt factor scales the output (StepBody._turn)
        out = max(int(round(S[S_SOUT][s] * S[S_LTASK][i])), 1)
    else:
        out = max(S[S_SOUT][s], 1)
    if P[P_MAX_TOK] != 0.0:
        out = min(out, int(P[P_MAX_TOK]))
    top = int(P[P_KV]) - out
    if P[P_MAX_CTX] != 0.0:
        top = min(int(P[P_MAX_CTX]), top)
    ctx = TI[i, B_CTX]
    if ctx == 0:
        c, fresh, reusable = min(S[S_PROMPT][i] + append, top), 0, 0
    elif ctx + append > top:
        c, fresh, reusable = min(S[S_PROMPT][i] + append, top), 1, 0
    else:
        c, fresh, reusable = ctx + append, 0, ctx
    TI[i, B_TURN], TI[i, B_FRESH], TI[i, B_REUSABLE], TI[i, B_OUT] = c, fresh, reusable, out


@compiled
def park(S, i, pc):
    """A training loop's body waits at the closed gate; it resumes at ``pc`` when it opens."""
    GI = S[S_GI]
    S[S_TI][i, B_PC] = pc
    S[S_PARK][GI[J_NPARK]] = i
    GI[J_NPARK] += 1


@compiled
def submit(S, i):
    """Send the body's request in flight (``B_C``, ``B_O``) and await it, bounded by the deadline."""
    TI, TF = S[S_TI], S[S_TF]
    now = S[S_GF][G_NOW]
    r = request(S, i, TI[i, B_C], TI[i, B_O], TI[i, B_REUSABLE], TI[i, B_FRESH])
    TI[i, B_REQ], TI[i, B_PC] = r, PC_AWAIT
    dl = TF[i, BF_DEADLINE]
    if math.isinf(dl):
        return
    if S[S_P][P_LOOP] != 0.0:  # SimPy's order: each wait registered anew (see advance)
        GI = S[S_GI]
        GI[J_DLGEN] += 1
        TI[i, B_DLGEN] = GI[J_DLGEN]
        push(S, now + max(dl - now, 0.0), i, EV_DEADLINE, GI[J_DLGEN])
    elif math.isnan(TF[i, BF_DL]):  # one deadline event per body
        TF[i, BF_DL] = now + max(dl - now, 0.0)
        push(S, TF[i, BF_DL], i, EV_DEADLINE, TI[i, B_EPOCH])


@compiled
def body_go(S, i, ok):  # noqa: C901 (one branch a resumption point)
    """Run body ``i`` from where it waited (``ok``: its wait ended in time) to its next wait; True
    when it ended. A training loop's body (``P_LOOP``) has the step engine's hooks too: the gate at
    a step's start, cancellation there and before each call, the steps generated per version, the
    prompt's factor, and a turn interrupted at a weight sync resumed after it."""
    TI, TF, GI, P = S[S_TI], S[S_TF], S[S_GI], S[S_P]
    now = S[S_GF][G_NOW]
    lm = P[P_LOOP] != 0.0
    while True:
        pc = TI[i, B_PC]
        if pc == PC_SETUP:
            if not ok:
                return end(S, i, TIMEOUT)
            TI[i, B_PC] = PC_STEP
        elif pc == PC_STEP:
            s = TI[i, B_S]
            if s == TI[i, B_SEND]:
                rw = S[S_REWARD][i]
                if rw != 0.0:
                    until(S, i, rw, PC_REWARD)
                    return False
                return end(S, i, OK)
            if lm and S[S_LLI][L_GATE] != 0:  # the engines train: generation waits for new weights
                park(S, i, PC_GATED)
                return False
            TI[i, B_PC] = PC_GATED
        elif pc == PC_GATED:
            s = TI[i, B_S]
            if lm:
                LTI = S[S_LTI]
                if LTI[i, T_CANCEL] != 0:
                    return end(S, i, CANCELLED)
                S[S_LGEN][0 if S[S_LLI][L_VERSION] == LTI[i, T_V0] else 1] += 1.0
            TF[i, BF_T0] = now
            turn(S, i, s)
            until(S, i, P[P_OVERHEAD], PC_SUBMIT)
            return False
        elif pc == PC_SUBMIT:
            if not ok:
                TF[i, BF_LLM] += now - TF[i, BF_T0]
                return end(S, i, TIMEOUT)
            TI[i, B_C], TI[i, B_O] = TI[i, B_TURN], TI[i, B_OUT]
            submit(S, i)
            return False
        elif pc == PC_AWAIT:
            r = TI[i, B_REQ]
            if not ok:
                cancel(S, r)
                if lm:
                    release(S, r)
                TF[i, BF_LLM] += now - TF[i, BF_T0]
                return end(S, i, TIMEOUT)
            if lm:
                got, aborted = generated(S, r), S[S_RI][r, R_ABORTED]
                release(S, r)
                if aborted != 0 and got < TI[i, B_O]:  # resumed under the new weights: prefilled again
                    c = TI[i, B_C] + got
                    TI[i, B_C], TI[i, B_O], TI[i, B_REUSABLE], TI[i, B_FRESH] = c, TI[i, B_O] - got, c, 0
                    TI[i, B_PC] = PC_RESUME
                    continue
            else:
                k = GI[J_NTL]
                TL = S[S_TL]
                TL[k, 0], TL[k, 1], TL[k, 2], TL[k, 3] = (
                    i,
                    GI[J_BODIES],
                    now - TF[i, BF_T0],
                    S[S_SLLM][TI[i, B_S]],
                )
                GI[J_NTL] = k + 1
            TF[i, BF_LLM] += now - TF[i, BF_T0]
            TI[i, B_CTX] = TI[i, B_TURN] + TI[i, B_OUT]
            TI[i, B_J] = 0
            TI[i, B_PC] = PC_CALLS
        elif pc == PC_RESUME:  # an interrupted turn waits for the new weights, then is sent again
            if S[S_LLI][L_GATE] != 0:
                park(S, i, PC_RESUME)
                return False
            S[S_LTI][i, T_RESUMED] += 1
            submit(S, i)
            return False
        elif pc == PC_CALLS:
            s = TI[i, B_S]
            if TI[i, B_J] < S[S_SCALLS][s]:
                TI[i, B_K] += 1
                if TI[i, B_K] == TI[i, B_FAIL]:
                    return end(S, i, LOST)
                if lm and S[S_LTI][i, T_CANCEL] != 0:
                    return end(S, i, CANCELLED)
                d = TI[i, B_DOM]
                S[S_EX][d] += 1  # Fleet.begin(d, "exec")
                S[S_OPS][d] += 1
                over = S[S_COVER][TI[i, B_CALL] - TI[i, B_FIRST_CALL]] * exec_factor(S, d)
                TF[i, BF_TOVER] = now
                until(S, i, over, PC_OVER)
                return False
            TI[i, B_STEPS] += 1
            TI[i, B_S] = s + 1
            TI[i, B_PC] = PC_STEP
        elif pc == PC_OVER:
            TF[i, BF_OVER] += now - TF[i, BF_TOVER]
            S[S_EX][TI[i, B_DOM]] -= 1  # Fleet.end
            S[S_OPS][TI[i, B_DOM]] -= 1
            if not ok:
                return end(S, i, TIMEOUT)
            tool = S[S_CTOOL][TI[i, B_CALL]]
            if lm:
                tool *= S[S_LTASK][i]
            until(S, i, tool, PC_TOOL)
            return False
        elif pc == PC_TOOL:
            if not ok:
                return end(S, i, TIMEOUT)
            TI[i, B_CALL] += 1
            TI[i, B_J] += 1
            TI[i, B_PC] = PC_CALLS
        else:  # PC_REWARD
            return end(S, i, OK if ok else TIMEOUT)
        ok = True


@compiled
def start_body(S, i, dom, deadline, fail_call, first_call, now):
    """Body ``i`` starts at ``now`` (its sandbox ready): True when it ended at once."""
    TI, TF = S[S_TI], S[S_TF]
    S[S_GF][G_NOW] = now
    TI[i, B_EPOCH] += 1
    TI[i, B_S], TI[i, B_SEND] = S[S_SOFF][i], S[S_SOFF][i + 1]
    TI[i, B_CALL], TI[i, B_FIRST_CALL] = S[S_COFF][i], first_call
    TI[i, B_K] = TI[i, B_CTX] = TI[i, B_STEPS] = 0
    TI[i, B_DOM], TI[i, B_FAIL], TI[i, B_REQ] = dom, fail_call, -1
    TI[i, B_C] = TI[i, B_O] = 0
    TF[i, BF_DEADLINE], TF[i, BF_LLM], TF[i, BF_OVER], TF[i, BF_DL] = deadline, 0.0, 0.0, math.nan
    S[S_GI][J_BODIES] += 1
    if S[S_SETUP][i] != 0.0:
        until(S, i, S[S_SETUP][i], PC_SETUP)
        return False
    TI[i, B_PC] = PC_STEP
    return body_go(S, i, True)


@compiled
def advance(S, before, before_seq):
    """Run the events before time ``before`` (and at it, those scheduled before sequence number
    ``before_seq``; -1: none): 1 when a body ended (``J_ENDED``; the time is ``G_NOW``), 0 when
    none is left before it, 2 when the heap needs more room, -1 on an error (``J_ERR``: 1, a
    request no engine's KV cache can fit; 2, more requests than the arrays hold)."""
    GI, TI, EI = S[S_GI], S[S_TI], S[S_EI]
    ht, hs = S[S_HT], S[S_HS]
    n = int(S[S_P][P_N])
    room = ht.size - S[S_WQ].shape[1] - 64  # an event pushes at most a batch's requests and a few more
    while GI[J_HSIZE] > 0 and (ht[0] < before or (ht[0] == before and hs[0] < before_seq)):
        if GI[J_HSIZE] > room:
            return 2
        t, w, k = pop(S[S_HT], S[S_HS], S[S_HW], S[S_HK], GI)
        S[S_GF][G_NOW] = t
        kind, epoch = k & 15, k >> 4
        if w < n:
            pc = TI[w, B_PC]
            if kind == EV_DEADLINE and S[S_P][P_LOOP] != 0.0:
                # a training loop's bodies time out in the step engine's order: a deadline shared
                # by many waits fires once, at its place among the instant's events, and resumes
                # them after those events, in the order they began waiting (waits.await_event)
                if epoch == TI[w, B_DLGEN] and pc == PC_AWAIT:
                    push(S, t, w, EV_DEADLINE2, TI[w, B_EPOCH])
                continue
            if kind == EV_DEADLINE2:
                kind = EV_DEADLINE
            if epoch != TI[w, B_EPOCH] or pc == PC_END:
                continue
            if (kind == EV_DONE or kind == EV_DEADLINE) and pc != PC_AWAIT:
                continue
            if body_go(S, w, kind == EV_OK or kind == EV_DONE):
                return 1
            if GI[J_ERR] != 0:
                return -1
        else:
            e = w - n
            if epoch != EI[e, E_EPOCH]:
                continue
            on_engine(S, e, kind)
            if GI[J_ERR] != 0:
                return -1
    return 0


@compiled
def mark_all(S, now):
    """Every engine's KV occupancy integrated up to ``now`` (the run's end: the clock moves there)."""
    S[S_GF][G_NOW] = now
    for e in range(S[S_EI].shape[0]):
        mark(S, e)
