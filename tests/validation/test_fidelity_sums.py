"""Exec overhead sums drawn at once (simrollout.distributions.nfold) against the calls drawn one
by one, in the trajectory engine, in every mode of the fidelity matrix where ``auto`` uses it.

The fidelity matrix compares the engines on the same numbers (the calls drawn one by one); a run
draws each trajectory's sum at once: the same law, other numbers. Here the two draws must agree
within the matrix's tolerance of the row, and the exec overhead within its sampling error."""

from __future__ import annotations

import numpy as np
import pytest

from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from simrollout.sim.route import resolved_fidelity
from simrollout.validation.fidelity import METRICS, TOLERANCE, Row, build, matrix

ROWS = [r for r in matrix() if r.extra != "tokens" and not r.trajectories] + [
    Row("async", "tier", "tokens"),
    Row("async", "both", trajectories=12_000),
]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_sums_drawn_at_once_agree_with_the_calls_drawn_one_by_one(row: Row):
    if resolved_fidelity(scenario_from_dict(build(row, 1_000_000, 20, 256))) != "trajectory":
        pytest.skip("auto runs the step engine in this mode")
    d = build(row, row.trajectories or 2000, 20, 256)
    out = {}
    for per_call in (True, False):
        scn = scenario_from_dict({**d, "fidelity": "trajectory"})
        scn._overhead_per_call = per_call
        scn._tools_per_call = True  # the tools' numbers common to both: the exec overhead's sums alone
        res = run_scenario(scn, jobs=1)
        (rec,) = res.records.values()
        out[per_call] = res.summary.iloc[0], rec
    (a, ra), (b, rb) = out[True], out[False]
    assert not np.array_equal(ra.overhead, rb.overhead)  # other numbers ...
    se = float(np.hypot(ra.overhead.std(), rb.overhead.std())) / np.sqrt(len(ra.overhead))
    assert abs(b.tax_exec_overhead_s - a.tax_exec_overhead_s) < 4 * se + 1e-9  # ... the same law
    for metric, limit in TOLERANCE[row.regime].items():
        assert metric in METRICS
        diff = (b[metric] / a[metric] - 1) * 100 if a[metric] else 0.0
        assert abs(diff) <= limit, f"{row.name}: {metric} {diff:+.2f}% (limit {limit}%)"


@pytest.mark.parametrize(
    "row",
    [pytest.param(Row("async", "both", "timeouts"), marks=pytest.mark.slow), Row("async", "tier")],
    ids=lambda r: r.name,
)
def test_tool_sums_drawn_at_once_agree_within_their_sampling_error(row: Row):
    """Tool latency sums drawn at once (the calls of a body near its deadline drawn too, scaled to
    the sum) against the calls drawn one by one: other numbers, so each figure within its
    sampling error (the tools are heavy-tailed: shell p99 235 s)."""
    d = build(row, 20_000, 20, 256)
    out = {}
    for per_call in (True, False):
        scn = scenario_from_dict({**d, "fidelity": "trajectory"})
        scn._tools_per_call = per_call
        res = run_scenario(scn, jobs=1)
        (rec,) = res.records.values()
        out[per_call] = res.summary.iloc[0], rec
    (a, ra), (b, rb) = out[True], out[False]
    n = len(ra.end)
    assert not np.array_equal(ra.duration, rb.duration)
    se = float(np.hypot(ra.worker.std(), rb.worker.std())) / np.sqrt(n)
    assert abs(b.worker_hours - a.worker_hours) * 3600 / n < 4 * se
    for p in (0.5, 0.99):  # each run's quantile inside the other's at p +- 4 standard errors of rank
        w = 4 * np.sqrt(2 * p * (1 - p) / n)
        for x, y in ((ra.duration, rb.duration), (rb.duration, ra.duration)):
            lo, hi = np.quantile(y, [p - w, p + w])
            assert lo <= np.quantile(x, p) <= hi, p
    for status in np.unique(np.concatenate([ra.status, rb.status])):
        pa, pb = (ra.status == status).mean(), (rb.status == status).mean()
        assert abs(pa - pb) <= 4 * np.sqrt((pa * (1 - pa) + pb * (1 - pb)) / n) + 1 / n, status
