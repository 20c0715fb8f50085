"""The training loop on the compiled engine (simrollout.sim.compiled_training) against the step
engine and the trajectory engine, its bookkeeping, and what it covers."""

from __future__ import annotations

import numpy as np
import pytest

from simrollout.errors import InputError
from simrollout.run.runner import CellKey, run_cell
from simrollout.scenario import scenario_from_dict
from simrollout.validation.fidelity import Row, build, compare
from simrollout.validation.verdicts import TRAINING_TOLERANCE


def _row(extra: str = "train", load: str = "host", steps: int = 30, **training) -> dict:
    d = build(Row("async", load, extra), 0, 20, 256)
    d["training"].update(steps=steps, **training)
    return d


def _cell(d: dict, fid: str):
    scn = scenario_from_dict({**d, "fidelity": fid})
    scn._overhead_per_call = scn._tools_per_call = True  # the same draws in every engine
    res = run_cell(scn, CellKey(0, scn.cluster.levels[0], 0), keep=True)
    summary, rec = res.summary, res.records
    return summary, rec


@pytest.mark.slow
@pytest.mark.parametrize("row", [Row("async", "host", "train"), Row("async", "none", "train_fraction")],
                         ids=lambda r: r.name)  # fmt: skip
def test_within_the_training_rows_tolerance_of_the_step_engine(row):
    c = compare(row, fast="compiled")
    for metric, limit in TRAINING_TOLERANCE.items():
        assert abs(c.diff(metric)) <= limit, (row.name, metric, c.diff(metric))
    assert c.step.discarded_samples > 0 and c.step.masked_samples > 100  # the row bounds both


def test_the_loop_trains_every_group_it_says_and_its_counts_add_up():
    d = _row(steps=40)
    s, rec = _cell(d, "compiled")
    tr = d["training"]
    B, G = tr["prompts_per_step"], tr["samples_per_prompt"]
    assert s["training_steps_done"] == 40
    assert s["trained_samples"] == 40 * B * G
    causes = [k for k in s if k.startswith("discarded_") and k[10:] in
              ("over_sampling", "filter", "staleness", "failures", "weight_update", "end")]  # fmt: skip
    assert sum(s[k] for k in causes) == s["discarded_samples"] > 0
    assert s["staleness_max"] <= tr.get("max_staleness", 1)  # async's bound on trained samples
    # every started trajectory has its row; the cancelled ones are those of discarded groups
    cancelled = int((rec.status == 4).sum())
    assert 0 < cancelled <= s["discarded_samples"]
    assert len(rec.start) == s["trained_samples"] + s["discarded_samples"]
    assert (rec.end >= rec.start).all() and (rec.steps_done >= 0).all()


def test_same_seed_same_numbers_and_the_trajectory_engine_close():
    """Both read a body's steps one by one: the same loop but for the order of events at an
    instant and the compiled loop's arithmetic."""
    d = _row(steps=25)
    a, ra = _cell(d, "compiled")
    b, rb = _cell(d, "compiled")
    assert np.array_equal(ra.end, rb.end) and a["training_hours"] == b["training_hours"]
    t, _ = _cell(d, "trajectory")
    for m in (*TRAINING_TOLERANCE, "steps_under_newer_version", "cancelled", "worker_hours"):
        assert a[m] == pytest.approx(t[m], rel=0.005), m


def test_paused_engines_hold_their_sandboxes_at_the_gate():
    """pause_engines_on_sync: bodies end their step and wait at the gate while the weights load
    (their sandboxes held), as in the step engine."""
    base = _row(load="none", steps=20, weight_sync_time=60.0)
    paused, _ = _cell(base, "compiled")
    on, _ = _cell({**base, "training": {**base["training"], "pause_engines_on_sync": False}}, "compiled")
    assert paused["worker_hours"] > 1.02 * on["worker_hours"]
    step, _ = _cell(base, "step")
    assert paused["worker_hours"] == pytest.approx(step["worker_hours"], rel=0.01)


def test_what_it_does_not_cover_is_a_clear_error_when_forced():
    for training, why in (
        ({"mode": "sync", "placement": "colocated"}, "mode 'sync'"),
        ({"dynamic_sampling": {"alpha": 1.0, "beta": 1.0}}, "dynamic sampling"),
        ({"on_failure": "retry"}, "on_failure 'retry'"),
    ):
        d = _row(**training)
        with pytest.raises(InputError, match=why):
            scenario_from_dict({**d, "fidelity": "compiled"})
