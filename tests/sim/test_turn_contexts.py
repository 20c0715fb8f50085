"""The compiled context recursion against the per-turn-index recursion it replaced."""

from __future__ import annotations

import numpy as np
import pytest

from simrollout.sim.turn_contexts import contexts


def _by_turn_index(steps, prompt, append, output, max_context, kv):
    """The recursion vectorized over trajectories, one pass per turn index (the former code)."""
    off = np.concatenate([[0], np.cumsum(steps)])
    c_out, p_out = np.empty(len(append), dtype=np.int64), np.empty(len(append), dtype=np.int64)
    ctx = np.zeros(len(steps), dtype=np.int64)
    for k in range(int(steps.max(initial=0))):
        live = np.flatnonzero(steps > k)
        at = off[live] + k
        a, o, prev = append[at], output[at], ctx[live]
        top = np.minimum(max_context, kv - o)
        grow = (prev > 0) & (prev + a <= top)
        c = np.where(grow, prev + a, np.minimum(prompt[live] + a, top))
        c_out[at] = c
        p_out[at] = np.where(grow, np.maximum(c - prev, 1), np.maximum(c, 1))
        ctx[live] = c + o
    return c_out, p_out


@pytest.mark.parametrize("max_context", [2_000, 65_536, np.iinfo(np.int64).max])
def test_contexts_are_the_per_turn_recursion(max_context):
    rng = np.random.default_rng(3)
    steps = rng.integers(0, 40, 300)
    n = int(steps.sum())
    prompt = rng.integers(0, 3_000, 300)
    append = rng.lognormal(6, 1.5, n).astype(np.int64)  # long appends: compactions happen
    output = rng.integers(1, 800, n)
    got = contexts(steps, prompt, append, output, max_context, 40_000)
    want = _by_turn_index(steps, prompt, append, output, max_context, 40_000)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    first = np.zeros(n, dtype=bool)
    first[(np.cumsum(steps) - steps)[steps > 0]] = True
    restarts = int(((got[1] == np.maximum(got[0], 1)) & ~first).sum())  # compactions
    assert restarts > (1_000 if max_context == 2_000 else 0)  # the compaction path ran
