"""A token workload's turns alone on an engine (compiled with numba): the recursion of
:func:`simrollout.sim.workload_draws.unloaded_turns` over a trajectory's turns — the context
grows by what each turn appended, or restarts from the prompt on the first turn and when it would
pass its cap (a compaction) — and each turn's seconds from the engine's iteration model, in one
pass over every turn of a chunk. The arithmetic is :class:`simrollout.scenario.cluster.IterationTime`'s,
in its order (tests hold it to the vectorized formula to the bit).

:func:`turn_seconds_drawn` takes the token counts as drawn (before rounding) and rounds them in
the same pass, so a chunk's counts are never stored where nothing reads them."""

from __future__ import annotations

import numpy as np
from numba import njit

_I64 = np.iinfo(np.int64).max


@njit(cache=True, _nrt=False)
def _turn(prev, prompt, a, o, max_context, kv_capacity, q, below, exact_cached):
    """One turn: ``(its seconds, the context after it)`` (``prev``: after the previous turn, 0
    before the first)."""
    overhead, base, ppt, ppa, pca, pdec, pctx, mbt = q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]
    top = min(max_context, kv_capacity - o)
    if prev > 0 and prev + a <= top:
        c = prev + a
        t = max(c - prev, 1)  # all but the cached prefix
    else:
        c = min(prompt + a, top)
        t = max(c, 1)
    prefix = c - t
    if not exact_cached:
        pre = ppt * t + ppa * t * (prefix + t / 2)
    else:
        pairs = t * (prefix + t / 2)
        cached = t * prefix if (below == 0 or t < below) else 0.0
        pre = ppt * t + (ppa * (pairs - cached) + pca * cached)
    chunks = 1 if t <= mbt else (t + mbt - 1) // mbt  # t >= 1: the ceiling of t / mbt
    d = o - 1
    return overhead + chunks * base + pre + d * (base + pdec + pctx * c) + pctx * d * (d + 1) / 2, c + o


@njit(cache=True, _nrt=False)
def _turns(steps, off, prompt, append, output, max_context, kv_capacity, q, below, out):
    exact_cached = not np.isnan(q[4])
    for j in range(steps.size):
        prev = 0  # context after the previous turn (0: none yet)
        for k in range(steps[j]):
            at = off[j] + k
            out[at], prev = _turn(prev, prompt[j], append[at], output[at], max_context, kv_capacity, q,
                                  below, exact_cached)  # fmt: skip


@njit(cache=True, _nrt=False)
def _count(x, lo):
    """A drawn count as the workload rounds it: to the nearest integer (ties to even), at least ``lo``."""
    return max(np.int64(np.rint(x)), lo)


@njit(cache=True, _nrt=False)
def _turns_drawn(steps, off, prompt, append, a_all, output, o_all, o_cap, max_context, kv_capacity, q,
                 below, out):  # fmt: skip
    exact_cached = not np.isnan(q[4])
    for j in range(steps.size):
        prev = 0
        for k in range(steps[j]):
            at = off[j] + k
            a = _count(append[at if a_all else 0], 0)
            o = min(_count(output[at if o_all else 0], 1), o_cap)
            out[at], prev = _turn(prev, prompt[j], a, o, max_context, kv_capacity, q, below, exact_cached)


def _engine_args(engine, max_context: int | None) -> tuple:
    it = engine.iteration
    q = np.array([engine.overhead, it.base, it.per_prefill_token, it.per_prefill_attention,
                  np.nan if it.per_cached_attention is None else it.per_cached_attention,
                  it.per_decode, it.per_context_token, engine.max_batch_tokens])  # fmt: skip
    return max_context or _I64, engine.kv_capacity_tokens, q, it.cached_attention_below or 0


def _offsets(steps: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)


def turn_seconds(
    steps: np.ndarray, prompt: np.ndarray, append: np.ndarray, output: np.ndarray, engine,
    max_context: int | None,
) -> np.ndarray:  # fmt: skip
    """Seconds of every turn alone on ``engine`` (a :class:`~simrollout.scenario.cluster.Engine`)."""
    out = np.empty(len(append))
    i64 = np.int64
    _turns(np.ascontiguousarray(steps, dtype=i64), _offsets(steps), np.ascontiguousarray(prompt, dtype=i64),
           np.ascontiguousarray(append, dtype=i64), np.ascontiguousarray(output, dtype=i64),
           *_engine_args(engine, max_context), out)  # fmt: skip
    return out


def turn_seconds_drawn(
    steps: np.ndarray, prompt: np.ndarray, append: np.ndarray, output: np.ndarray, n_steps: int,
    max_tokens: int | None, engine, max_context: int | None,
) -> np.ndarray:  # fmt: skip
    """:func:`turn_seconds` of counts as drawn: ``append`` and ``output`` hold one draw per turn
    (or one value for every turn, a constant), rounded as the workload rounds counts (appended
    at least 0, output at least 1 and at most ``max_tokens``)."""
    out = np.empty(n_steps)
    steps, prompt = np.ascontiguousarray(steps, dtype=np.int64), np.ascontiguousarray(prompt, dtype=np.int64)
    every = (append.size == n_steps, output.size == n_steps)  # else one value for every turn
    _turns_drawn(steps, _offsets(steps), prompt, append, every[0], output, every[1], max_tokens or _I64,
                 *_engine_args(engine, max_context), out)  # fmt: skip
    return out
