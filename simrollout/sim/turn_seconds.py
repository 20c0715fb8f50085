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

from .compiled_jit import compiled

_I64 = np.iinfo(np.int64).max


@compiled
def prefill_seconds(ppt, ppa, pca, exact_cached, below, t, prefix):
    """``IterationTime.prefill_seconds``: the prefill part of iterations over ``t`` new tokens after
    a cached ``prefix`` (also the compiled pilot's, :mod:`.pilot_serving`)."""
    if not exact_cached:
        return ppt * t + ppa * t * (prefix + t / 2)
    pairs = t * (prefix + t / 2)
    cached = t * prefix if (below == 0 or t < below) else 0.0
    return ppt * t + (ppa * (pairs - cached) + pca * cached)


@compiled
def _turn(prev, prompt, a, o, max_context, kv_capacity, q, below, exact_cached):
    """One turn: ``(its seconds, the context after it)`` (``prev``: after the previous turn, 0
    before the first)."""
    overhead, base, ppt, ppa, pca, pdec, pctx = q[0], q[1], q[2], q[3], q[4], q[5], q[6]
    mbt = np.int64(q[7])  # a whole number of tokens: the integer ceiling below is the float one, exactly
    top = min(max_context, kv_capacity - o)
    if prev > 0 and prev + a <= top:
        c = prev + a
        t = max(c - prev, 1)  # all but the cached prefix
    else:
        c = min(prompt + a, top)
        t = max(c, 1)
    pre = prefill_seconds(ppt, ppa, pca, exact_cached, below, t, c - t)
    chunks = 1 if t <= mbt else (t + mbt - 1) // mbt  # t >= 1: the ceiling of t / mbt
    d = o - 1
    return overhead + chunks * base + pre + d * (base + pdec + pctx * c) + pctx * d * (d + 1) / 2, c + o


@compiled(nogil=True)
def _turns(steps, off, prompt, append, output, max_context, kv_capacity, q, below, out):
    exact_cached = not np.isnan(q[4])
    for j in range(steps.size):
        prev = 0  # context after the previous turn (0: none yet)
        for k in range(steps[j]):
            at = off[j] + k
            out[at], prev = _turn(prev, prompt[j], append[at], output[at], max_context, kv_capacity, q,
                                  below, exact_cached)  # fmt: skip


@compiled
def _count(x, lo):
    """A drawn count as the workload rounds it: to the nearest integer (ties to even), at least ``lo``."""
    return max(np.int64(np.rint(x)), lo)


@compiled(inline="always")
def _drawn_run(j, steps, off, prompt, append, a_all, output, o_all, o_cap, max_context, kv_capacity, q, below,
               exact_cached, dest, base):  # fmt: skip
    """Trajectory ``j``'s turns from its counts as drawn (rounded here) into ``dest[base:]``."""
    prev = 0
    for k in range(steps[j]):
        at = off[j] + k
        a = _count(append[at if a_all else 0], 0)
        o = min(_count(output[at if o_all else 0], 1), o_cap)
        dest[base + k], prev = _turn(prev, prompt[j], a, o, max_context, kv_capacity, q, below, exact_cached)


@compiled(nogil=True)
def _turns_drawn(steps, off, prompt, append, a_all, output, o_all, o_cap, max_context, kv_capacity, q,
                 below, out):  # fmt: skip
    exact_cached = not np.isnan(q[4])
    for j in range(steps.size):
        _drawn_run(j, steps, off, prompt, append, a_all, output, o_all, o_cap, max_context, kv_capacity, q,
                   below, exact_cached, out, off[j])  # fmt: skip


@njit(cache=True, _nrt=False)
def _block(x, lo, n):
    """numpy's pairwise sum of at most 128 values ``x[lo:lo + n]``: in order below 8, else 8
    partial sums (the rest added after them)."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += x[i]
        return res
    r0, r1, r2, r3 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3]
    r4, r5, r6, r7 = x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
    i = 8
    while i < n - n % 8:
        at = lo + i
        r0, r1, r2, r3 = r0 + x[at], r1 + x[at + 1], r2 + x[at + 2], r3 + x[at + 3]
        r4, r5, r6, r7 = r4 + x[at + 4], r5 + x[at + 5], r6 + x[at + 6], r7 + x[at + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for k in range(lo + i, lo + n):
        res += x[k]
    return res


@njit(cache=True, _nrt=False)
def _pairwise(x, lo, n, todo, vals):
    """numpy's pairwise sum of ``x[lo:lo + n]`` (the order of its float64 reductions: blocks of
    at most 128, halves at a multiple of 8 above), to the bit; its recursion run on the stacks
    ``todo`` (rows lo, n; n < 0: add the last two values) and ``vals`` (a recursive function
    cannot be cached)."""
    if n <= 128:
        return _block(x, lo, n)
    top, nv = 1, 0
    todo[0, 0], todo[0, 1] = lo, n
    while top > 0:
        top -= 1
        at, m = todo[top, 0], todo[top, 1]
        if m < 0:  # both halves summed
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
        elif m <= 128:
            vals[nv] = _block(x, at, m)
            nv += 1
        else:
            m2 = m // 2
            m2 -= m2 % 8
            todo[top, 0], todo[top, 1] = 0, -1
            todo[top + 1, 0], todo[top + 1, 1] = at + m2, m - m2
            todo[top + 2, 0], todo[top + 2, 1] = at, m2  # the left half first
            top += 3
    return vals[0]


@njit(cache=True, _nrt=False)
def _run_sum(x, n, todo, vals):
    """``np.add.reduceat``'s float64 sum of a run ``x[:n]``: its first value plus the pairwise sum
    of the rest (0 for an empty run)."""
    if n == 0:
        return 0.0
    if n == 1:
        return x[0]
    return x[0] + _pairwise(x, 1, n - 1, todo, vals)


def _stacks() -> tuple[np.ndarray, np.ndarray]:
    """Room for :func:`_pairwise`'s stacks (3 rows a halving, at most 64 halvings)."""
    return np.empty((200, 2), dtype=np.int64), np.empty(200)


@njit(cache=True, _nrt=False, nogil=True)
def _turns_drawn_summed(steps, off, prompt, append, a_all, output, o_all, o_cap, max_context, kv_capacity,
                        q, below, buf, todo, vals, sums):  # fmt: skip
    """:func:`_turns_drawn` summed per trajectory as ``np.add.reduceat`` sums its turns, each
    trajectory's turns held in ``buf`` (as long as the longest) until summed."""
    exact_cached = not np.isnan(q[4])
    for j in range(steps.size):
        _drawn_run(j, steps, off, prompt, append, a_all, output, o_all, o_cap, max_context, kv_capacity, q,
                   below, exact_cached, buf, 0)  # fmt: skip
        sums[j] = _run_sum(buf, steps[j], todo, vals)


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


def turn_sums_drawn(
    steps: np.ndarray, prompt: np.ndarray, append: np.ndarray, output: np.ndarray, n_steps: int,
    max_tokens: int | None, engine, max_context: int | None,
) -> np.ndarray:  # fmt: skip
    """Each trajectory's sum of :func:`turn_seconds_drawn` in float64, summed in the order and
    precision of ``np.add.reduceat`` (0 for no turn) without storing the turns: the same numbers."""
    steps, prompt = np.ascontiguousarray(steps, dtype=np.int64), np.ascontiguousarray(prompt, dtype=np.int64)
    sums, buf = np.empty(steps.size), np.empty(max(int(steps.max(initial=0)), 1))
    a_all, o_all = append.size == n_steps, output.size == n_steps
    _turns_drawn_summed(steps, _offsets(steps), prompt, append, a_all, output, o_all, max_tokens or _I64,
                        *_engine_args(engine, max_context), buf, *_stacks(), sums)  # fmt: skip
    return sums
