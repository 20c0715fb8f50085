"""A trajectory's body in the compiled loop (numba), one handler per state a worker's event runs:
the body's start (its luck, where a failing call loses the sandbox), its steps in segments that
re-read the load at each boundary (the serving pilot's curve, the host's exec load), the deadline
that cuts them, a lost sandbox's last step and the reward. Each handler returns the state the
worker goes on to at once, or ``STOP`` when it waits for an event (or for Python). Named state:
:mod:`.compiled_state`; the dispatch: :mod:`.compiled_loop`."""

from __future__ import annotations

import numpy as np
from numba import njit

from .compiled_core import load, multipliers, request, schedule
from .compiled_groups import cancelled, detail_ready, park
from .compiled_ops import cut, fail_rate, first_failure, lost_at, sums
from .compiled_state import *  # the state's names


@njit(cache=True, _nrt=False, inline="always")
def on_body(S, w, now):
    """The body starts: its draws scaled by its luck, where a failing call loses the sandbox; with
    nothing to contend and no loop to cut it, one wait to its end or the deadline, else setup and
    segments."""
    i = S[S_WI][w, I_I]
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    GI = S[S_GI]
    IN = S[S_IN]
    XS = S[S_XS]
    YS = S[S_YS]
    SCALE = S[S_SCALE]
    ON = S[S_ON]
    sg = S[S_SG]
    snc = S[S_SNC]
    co = S[S_CO]
    ct = S[S_CT]
    TASK = S[S_TASK]
    TI = S[S_TI]
    P = S[S_P]
    loaded = P[P_LOADED] != 0.0
    lm = P[P_LOOP] != 0.0  # the training loop's cell (.compiled_training)
    if lm and TI[i, T_CANCEL]:  # cancelled while it waited for its sandbox: no body
        WI[I_STATUS], WI[I_STEPS], WF[F_LLMB], WF[F_OVER], WF[F_RT] = CANCELLED, 0, 0.0, 0.0, 0.0
        return K_TD
    if P[P_TOKENS] != 0.0:  # its turns on serving engines (.compiled_tokens)
        return K_TBODY
    d = WI[I_DOM]
    p_exec = fail_rate(XS[PH_EXEC], YS[PH_EXEC], load(S, d, -1) + 1.0)
    fc = first_failure(WF[F_UE], p_exec, int(IN[i, C_CALLS]))
    task = TASK[i] if TASK.size else 1.0  # the training loop's prompt factor (LLM and tools)
    luck = SCALE[i] * task
    llm = IN[i, C_LLM] * luck
    tool = IN[i, C_TOOL] * task
    setup, reward, steps = IN[i, C_SETUP], IN[i, C_REWARD], IN[i, C_STEPS]
    whole = setup + llm + IN[i, C_OVER] + tool + reward
    one = not loaded and not lm  # nothing contends and no loop cuts it: one wait
    if WI[I_DET] == 0 and (fc > 0 or (one and now + whole > WF[F_DEADLINE])) and not detail_ready(S, w, i):
        request(S, w, R_DETAIL, K_BODY)
        return STOP
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
        schedule(S, now + dur, w, K_BODY_END)
        return STOP
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
            schedule(S, now + max(left, 0.0), w, K_BODY_END)
            return STOP
        schedule(S, now + setup, w, K_SEGSTART)
        return STOP
    return K_SEGSTART


@njit(cache=True, _nrt=False, inline="always")
def on_steps(S, w, now):
    """After setup: whether the body steps exactly (per-step detail) or at its mean rate."""
    i = S[S_WI][w, I_I]
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    P = S[S_P]
    lm = P[P_LOOP] != 0.0  # the training loop's cell (.compiled_training)
    x_l, x_e = multipliers(S, WI[I_DOM])
    rate = WF[F_PG] * x_l + WF[F_PO] * x_e + WF[F_PT]
    exact = lm or WI[I_TAIL] == 1 or now + (WI[I_UNITS] - WF[F_DONE]) * rate * AT_RISK > WF[F_DEADLINE]
    if exact and WI[I_DET] == 0 and not detail_ready(S, w, i):
        request(S, w, R_DETAIL, K_SEGSTART)
        return STOP
    WI[I_EXACT], WI[I_PREV], WF[F_SEG] = exact, 0, 1.0
    return K_SEG


@njit(cache=True, _nrt=False, inline="always")
def on_segment(S, w, now):
    """A segment of steps at the load it starts in, doubled while the load stays still and halved
    when it moves; the deadline cuts the one it falls in. In a training loop, a step's start waits
    at the closed gate and a cancelled body stops there."""
    i = S[S_WI][w, I_I]
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    EXL = S[S_EXL]
    sg = S[S_SG]
    snc = S[S_SNC]
    co = S[S_CO]
    ct = S[S_CT]
    TI = S[S_TI]
    P = S[S_P]
    loaded = P[P_LOADED] != 0.0
    lm = P[P_LOOP] != 0.0  # the training loop's cell (.compiled_training)
    units, done = WI[I_UNITS], WF[F_DONE]
    last = done >= units - 1e-9
    # a step's start (a lost sandbox's last step too): wait while the gate is closed; a
    # cancelled body stops here, and one stopped before a call has no gate to wait for
    if lm and (not last or WI[I_TAIL]):
        if TI[i, T_CANCEL] and done != int(done):
            cancelled(WF, WI, int(done))
            return K_BODY_END
        if S[S_LI][L_GATE]:
            park(S, w)
            return STOP
        if TI[i, T_CANCEL]:
            cancelled(WF, WI, int(done + 1e-9))
            return K_BODY_END
    if last:
        return K_LAST
    x_l, x_e = multipliers(S, WI[I_DOM])
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
            WF[F_SEGT0], WI[I_INSEG], WI[I_VER], WI[I_DEAD] = now, 1, S[S_LI][L_VERSION], 1
            schedule(S, now + left, w, K_SEG_END + EPOCH * WI[I_EPOCH])
            return STOP
        WI[I_RS] = TIMEOUT
        schedule(S, now + left, w, K_BODY_END)
        return STOP
    ce = o0 * x_e / dd if dd > 0 else 0.0
    EXL[WI[I_DOM]] += ce
    WF[F_CE], WF[F_SD], WF[F_DU], WF[F_SG], WF[F_SO] = ce, dd, du, g0 * x_l, o0 * x_e
    WF[F_SEGT0], WI[I_INSEG], WI[I_VER] = now, 1, S[S_LI][L_VERSION]
    schedule(S, now + dd, w, K_SEG_END + EPOCH * WI[I_EPOCH])
    return STOP


@njit(cache=True, _nrt=False, inline="always")
def on_segment_end(S, w, now):
    """A segment ends: its steps and times added (a training loop counts its generated steps)."""
    i = S[S_WI][w, I_I]
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    EXL = S[S_EXL]
    TI = S[S_TI]
    P = S[S_P]
    lm = P[P_LOOP] != 0.0  # the training loop's cell (.compiled_training)
    WI[I_INSEG] = 0
    if WI[I_DEAD]:  # it reached its deadline: the steps it generated, the one cut in too
        WI[I_DEAD], WI[I_RS] = 0, TIMEOUT
        S[S_GENC][0 if WI[I_VER] == TI[i, T_V0] else 1] += min(WI[I_RD] - int(WF[F_DONE]) + 1.0, WF[F_DU])
        return K_BODY_END
    if lm:  # generated steps, under the version the segment started in or a newer one
        S[S_GENC][0 if WI[I_VER] == TI[i, T_V0] else 1] += np.ceil(WF[F_DU])  # a step cut in counts
    EXL[WI[I_DOM]] -= WF[F_CE]
    WF[F_G] += WF[F_SG]
    WF[F_O] += WF[F_SO]
    WF[F_TIME] += WF[F_SD]
    WF[F_DONE] += WF[F_DU]
    return K_SEG


@njit(cache=True, _nrt=False, inline="always")
def on_last_step(S, w, now):
    """The steps are done: a lost sandbox's last step runs up to its failing call."""
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    if WI[I_TAIL]:  # the lost sandbox's last step, up to the failing call
        x_l, x_e = multipliers(S, WI[I_DOM])
        WF[F_XL], WF[F_XE], WF[F_TTAIL] = x_l, x_e, now
        tl = WF[F_TG] * x_l + WF[F_TO] * x_e + WF[F_TT]
        left = WF[F_DEADLINE] - now
        WI[I_OK] = tl <= left
        schedule(S, now + (tl if tl <= left else max(left, 0.0)), w, K_TAIL_END)
        return STOP
    return K_REWARD


@njit(cache=True, _nrt=False, inline="always")
def on_tail_end(S, w, now):
    """The lost sandbox's last step ends, at its failing call or the deadline."""
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    spent = now - WF[F_TTAIL]
    gl = WF[F_TG] * WF[F_XL]
    WF[F_G] += min(gl, spent)
    WF[F_O] += min(WF[F_TO] * WF[F_XE], max(spent - gl, 0.0))
    WF[F_TIME] += spent
    if not WI[I_OK]:
        WI[I_RS], WI[I_RD] = TIMEOUT, WI[I_UNITS]
        WF[F_RG], WF[F_RT], WF[F_RO] = WF[F_G], WF[F_TIME], WF[F_O]
        return K_BODY_END
    return K_REWARD


@njit(cache=True, _nrt=False, inline="always")
def on_reward(S, w, now):
    """The reward of a body that succeeded, cut at the deadline."""
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    WF[F_RG], WF[F_RT], WF[F_RO] = WF[F_G], WF[F_TIME], WF[F_O]
    WI[I_RD] = int(WF[F_DONE] + 1e-9)
    reward = WF[F_REWARD]
    if WI[I_RS] == OK and reward:
        left = WF[F_DEADLINE] - now
        if reward > left:
            WI[I_RS], WI[I_RD] = TIMEOUT, WI[I_UNITS]
            schedule(S, now + max(left, 0.0), w, K_BODY_END)
        else:
            schedule(S, now + reward, w, K_BODY_END)
        return STOP
    return K_BODY_END


@njit(cache=True, _nrt=False, inline="always")
def on_body_end(S, w, now):
    """The body ends: its outcome, its generation share (the serving pilot's load curve)."""
    i = S[S_WI][w, I_I]
    WF = S[S_WF][w]
    WI = S[S_WI][w]
    GI = S[S_GI]
    GEN = S[S_GEN]
    OFF = S[S_OFF]
    GI[J_BODIES] -= 1
    OFF[GI[J_NOFF]] = now
    GI[J_NOFF] += 1
    g, wt = WF[F_RG], WF[F_RT]
    GEN[i, 0], GEN[i, 1], GEN[i, 2] = WF[F_BT0], now, g / wt if wt > 0 else 0.0
    WI[I_STATUS], WF[F_LLMB], WI[I_STEPS], WF[F_OVER] = WI[I_RS], g, WI[I_RD], WF[F_RO]
    WF[F_RT] = now - WF[F_BT0]  # busy
    return K_TD
