"""A training loop on a token workload in the compiled loop (numba): the compiled loop's lifecycle
and training loop (:mod:`.compiled_loop`, :mod:`.compiled_groups`) with each body on the compiled
serving engines of the serving pilot (:mod:`.pilot_bodies`, :mod:`.pilot_serving`), which run the
step engine's body and engines operation for operation, the training loop's hooks included.

Two states, two heaps: the loop's ``S`` (:mod:`.compiled_state`) and the serving side's ``V``
(:mod:`.pilot_state`). A body starts as its sandbox is ready (``K_TBODY``): it is handed to ``V``
and its worker waits. :func:`run` takes the earlier of the two heaps' events, by time and then by
one sequence number both heaps draw from (SimPy's order: an instant's events in the order they
were scheduled); a body's end hands it back to its worker (``K_TBODY_END``) at that instant. Both sides
share the fleet's operations in flight (``S_BY``), the loop's integers (the gate, the version),
each trajectory's loop integers (cancelled, turns resumed) and prompt factor, and the counts of
steps generated per version. A weight sync's interrupt (``at_sync: interrupt``) clears the
engines' prefix caches and aborts every request a body awaits; the gate's opening resumes the
bodies parked at it (:func:`apply`)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from . import compiled_loop as L
from . import pilot_bodies as PB
from . import pilot_serving as PS
from . import pilot_state as PV
from .compiled_core import load
from .compiled_groups import apply_requests
from .compiled_jit import compiled
from .compiled_ops import fail_rate, first_failure
from .compiled_state import *  # the loop's state's names

R_ROOM = 7  # the serving side's arrays need room (its heap, or its requests' figures)


@njit(cache=True, _nrt=False, inline="always")
def on_body(S, V, w, now):
    """Worker ``w``'s body starts on the serving side, where a failing call loses the sandbox;
    K_TBODY_END when it ended at once, else STOP (its end comes from ``V``)."""
    i = S[S_WI][w, I_I]
    WF, GI = S[S_WF][w], S[S_GI]
    d = S[S_WI][w, I_DOM]
    p_exec = fail_rate(S[S_XS][PH_EXEC], S[S_YS][PH_EXEC], load(S, d, -1) + 1.0)
    fc = first_failure(WF[F_UE], p_exec, int(S[S_IN][i, C_CALLS]))
    GI[J_BODIES] += 1
    S[S_ON][GI[J_NON]] = now
    GI[J_NON] += 1
    WF[F_BT0] = now
    V[PV.S_WORKER][i] = w
    V[PV.S_GI][J_SEQ] = GI[J_SEQ]  # one sequence for both heaps (see run)
    ended = PB.start_body(V, i, d, WF[F_DEADLINE], fc, 0, now)
    GI[J_SEQ] = V[PV.S_GI][J_SEQ]
    return K_TBODY_END if ended else STOP


@njit(cache=True, _nrt=False, inline="always")
def on_end(S, V, w, now):
    """Worker ``w``'s body ended on the serving side: its outcome, its generation share."""
    i = S[S_WI][w, I_I]
    WF, WI, GI, GEN = S[S_WF][w], S[S_WI][w], S[S_GI], S[S_GEN]
    TI, TF = V[PV.S_TI], V[PV.S_TF]
    GI[J_BODIES] -= 1
    S[S_OFF][GI[J_NOFF]] = now
    GI[J_NOFF] += 1
    g, wt = TF[i, PV.BF_LLM], now - WF[F_BT0]
    GEN[i, 0], GEN[i, 1], GEN[i, 2] = WF[F_BT0], now, g / wt if wt > 0 else 0.0
    WI[I_STATUS], WI[I_STEPS] = TI[i, PV.B_STATUS], TI[i, PV.B_STEPS]
    WF[F_LLMB], WF[F_OVER], WF[F_RT] = g, TF[i, PV.BF_OVER], wt  # (F_RT: busy)
    return K_TD


@njit(cache=True, _nrt=False, inline="always")
def _advance(S, V, w, kind):
    """Run worker ``w`` from state ``kind`` until it waits, its body on the serving side."""
    now = S[S_G][G_NOW]
    while kind != STOP:
        if kind == K_TBODY:
            kind = on_body(S, V, w, now)
        elif kind == K_TBODY_END:
            kind = on_end(S, V, w, now)
        else:
            kind = L._advance(S, w, kind)


@compiled(nogil=True)
def run(S, V):
    """Process both sides' events until Python is needed (:func:`.compiled_loop.run`'s codes, and
    ``R_ROOM``)."""
    G, GI, VGI = S[S_G], S[S_GI], V[PV.S_GI]
    GI[J_REQ] = 0
    room = V[PV.S_KVW].size - V[PV.S_EI].shape[0] * int(V[PV.S_P][PV.P_MAX_RUN]) - 64
    while True:
        if VGI[PV.J_REQUESTS] > room or VGI[PV.J_NFIN] > room:
            return R_ROOM
        if GI[J_RESUME] >= 0:  # the worker whose request Python answered
            w = GI[J_RESUME]
            GI[J_RESUME] = -1
            k = S[S_WI][w, I_RESUME]
        else:
            before = S[S_HT][0] if GI[J_HSIZE] > 0 else math.inf
            seq = S[S_HS][0] if GI[J_HSIZE] > 0 else -1
            vt = V[PV.S_HT][0]
            if VGI[PV.J_HSIZE] > 0 and (vt < before or (vt == before and V[PV.S_HS][0] < seq)):
                VGI[J_SEQ] = GI[J_SEQ]
                got = PB.advance(V, before, seq)
                GI[J_SEQ] = VGI[J_SEQ]
                if got == 0:
                    continue
                if got != 1:  # 2: its heap is full; -1: an error (J_ERR)
                    return R_ROOM
                i = VGI[PV.J_ENDED]
                w, k = V[PV.S_WORKER][i], K_TBODY_END
                G[G_NOW] = V[PV.S_GF][PV.G_NOW]
            elif GI[J_HSIZE] > 0:
                w, k, code = L.take_event(S)
                if code < 0:
                    continue
                if code:
                    return code
            else:
                return R_DONE
        _advance(S, V, w, k)
        if GI[J_REQ]:
            return GI[J_REQ]
        if GI[J_DONE] - GI[J_TOLD] >= 8192:
            return R_PROGRESS


@compiled
def apply(S, V):
    """What the trainer asked for that the serving side does: at an interrupt, the engines'
    prefix caches cleared and the requests the bodies await aborted (worker by worker); at the
    gate's opening, the parked bodies resumed at once, in the order they parked (as SimPy's gate
    event resumes its waiters from its callbacks)."""
    LI, VGI = S[S_LI], V[PV.S_GI]
    now = S[S_G][G_NOW]
    V[PV.S_GF][PV.G_NOW] = now
    VGI[J_SEQ] = S[S_GI][J_SEQ]
    TI = V[PV.S_TI]
    if LI[L_CUT] & 4:
        PS.clear_prefix_cache(V)
        for w in range(int(S[S_P][P_C])):
            i = S[S_WI][w, I_I]
            if V[PV.S_WORKER][i] == w and TI[i, PV.B_PC] == PV.PC_AWAIT:
                PS.abort(V, TI[i, PV.B_REQ])
    if LI[L_OPEN]:  # as the gate's callbacks: each parked body goes on at once, in turn
        park = V[PV.S_PARK]
        for k in range(VGI[PV.J_NPARK]):
            i = park[k]
            ended = PB.body_go(V, i, True)
            S[S_GI][J_SEQ] = VGI[J_SEQ]
            if ended:  # (cancelled, or past its deadline): its worker goes on
                _advance(S, V, V[PV.S_WORKER][i], K_TBODY_END)
                VGI[J_SEQ] = S[S_GI][J_SEQ]
        VGI[PV.J_NPARK] = 0
    S[S_GI][J_SEQ] = VGI[J_SEQ]


@compiled(nogil=True)
def run_training(S, V):
    """:func:`run` after what the training loop asked for since it last ran."""
    GI = S[S_GI]
    GI[J_REQ] = 0
    apply(S, V)
    apply_requests(S)
    if GI[J_REQ]:
        return GI[J_REQ]
    return run(S, V)


def example_state() -> tuple:
    """A serving state of a token loop's types (``TokenRun.V``), its arrays of one element: the
    signature :func:`run_training` compiles for without a cell (``compiled.compile_loop``)."""
    from types import SimpleNamespace

    from .pilot_compiled import FIELDS, build_state, work_arrays

    P = np.zeros(PV.NP)
    P[PV.P_LOOP] = 1.0
    f1, i1, by = np.zeros(1), np.zeros(1, dtype=np.int64), np.zeros((3, 1))
    work = work_arrays(SimpleNamespace(**{f: f1 for f in FIELDS}), f1)
    domains = (f1, by[0], by[1], by[2], f1)
    li, ti = np.zeros(NL, dtype=np.int64), np.zeros((1, 5), dtype=np.int64)
    loop = (li, ti, np.zeros(2), np.ones(1), i1, i1, i1)
    return build_state(P, 1, 1, 2, 2, 8, work, domains, 2, loop)
