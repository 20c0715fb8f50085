"""The compiled turn times against the per-turn-index recursion and the iteration model's own
vectorized formula (the former code), to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from simrollout.scenario.cluster import Engine
from simrollout.sim.turn_seconds import turn_seconds


def _by_turn_index(steps, prompt, append, output, engine, max_context):
    """The recursion vectorized over trajectories, one pass per turn index (the former code)."""
    it = engine.iteration
    off = np.concatenate([[0], np.cumsum(steps)])
    out_t = np.empty(len(append))
    ctx = np.zeros(len(steps), dtype=np.int64)
    for k in range(int(steps.max(initial=0))):
        live = np.flatnonzero(steps > k)
        at = off[live] + k
        a, o, prev = append[at], output[at], ctx[live]
        top = np.minimum(max_context or np.iinfo(np.int64).max, engine.kv_capacity_tokens - o)
        grow = (prev > 0) & (prev + a <= top)
        c = np.where(grow, prev + a, np.minimum(prompt[live] + a, top))
        prefill = np.where(grow, np.maximum(c - prev, 1), np.maximum(c, 1))
        d = o - 1
        out_t[at] = (engine.overhead + -(-prefill // engine.max_batch_tokens) * it.base
                     + it.prefill_seconds(prefill, c - prefill)
                     + d * (it.base + it.per_decode + it.per_context_token * c)
                     + it.per_context_token * d * (d + 1) / 2)  # fmt: skip
        ctx[live] = c + o
    return out_t


ITERATIONS = {
    "gpu": {"base": 0.012, "per_prefill_token": 2e-5, "per_decode": 1e-4, "per_context_token": 3e-8},
    "attention": {"base": 0.012, "per_prefill_token": 2e-5, "per_prefill_attention": 1e-9,
                  "per_decode": 1e-4, "per_context_token": 3e-8},
    "cpu-cached": {"base": 0.03, "per_prefill_token": 1e-4, "per_prefill_attention": 2e-9,
                   "per_cached_attention": 7e-8, "per_decode": 1e-3, "per_context_token": 1e-7},
    "cpu-switch": {"base": 0.03, "per_prefill_token": 1e-4, "per_prefill_attention": 2e-9,
                   "per_cached_attention": 7e-8, "cached_attention_below": 64, "per_decode": 1e-3},
}  # fmt: skip


@pytest.mark.parametrize("iteration", ITERATIONS, ids=str)
@pytest.mark.parametrize("max_context", [2_000, 65_536, None])
def test_turn_seconds_are_the_former_formula_to_the_bit(iteration, max_context):
    engine = Engine(iteration=ITERATIONS[iteration], kv_capacity_tokens=40_000, max_batch_tokens=512,
                    overhead=0.004)  # fmt: skip
    rng = np.random.default_rng(3)
    steps = rng.integers(0, 40, 300)
    n = int(steps.sum())
    prompt = rng.integers(0, 3_000, 300)
    append = np.where(rng.random(n) < 0.3, rng.integers(1, 63, n), rng.lognormal(6, 1.5, n).astype(np.int64))
    output = rng.integers(1, 800, n)
    got = turn_seconds(steps, prompt, append, output, engine, max_context)
    want = _by_turn_index(steps, prompt, append, output, engine, max_context)
    assert np.array_equal(got, want)
    assert (np.diff(got) != 0).any() and got.min() > 0


@pytest.mark.parametrize("max_tokens", [None, 300])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_turns_of_counts_as_drawn_round_them_as_the_workload_does(dtype, max_tokens):
    """The fused pass rounds each draw as ``_counts`` does (half to even, at least 0 appended and
    1 out, the output capped): the same seconds as the rounded counts, to the bit; a constant is
    one value for every turn."""
    from simrollout.sim.turn_seconds import turn_seconds_drawn

    engine = Engine(iteration=ITERATIONS["cpu-cached"], kv_capacity_tokens=40_000, max_batch_tokens=512,
                    overhead=0.004)  # fmt: skip
    rng = np.random.default_rng(5)
    steps = rng.integers(0, 40, 300)
    n = int(steps.sum())
    prompt = rng.integers(0, 3_000, 300)
    append = np.concatenate([rng.lognormal(6, 1.5, n - 4), [-3.0, 0.5, 1.5, 2.5]]).astype(dtype)
    output = np.concatenate([rng.lognormal(4, 1.0, n - 3), [0.2, 0.5, 7.5]]).astype(dtype)

    def rounded(x, lo):
        return np.maximum(np.rint(x).astype(np.int64), lo)

    out = rounded(output, 1) if max_tokens is None else np.minimum(rounded(output, 1), max_tokens)
    want = turn_seconds(steps, prompt, rounded(append, 0), out, engine, 9_000)
    got = turn_seconds_drawn(steps, prompt, append, output, n, max_tokens, engine, 9_000)
    assert np.array_equal(got, want)
    const = turn_seconds_drawn(steps, prompt, np.array([600.0]), output, n, max_tokens, engine, 9_000)
    assert np.array_equal(const, turn_seconds(steps, prompt, np.full(n, 600), out, engine, 9_000))


def test_turn_sums_are_the_turns_summed_by_run_to_the_bit():
    """Each trajectory's sum from the fused pass is ``_sum_by`` of its turns (numpy's pairwise
    order, blocks of 8 and halves above 128; 0 for no turn), bit for bit, the turns never stored."""
    from simrollout.sim.turn_seconds import turn_seconds_drawn, turn_sums_drawn
    from simrollout.sim.workload_draws import _sum_by

    engine = Engine(iteration=ITERATIONS["attention"], kv_capacity_tokens=400_000, max_batch_tokens=2048,
                    overhead=0.004)  # fmt: skip
    rng = np.random.default_rng(8)
    steps = np.concatenate([rng.integers(0, 300, 400), [0, 1, 2, 7, 8, 9, 128, 129, 130, 137, 1000, 0]])
    n = int(steps.sum())
    prompt = rng.integers(0, 9_000, steps.size)
    append = rng.lognormal(6.8, 2.0, n).astype(np.float32)
    output = rng.lognormal(5.4, 1.3, n).astype(np.float32)
    for a in (append, np.array([600.0])):
        want = _sum_by(turn_seconds_drawn(steps, prompt, a, output, n, 4000, engine, 65_536), steps)
        got = turn_sums_drawn(steps, prompt, a, output, n, 4000, engine, 65_536)
        assert got.tobytes() == want.tobytes() and (got[steps == 0] == 0).all()
        assert (got[steps > 0] > 0).all()
