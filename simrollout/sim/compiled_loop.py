"""The compiled engine's event loop (numba): a binary heap in arrays, one rollout worker per slot
walking a trajectory through its lifecycle as a state machine: quota, create-rate token, create on
the least-loaded host (``base x m(load at its start)``), the body in segments that re-read the load
(the serving pilot's load curve and each body's luck, the host's exec load), teardown, failures,
retries after their backoff and the deadline. It returns to Python (:mod:`.compiled`) for what only
Python draws: a retry's draws and a trajectory's per-step detail.

Where things are: the state's named slots and columns in :mod:`.compiled_state`; the handler of
each state in :mod:`.compiled_lifecycle` (around the body) and :mod:`.compiled_body`; the steps they
share (the heap, the load, a release, sync batches) in :mod:`.compiled_core`; the training loop's
groups, gate and cuts in :mod:`.compiled_groups`. This module dispatches a worker's state to its
handler and runs the loop; it re-exports the state's names for the Python side.

Every function here is compiled without numba's reference counting (``_nrt=False``): nothing in
the loop allocates, and the counts' atomic operations took about 60% of its time. The handlers are
inlined (``inline="always"``) into the loop, as one function was: called, they cost a third of
its time. numba's cache of :func:`run` is keyed by this file alone: after editing a module it
inlines or calls (``compiled_*.py``), touch this file or clear the cache (:mod:`simrollout.numba_cache`)."""

from __future__ import annotations

from numba import njit

from . import compiled_body as B
from . import compiled_lifecycle as LC
from .compiled_core import batch, next_event, schedule  # noqa: F401 (batch, schedule: for .compiled)
from .compiled_groups import apply_requests
from .compiled_jit import compiled
from .compiled_state import *  # the state's names, re-exported


@njit(cache=True, _nrt=False, inline="always")
def _advance(S, w, kind):  # noqa: C901 (one branch a state)
    """Run worker ``w`` from state ``kind`` until it waits for an event (or for Python): STOP, or
    the state of a body on serving engines (``K_TBODY``, ``K_TBODY_END``: :mod:`.compiled_tokens`)."""
    now = S[S_G][G_NOW]
    while kind != STOP and kind < K_TBODY:
        if kind == K_NEXT:
            kind = LC.on_next(S, w, now)
        elif kind == K_START:
            kind = LC.on_start(S, w, now)
        elif kind == K_ATTEMPT:
            kind = LC.on_attempt(S, w, now)
        elif kind == K_ATTEMPT2:
            kind = LC.on_attempt_drawn(S, w, now)
        elif kind == K_QUOTA:
            kind = LC.on_quota(S, w, now)
        elif kind == K_TOKEN:
            kind = LC.on_token(S, w, now)
        elif kind == K_PLACE:
            kind = LC.on_place(S, w, now)
        elif kind == K_CREATE_END:
            kind = LC.on_created(S, w, now)
        elif kind == K_AGAIN:
            kind = LC.on_again(S, w, now)
        elif kind == K_BODY:
            kind = B.on_body(S, w, now)
        elif kind == K_SEGSTART:
            kind = B.on_steps(S, w, now)
        elif kind == K_SEG:
            kind = B.on_segment(S, w, now)
        elif kind == K_SEG_END:
            kind = B.on_segment_end(S, w, now)
        elif kind == K_LAST:
            kind = B.on_last_step(S, w, now)
        elif kind == K_TAIL_END:
            kind = B.on_tail_end(S, w, now)
        elif kind == K_REWARD:
            kind = B.on_reward(S, w, now)
        elif kind == K_BODY_END:
            kind = B.on_body_end(S, w, now)
        elif kind == K_TD:
            kind = LC.on_teardown(S, w, now)
        elif kind == K_TD_OP_END:
            kind = LC.on_teardown_op_end(S, w, now)
        elif kind == K_TD_END:
            kind = LC.on_teardown_end(S, w, now)
        elif kind == K_FINISH:
            kind = LC.on_finish(S, w, now)
        else:  # K_BATCH, K_BATCH_GO
            batch(S, kind)
            kind = STOP
    return kind


@njit(cache=True, _nrt=False, inline="always")
def take_event(S):
    """The heap's next event, its time the clock's: ``(worker, state, 0)`` to run, ``code`` -1 when
    skipped (the old end of a segment cut since), or a request for Python (the training loop's
    timer, its deferred notice)."""
    t, w, k = next_event(S)
    S[S_G][G_NOW] = t
    if k >= EPOCH:  # a segment's end: skipped when the segment was cut since
        if k // EPOCH != S[S_WI][w, I_EPOCH]:
            return w, k, -1
        return w, k % EPOCH, 0
    if k == K_TIMER:
        if w > S[S_P][P_C]:  # the training loop's deferred notice (compiled_groups.notify)
            S[S_GI][J_REQ], S[S_GI][J_REQW] = R_NOTIFY, -1
            return w, k, R_NOTIFY
        return w, k, R_TIMER
    return w, k, 0


@compiled(nogil=True)
def run(S):
    """Process events until Python is needed: a request code (R_DONE when the run is over).
    ``_advance`` and its handlers are inlined here. A cell with a training loop runs
    :func:`run_training`, which compiles the training loop's requests only where they are used.
    Without the GIL: a thread can take the next chunks of a workload still being drawn."""
    GI = S[S_GI]
    GI[J_REQ] = 0
    while True:
        if GI[J_RESUME] >= 0:  # the worker whose request Python answered
            w = GI[J_RESUME]
            GI[J_RESUME] = -1
            k = S[S_WI][w, I_RESUME]
        elif GI[J_HSIZE] > 0:
            w, k, code = take_event(S)
            if code < 0:
                continue
            if code:
                return code
        else:
            return R_DONE
        _advance(S, w, k)
        if GI[J_REQ]:
            return GI[J_REQ]
        if GI[J_DONE] - GI[J_TOLD] >= 8192:
            return R_PROGRESS


@compiled(nogil=True)
def run_training(S):
    """:func:`run` after what the training loop asked for since it last ran."""
    GI = S[S_GI]
    GI[J_REQ] = 0
    apply_requests(S)
    if GI[J_REQ]:
        return GI[J_REQ]
    return run(S)
