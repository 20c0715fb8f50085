"""The workload's vectorised helpers against plain Python."""

import numpy as np
import pytest

from simrollout.sim.workload_draws import _sum_by


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_sum_by_sums_each_run_including_empty_ones(dtype):
    rng = np.random.default_rng(7)
    for _ in range(500):
        counts = rng.integers(0, 4, size=rng.integers(0, 9))
        values = (rng.random(int(counts.sum())) * 10).astype(dtype)
        starts = np.cumsum(counts) - counts
        expected = [float(values[a : a + k].sum(dtype=np.float64)) for a, k in zip(starts, counts)]
        got = _sum_by(values, counts)
        assert got.dtype == np.float64 and got.shape == counts.shape
        assert np.allclose(got, expected, rtol=1e-12, atol=0.0)


def test_sum_by_of_long_float32_runs_accumulates_in_float64():
    values = np.full(150 * 1000, 0.1, dtype=np.float32)
    got = _sum_by(values, np.full(1000, 150))
    assert np.allclose(got, 150 * float(np.float32(0.1)), rtol=1e-12)
