"""The training loop at trajectory fidelity (simrollout.sim.loop_body) against the step engine:
known answers, and trajectory-by-trajectory agreement where nothing contends."""

from __future__ import annotations

import numpy as np
import pytest

from simrollout.errors import InputError
from simrollout.run.runner import CellKey, run_cell
from simrollout.scenario import scenario_from_dict
from simrollout.sim.model import Cell
from simrollout.sim.records import CANCELLED
from simrollout.sim.route import fidelity_choice
from simrollout.sim.workload_draws import draw_work
from simrollout.validation.fidelity import Row, build
from tests.sim.test_training import scenario


def loop_at(scn, fidelity: str):
    cell = Cell(scn, scn.substrates[0], scn.cluster.levels[0], 0,
                draw_work(scn, 0, detail=fidelity == "step"), fidelity, keep=True)  # fmt: skip
    rec = cell.run()
    return cell.loop, rec


def test_sync_step_at_trajectory_fidelity_is_the_closed_form():
    # cold 0.5 + 5 x (llm 2 x task factor + exec 0.1 + tool 1 x task factor) + teardown 0.2
    loop, _ = loop_at(scenario({"task_spread": 0.5}), "trajectory")
    assert loop.bodies is not None  # the fast bodies ran
    for k, row in enumerate(loop.step_table()):
        x = max(loop._block("task", g) for g in range(4 * k, 4 * k + 4))
        assert row["step_s"] == pytest.approx(0.5 + 5 * (3 * x + 0.1) + 0.2 + 7 + 3)


@pytest.mark.parametrize(
    "training",
    [
        # async: staleness discards cancel running members (cut at the step engine's next check)
        {"mode": "async", "placement": "disaggregated", "trainer": {"gpus": 1}, "max_staleness": 1,
         "steps": 10, "task_spread": 0.8, "train_time": 9},
        # async without partial rollouts: a weight update cancels every running group
        {"mode": "async", "placement": "disaggregated", "trainer": {"gpus": 1}, "max_staleness": 1,
         "partial_rollouts": False, "steps": 10, "task_spread": 0.8, "train_time": 9},
        # colocated sync carrying leftovers: running members wait at the gate while the engines train
        {"steps": 8, "over_sampling": 0.5, "leftover": "carry", "task_spread": 0.8},
        # one_step_off with paused engines: a barrier at every sync
        {"mode": "one_step_off", "placement": "disaggregated", "trainer": {"gpus": 1}, "steps": 8,
         "train_time": 4, "pause_engines_on_sync": True, "task_spread": 0.8},
    ],
    ids=["async-stale", "async-whole", "sync-carry", "one-step-off"],
)  # fmt: skip
def test_every_trajectory_as_in_the_step_engine_without_load(training):
    over = {"workload.llm_time": {"kind": "lognormal", "median": 2, "p99": 20},
            "workload.calls_per_step": {"kind": "discrete", "values": [1, 2, 3], "weights": [0.6, 0.3, 0.1]},
            "workload.tools": {"shell": {"weight": 1, "latency": {"kind": "lognormal", "median": 1, "p99": 9}}},
            "cluster.concurrency": 24}  # fmt: skip
    scn = scenario(training, **over)
    (a, ra), (b, rb) = loop_at(scn, "step"), loop_at(scn, "trajectory")
    assert rb.start.size == ra.start.size
    np.testing.assert_array_equal(rb.status, ra.status)
    np.testing.assert_array_equal(rb.steps_done, ra.steps_done)  # cancels cut at the same step
    np.testing.assert_allclose(rb.end, ra.end, rtol=1e-7, atol=1e-4)  # float sums in another order
    np.testing.assert_allclose(rb.llm, ra.llm, rtol=1e-7, atol=1e-4)  # float sums in another order
    assert [r["end_s"] for r in b.step_table()] == pytest.approx([r["end_s"] for r in a.step_table()])
    np.testing.assert_allclose(b.gen_steps, a.gen_steps)  # steps counted under the version they start in
    if training.get("mode") == "async":
        assert (ra.status == CANCELLED).sum() > 0  # the case exercises cancels


@pytest.mark.slow
def test_grpo_loop_at_trajectory_fidelity_on_a_loaded_host_matches_the_step_engine():
    # the fidelity matrix's async row on a host with contention, at CI size
    d = build(Row("async", "host", "train", trajectories=20), 0, 20, 256)
    runs = {f: run_cell(scenario_from_dict({**d, "fidelity": f}), CellKey(0, 256, 0), keep=False).summary
            for f in ("step", "trajectory")}  # fmt: skip
    s, t = runs["step"], runs["trajectory"]
    for m, tol in (("training_hours", 0.01), ("step_seconds_p50", 0.02), ("masked_samples", 0.03)):
        assert abs(t[m] / s[m] - 1) <= tol, m
    assert t["discarded_samples"] == s["discarded_samples"]


def test_auto_runs_a_long_loop_on_a_fast_engine_and_says_why():
    d = build(Row("async", "host", "train", trajectories=1000), 0, 20, 256)
    fid, why = fidelity_choice(scenario_from_dict(d))
    assert fid == "compiled" and "training loop" in why and "compiled training rows" in why
    d["training"]["mode"] = "one_step_off"  # its compiled rows hold too
    fid, why = fidelity_choice(scenario_from_dict(d))
    assert fid == "compiled" and "'one_step_off'" in why
    sync = {**d["training"], "mode": "sync", "dynamic_sampling": {"alpha": 1.0, "beta": 1.0}}
    fid, why = fidelity_choice(scenario_from_dict({**d, "training": sync}))  # not compiled: trajectory
    assert fid == "trajectory" and "training loop" in why
    d["training"]["mode"] = "async"
    short = build(Row("async", "host", "train", trajectories=5), 0, 20, 256)
    assert fidelity_choice(scenario_from_dict(short))[0] == "step"  # small: every step simulated
    d["training"]["on_failure"] = "retry"  # no matrix row: the step engine, said so
    fid, why = fidelity_choice(scenario_from_dict(d))
    assert fid == "step" and "on_failure 'retry'" in why


def test_trajectory_fidelity_with_training_on_a_token_workload_is_refused():
    d = build(Row("async", "none", "tokens"), 1000, 20, 256)
    d["workload"].pop("trajectories")
    d["training"] = {"prompts_per_step": 4, "steps": 2, "train_time": 1}
    with pytest.raises(InputError, match="token workload"):
        scenario_from_dict({**d, "fidelity": "trajectory"})
