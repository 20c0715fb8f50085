"""A token workload's context per turn (compiled with numba): the recursion of
:func:`simrollout.sim.workload_draws.unloaded_turns` over a trajectory's turns — the context
grows by what each turn appended, or restarts from the prompt on the first turn and when it would
pass its cap (a compaction) — in one pass over every turn of a chunk. Integers only: the numbers
are those of the vectorized recursion it replaces."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, _nrt=False)
def _contexts(steps, off, prompt, append, output, max_context, kv_capacity, ctx, prefill):
    for j in range(steps.size):
        prev = 0  # context after the previous turn (0: none yet)
        for k in range(steps[j]):
            at = off[j] + k
            a, o = append[at], output[at]
            top = min(max_context, kv_capacity - o)
            if prev > 0 and prev + a <= top:
                c = prev + a
                prefill[at] = max(c - prev, 1)  # all but the cached prefix
            else:
                c = min(prompt[j] + a, top)
                prefill[at] = max(c, 1)
            ctx[at] = c
            prev = c + o


def contexts(
    steps: np.ndarray, prompt: np.ndarray, append: np.ndarray, output: np.ndarray, max_context: int,
    kv_capacity: int,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per turn: the context it runs at (after its append) and the tokens it prefills."""
    off = np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)
    ctx, prefill = np.empty(len(append), dtype=np.int64), np.empty(len(append), dtype=np.int64)
    _contexts(np.ascontiguousarray(steps, dtype=np.int64), off, np.ascontiguousarray(prompt, dtype=np.int64),
              np.ascontiguousarray(append, dtype=np.int64), np.ascontiguousarray(output, dtype=np.int64),
              max_context, kv_capacity, ctx, prefill)  # fmt: skip
    return ctx, prefill
