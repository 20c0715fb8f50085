import numpy as np

from simrollout.scenario import Engine, IterationTime
from simrollout.workload import _sum_by, unloaded_turns


def test_sums_by_runs_equal_a_loop_with_empty_and_equal_runs():
    rng = np.random.default_rng(3)
    for counts in ([3, 0, 2, 0, 0, 4], [0, 0], [5, 5, 5], [0, 1, 0]):
        counts = np.array(counts)
        values = rng.random(int(counts.sum()))
        edges = np.concatenate([[0], np.cumsum(counts)])
        want = [values[a:b].sum() for a, b in zip(edges[:-1], edges[1:])]
        np.testing.assert_allclose(_sum_by(values, counts), want, rtol=1e-12, atol=0)


def test_unloaded_turns_agree_whether_trajectories_have_equal_turns_or_not():
    engine = Engine(
        iteration=IterationTime(base=0.01, per_prefill_token=1e-4, per_prefill_attention=1e-9,
                                per_decode=1e-3, per_context_token=1e-7),
        kv_capacity_tokens=6000, max_batch_tokens=512, overhead=0.02,
    )  # fmt: skip
    rng = np.random.default_rng(5)
    m, n = 40, 12
    tok = {
        "prompt": rng.integers(100, 900, m),
        "step_append": rng.integers(0, 1500, m * n),
        "step_output": rng.integers(1, 300, m * n),
    }
    equal = unloaded_turns(tok, np.full(m, n), engine, max_context=4000)
    # one more trajectory of one turn takes the ragged path; the others' turns must not move
    ragged = {k: np.concatenate([v, v[:1]]) for k, v in tok.items()}
    both = unloaded_turns(ragged, np.concatenate([np.full(m, n), [1]]), engine, max_context=4000)
    np.testing.assert_allclose(both[: m * n], equal, rtol=1e-12)
    assert np.all(equal > 0.02)
