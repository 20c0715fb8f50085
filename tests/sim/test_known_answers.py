"""The model pinned to known answers: the paper's projection table, Little's law, Erlang C,
and the expected makespan of a synchronous batch."""

import math

import numpy as np
import pytest

from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from tests.conftest import make


def run(d, **kw):
    return run_scenario(scenario_from_dict(d), jobs=1, **kw)


@pytest.mark.slow
def test_one_second_per_rollout_over_a_million_rollouts_is_277_8_worker_hours():
    d = make(
        **{
            "workload.trajectories": 1_000_000,
            "substrates.0.cold_start": 0.6,
            "substrates.0.teardown": 0.4,
            "cluster.concurrency": 10_000,
            "fidelity": "trajectory",
        }
    )
    s = run(d, keep_records=False).summary.iloc[0]
    assert s.worker_hours == pytest.approx(1_000_000 / 3600, rel=1e-9)
    assert round(s.worker_hours, 1) == 277.8


@pytest.mark.slow
def test_ten_ms_per_action_over_a_million_150_step_rollouts_is_416_7_hours():
    d = make(
        **{
            "workload.trajectories": 1_000_000,
            "workload.steps": 150,
            "workload.calls_per_step": 1,
            "workload.llm_time": 2.0,  # model inference is excluded from worker-hours
            "substrates.0.exec_overhead": 0.01,
            "cluster.concurrency": 10_000,
            "fidelity": "trajectory",
        }
    )
    s = run(d, keep_records=False).summary.iloc[0]
    assert round(s.worker_hours, 1) == 416.7
    assert s.sandbox_hours == pytest.approx(1e6 * 150 * 2.01 / 3600, rel=1e-9)


def _poisson_exp(lam, mu, c, n, fidelity="step"):
    return make(
        **{
            "workload.trajectories": n,
            "substrates.0.cold_start": {"kind": "exponential", "mean": 1 / mu},
            "cluster.concurrency": c,
            "arrivals": {"kind": "poisson", "rate": lam},
            "fidelity": fidelity,
        }
    )


def erlang_c_wait(lam, mu, c):
    a = lam / mu
    rho = a / c
    head = sum(a**k / math.factorial(k) for k in range(c))
    tail = a**c / math.factorial(c) / (1 - rho)
    return tail / (head + tail) / (c * mu - lam)


@pytest.mark.slow
@pytest.mark.parametrize("fidelity", ["step", "trajectory"])
def test_mmc_queue_matches_erlang_c_mean_wait_within_2_percent(fidelity):
    lam, mu, c = 3.2, 1.0, 4  # utilisation 0.8
    res = run(_poisson_exp(lam, mu, c, 400_000, fidelity))
    rec = next(iter(res.records.values()))
    warm = slice(10_000, None)  # drop the start-up transient
    assert rec.queue_wait[warm].mean() == pytest.approx(erlang_c_wait(lam, mu, c), rel=0.02)


@pytest.mark.slow
def test_littles_law_on_a_steady_state_run():
    lam = 2.0
    res = run(_poisson_exp(lam, 1.0, 8, 100_000))
    rec = next(iter(res.records.values()))
    # time-average number in the system over a window, against lambda x mean time in system
    t0, t1 = rec.arrival[5_000], rec.arrival[95_000]
    inside = np.minimum(rec.end, t1) - np.maximum(rec.arrival, t0)
    L = inside[inside > 0].sum() / (t1 - t0)
    sel = (rec.arrival >= t0) & (rec.arrival < t1)
    lam_hat = sel.sum() / (t1 - t0)
    W = (rec.end - rec.arrival)[sel].mean()
    assert L == pytest.approx(lam_hat * W, rel=0.01)
    assert L == pytest.approx(lam * 1.0 * (1 + 0.0), rel=0.05)  # c large: L ~ offered load


@pytest.mark.slow
def test_sync_batch_makespan_is_mean_times_harmonic_number():
    n, mean, reps = 32, 10.0, 400
    d = make(
        **{
            "workload.trajectories": n,
            "substrates.0.cold_start": {"kind": "exponential", "mean": mean},
            "cluster.concurrency": n,
            "policy": {"mode": "sync", "batch_size": n},
            "replications": reps,
            "fidelity": "trajectory",
        }
    )
    cells = run(d, keep_records=False).cells
    spans = cells.makespan_hours.to_numpy() * 3600
    h_n = sum(1 / k for k in range(1, n + 1))
    var = sum(1 / k**2 for k in range(1, n + 1)) * mean**2  # variance of the max of n exponentials
    assert abs(spans.mean() - mean * h_n) < 3 * math.sqrt(var / reps)


def test_barrier_holds_the_next_batch_until_the_slowest_ends():
    d = make(
        **{
            "workload.trajectories": 8,
            "substrates.0.cold_start": {"kind": "exponential", "mean": 5.0},
            "cluster.concurrency": 8,
            "policy": {"mode": "sync", "batch_size": 4},
        }
    )
    rec = next(iter(run(d).records.values()))
    assert rec.start[4:].min() == pytest.approx(rec.end[:4].max())
    assert rec.start[4:].min() > np.sort(rec.end[:4])[0]


def _staggered(k: int, gap: float, **over):
    """k one-step trajectories whose creates are spaced ``gap`` apart by the create-rate limit."""
    return make(
        **{
            "workload.trajectories": k,
            "workload.steps": 1,
            "workload.calls_per_step": 1,
            "substrates.0.cold_start": 0.1,
            "substrates.0.create_rate": 1.0 / gap,
            "cluster.concurrency": k,
            "fidelity": "step",
            **over,
        }
    )


def _overlap_reference(starts, base, factor):
    """Each operation's latency is base x factor(n), n = operations still running at its start,
    itself included: a direct sequential computation of the definition."""
    ends = []
    for t in starts:
        n = 1 + sum(e > t + 1e-12 for e in ends)
        ends.append(t + base * factor(n))
    return np.array(ends) - np.array(starts)


def test_host_contention_follows_operations_in_flight():
    k, gap, base, slope = 12, 0.37, 2.0, 0.15  # no two events at the same instant
    d = _staggered(k, gap, **{"substrates.0.exec_overhead": base, "substrates.0.contention": {"exec": slope}})
    rec = next(iter(run(d).records.values()))
    order = np.argsort(rec.start + rec.acquire_wait)
    # exec i starts when its create ends: (i) x gap + 0.1; the creates never overlap (0.1 < gap)
    starts = np.arange(k) * gap + 0.1
    expected = _overlap_reference(starts, base, lambda n: 1 + slope * (n - 1))
    got = (rec.duration - rec.acquire_wait - 0.1)[order]
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    assert expected.max() > base * (1 + slope * 2)  # several execs did overlap


def test_loaded_inference_tier_follows_requests_per_engine():
    k, gap, base, slowdown = 12, 0.37, 3.0, 0.4
    d = _staggered(k, gap, **{"workload.llm_time": base, "workload.calls_per_step": 0,
                              "cluster.inference": {"engines": 1, "slowdown": slowdown}})  # fmt: skip
    rec = next(iter(run(d).records.values()))
    starts = np.arange(k) * gap + 0.1
    expected = _overlap_reference(starts, base, lambda n: 1 + slowdown * (n - 1))
    order = np.argsort(rec.start + rec.acquire_wait)
    np.testing.assert_allclose(rec.llm[order], expected, rtol=1e-9)
    # with two engines, least-loaded routing halves the requests each one runs
    d2 = _staggered(k, gap, **{"workload.llm_time": base, "workload.calls_per_step": 0,
                               "cluster.inference": {"engines": 2, "slowdown": slowdown}})  # fmt: skip
    rec2 = next(iter(run(d2).records.values()))
    assert rec2.llm.sum() < rec.llm.sum()
    assert rec2.llm.min() == pytest.approx(base)
