"""The steady state waited one trajectory at a time (simrollout.sim.steady): where it applies,
that it follows the full trajectory engine, and that it is reproducible. The fidelity matrix's
``.../12k`` rows hold it against the step engine (tests/test_fidelity.py)."""

from __future__ import annotations

import pytest

from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from simrollout.sim.steady import Steady
from simrollout.validation.fidelity import METRICS, TOLERANCE, Row, build


def _run(d: dict, monkeypatch=None, steady: bool = True):
    if not steady:
        monkeypatch.setattr(Steady, "applies", staticmethod(lambda cell: False))
    return run_scenario(scenario_from_dict({**d, "fidelity": "trajectory"}), jobs=1, keep_records=True)


@pytest.mark.parametrize("load", ["host", "both"])
def test_one_wait_trajectories_follow_the_full_trajectory_engine(monkeypatch, load):
    d = build(Row("async", load), 12_000, 20, 256)
    fast = _run(d)
    s = fast.summary.iloc[0]
    assert 0.5 < s.one_wait_fraction < 15 / 16  # one in sixteen runs in full
    full = _run(d, monkeypatch, steady=False).summary.iloc[0]
    assert full.one_wait_fraction == 0
    for m in METRICS:
        assert abs(s[m] / full[m] - 1) * 100 <= TOLERANCE["loaded"].get(m, 3.0), m
    rec = next(iter(fast.records.values()))
    assert (rec.end >= rec.start).all() and (rec.cold > 0).all()  # every row was filled
    assert len(rec.start) == 12_000 and (rec.status == 0).all()


def test_same_seed_same_numbers():
    d = build(Row("async", "both", "failures"), 8_000, 10, 128)
    a, b = _run(d).summary.iloc[0], _run(d).summary.iloc[0]
    assert a.one_wait_fraction > 0.4
    assert a.equals(b)


def test_create_failures_run_in_full_and_are_counted(monkeypatch):
    d = build(Row("async", "host", "failures"), 8_000, 10, 128)
    d["substrates"][0]["failures"] = {"create": 0.2}
    d["policy"]["retries"] = 0
    s = _run(d).summary.iloc[0]
    assert s.one_wait_fraction > 0.4
    assert 0.15 < s.failed / s.trajectories < 0.25  # a fifth of the creates fail, one-wait or not
    # the same trajectories fail as in the full engine (their uniforms fall below the rate)
    assert s.failed == _run(d, monkeypatch, steady=False).summary.iloc[0].failed


@pytest.mark.parametrize(
    "change",
    [
        {"policy": {"mode": "async", "warm_pool": 32}},
        {"policy": {"mode": "sync", "batch_size": 256}},
        {"arrivals": {"kind": "poisson", "rate": 1.0}},
    ],
    ids=["warm_pool", "sync", "poisson"],
)
@pytest.mark.slow
def test_not_used_where_the_matrix_never_compared_it(change):
    d = build(Row("async", "both"), 12_000, 10, 256)
    d.update(change)
    assert _run(d).summary.iloc[0].one_wait_fraction == 0


def test_too_short_for_a_window_runs_in_full():
    d = build(Row("async", "both"), 3_000, 10, 256)
    assert _run(d).summary.iloc[0].one_wait_fraction == 0


@pytest.mark.slow
def test_the_table_and_summary_say_how_many_waited_at_once(tmp_path):
    import json

    import yaml

    from tests.conftest import cli

    d = build(Row("async", "both"), 12_000, 10, 256)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**d, "fidelity": "trajectory"}))
    r = cli("run", path, "-o", tmp_path / "out", "--no-records")
    assert r.returncode == 0, r.stderr
    assert "of trajectories waited at once in the steady state" in " ".join(r.stdout.split())
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["summary"][0]
    assert 0.5 < summary["one_wait_fraction"] < 1


def test_fails_within_agrees_with_first_failure_call_by_call():
    import numpy as np

    from simrollout.sim.substrate_draws import fails_within, first_failure

    rng = np.random.default_rng(0)
    u, calls = rng.random(2000), rng.integers(0, 200, 2000)
    for p in (0.0, 1e-4, 0.01, 0.3, 1.0):
        want = [first_failure(float(a), p, int(c)) > 0 for a, c in zip(u, calls)]
        assert fails_within(u, p, calls).tolist() == want


def test_engine_busy_time_integrates_the_bodies_running():
    from array import array

    from simrollout.sim.load import busy_integral

    # 0-1 s none, 1-2 s one, 2-3 s two, 3-5 s one (a start and two ends at 3 s: nothing lasts
    # between them); more bodies than the curve has counts read its last figure
    assert busy_integral(array("d", [1, 2, 3]), array("d", [3, 5, 3]), [0.0, 10.0, 20.0]) == 50.0
    assert busy_integral(array("d", [0, 0, 0]), array("d", [2, 2, 2]), [0.0, 1.0, 4.0]) == 8.0
    assert busy_integral(array("d"), array("d"), [0.0, 1.0]) == 0.0
