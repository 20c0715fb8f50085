"""The fidelity matrix's training rows: wherever ``fidelity: auto`` runs a training loop on the
trajectory engine, it agrees with the step engine within the tolerances of docs/fidelity.md."""

from __future__ import annotations

import pytest

from simrollout.scenario import scenario_from_dict
from simrollout.sim import route
from simrollout.sim.route import fidelity_choice
from simrollout.validation.fidelity import Row, build, compare, training_rows, unbacked


def _auto(row: Row) -> tuple[str, str]:
    """What auto runs for ``row``'s loop at 1,000 steps."""
    d = build(row, 0, 20, 256)
    d["training"]["steps"] = 1000
    return fidelity_choice(scenario_from_dict(d))


@pytest.mark.slow
@pytest.mark.parametrize("row", training_rows(), ids=lambda r: r.name)
def test_training_row_holds_where_auto_uses_a_fast_engine(row: Row):
    fid, why = _auto(row)
    if fid == "step":  # routed: a loaded inference tier, said so
        assert row.load in route.TIER_LOADS and "loaded inference tier" in why
        return
    assert row.name not in route.ROUTED
    c = compare(row, steps=20, fast=fid)  # the engine auto runs: trajectory, or compiled
    assert c.fidelity == fid in ("trajectory", "compiled")
    for metric, limit in route.TRAINING_TOLERANCE.items():
        assert abs(c.diff(metric)) <= limit, f"{row.name}: {metric} {c.diff(metric):+.2f}% (limit {limit}%)"
    if row.extra in ("train_over", "train_dynamic", "train_whole") or row.policy == "async":
        assert c.step.discarded_samples > 0  # the row exercises the discards it bounds
    assert c.step.masked_samples > 100


def test_routed_rows_are_rows_of_the_matrix_and_forcing_one_warns():
    names = {r.name for r in training_rows()}
    assert set(route.ROUTED) <= names
    d = build(Row("async", "both", "train"), 0, 20, 256)
    scn = scenario_from_dict({**d, "fidelity": "trajectory"})
    warning = unbacked(scn)
    assert warning and "async/both/train" in warning and "discarded_samples -22.92%" in warning
    d = build(Row("async", "host", "train"), 0, 20, 256)
    assert unbacked(scenario_from_dict({**d, "fidelity": "trajectory"})) is None


def test_auto_runs_the_grpo_async_scenario_loop_on_the_compiled_engine():
    from simrollout.scenario import load_scenario

    scn = load_scenario("scenarios/grpo_async.yaml")
    long = scn.model_copy(update={"training": scn.training.model_copy(update={"steps": 1000})})
    fid, why = fidelity_choice(long)
    assert fid == "compiled" and "'async'" in why
