"""The engine suite's simulated side: its figures taken as the real side takes them, and the drift
its probe blocks read."""

import numpy as np
import pytest

from simrollout.calibration.suite import Cell, _per_draw
from simrollout.calibration.suite_engine import ENGINE_WORKLOADS, HELD_OUT, engine_measured
from simrollout.calibration.validate_engine import agent_scenario
from simrollout.executors import run_scenario
from tests.conftest import ROOT

PROFILE = ROOT / "calibration/engines/llama-cpp-tiny.yaml"


def test_durations_are_the_real_sides_interpolated_percentiles_not_the_sketchs():
    """Over 8 trajectories the summary's lower-rank p99 is the 7th duration of 8; the real side
    (numpy's interpolated percentile) reads close to the 8th. The suite's simulated durations are
    taken the real side's way, from the records."""
    w = next(w for w in ENGINE_WORKLOADS if w.name == "many-turns")
    scn = agent_scenario(PROFILE, 8, w.steps, [1, 4], w.prompt, w.appended, w.output, w.tool, seed=3)
    res = run_scenario(scn, jobs=1, executor="serial", keep_records=True)
    got = engine_measured(res).set_index("concurrency")
    for key, rec in res.records.items():
        dur = np.sort(np.asarray(rec.end) - np.asarray(rec.start))
        assert got.loc[key.concurrency, "duration_p50"] == pytest.approx((dur[3] + dur[4]) / 2)
        assert got.loc[key.concurrency, "duration_p99"] == pytest.approx(dur[6] + 0.93 * (dur[7] - dur[6]))
        summary = res.summary.set_index("concurrency").loc[key.concurrency]
        assert summary.duration_p99 == pytest.approx(dur[6], rel=2e-3)  # the sketch's lower rank
    # the request percentiles and makespan are the summary's (already numpy's)
    assert list(got.request_p50) == list(res.summary.llm_request_p50)
    # the suite's draws keep the records, so its points are read the same way
    table = _per_draw(scn, engine_measured, 2)
    assert set(table.draw) == {0, 1} and (table.duration_p99 > 0).all()


def test_the_default_engine_workloads_are_the_held_out_ones():
    assert set(HELD_OUT) <= {w.name for w in ENGINE_WORKLOADS}
    assert "many-turns" not in HELD_OUT and "long-prompt" not in HELD_OUT
    assert Cell(next(w for w in ENGINE_WORKLOADS if w.name in HELD_OUT), 8).label.endswith("@8")
