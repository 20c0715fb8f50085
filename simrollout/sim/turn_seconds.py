"""A token workload's turns alone on an engine (compiled with numba): the recursion of
:func:`simrollout.sim.workload_draws.unloaded_turns` over a trajectory's turns — the context
grows by what each turn appended, or restarts from the prompt on the first turn and when it would
pass its cap (a compaction) — and each turn's seconds from the engine's iteration model, in one
pass over every turn of a chunk. The arithmetic is :class:`simrollout.scenario.cluster.IterationTime`'s,
in its order (tests hold it to the vectorized formula to the bit)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, _nrt=False)
def _turns(steps, off, prompt, append, output, max_context, kv_capacity, q, below, out):
    overhead, base, ppt, ppa, pca, pdec, pctx, mbt = q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]
    for j in range(steps.size):
        prev = 0  # context after the previous turn (0: none yet)
        for k in range(steps[j]):
            at = off[j] + k
            a, o = append[at], output[at]
            top = min(max_context, kv_capacity - o)
            if prev > 0 and prev + a <= top:
                c = prev + a
                t = max(c - prev, 1)  # all but the cached prefix
            else:
                c = min(prompt[j] + a, top)
                t = max(c, 1)
            prev = c + o
            prefix = c - t
            if np.isnan(pca):
                pre = ppt * t + ppa * t * (prefix + t / 2)
            else:
                pairs = t * (prefix + t / 2)
                cached = t * prefix if (below == 0 or t < below) else 0.0
                pre = ppt * t + (ppa * (pairs - cached) + pca * cached)
            chunks = -(-t // mbt)
            d = o - 1
            out[at] = overhead + chunks * base + pre + d * (base + pdec + pctx * c) + pctx * d * (d + 1) / 2


def turn_seconds(
    steps: np.ndarray, prompt: np.ndarray, append: np.ndarray, output: np.ndarray, engine,
    max_context: int | None,
) -> np.ndarray:  # fmt: skip
    """Seconds of every turn alone on ``engine`` (a :class:`~simrollout.scenario.cluster.Engine`)."""
    it = engine.iteration
    q = np.array([engine.overhead, it.base, it.per_prefill_token, it.per_prefill_attention,
                  np.nan if it.per_cached_attention is None else it.per_cached_attention,
                  it.per_decode, it.per_context_token, engine.max_batch_tokens])  # fmt: skip
    off = np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)
    out = np.empty(len(append))
    i64 = np.int64
    _turns(np.ascontiguousarray(steps, dtype=i64), off, np.ascontiguousarray(prompt, dtype=i64),
           np.ascontiguousarray(append, dtype=i64), np.ascontiguousarray(output, dtype=i64),
           max_context or np.iinfo(i64).max, engine.kv_capacity_tokens, q,
           it.cached_attention_below or 0, out)  # fmt: skip
    return out
