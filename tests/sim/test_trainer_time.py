"""The trainer's per-step terms on the loop (simrollout.sim.trainer_time): ``critical_path`` and
the colocated costs add their seconds to every step, the same on the compiled engine."""

from __future__ import annotations

import pytest

from simrollout.run.runner import CellKey, run_cell
from simrollout.scenario import scenario_from_dict
from simrollout.validation.fidelity import Row, build


def _run(d: dict, fid: str = "step") -> dict:
    scn = scenario_from_dict({**d, "fidelity": fid})
    scn._overhead_per_call = scn._tools_per_call = True  # the same draws in every engine
    summary = run_cell(scn, CellKey(0, scn.cluster.levels[0], 0), keep=True).summary
    return summary


def _sync(steps: int = 6, **training) -> dict:
    d = build(Row("sync", "none", "train"), 0, 20, 256)
    d["training"].update(steps=steps, **training)
    return d


@pytest.mark.slow
def test_critical_path_and_colocated_costs_add_their_seconds_to_every_sync_step():
    flops = {"kind": "flops", "tokens_per_gpu_second": 5000.0, "tokens_per_turn": 500.0,
             "colocated": {"fitted_s": 40.0, "sleep_wake_s": 5.0}}  # fmt: skip
    base = _run(_sync(train_time={**flops, "colocated": None}, model={"params_b": 2.0}))
    more = _run(_sync(train_time=flops, model={"params_b": 2.0}, critical_path=55.0))
    # 6 steps x (40 + 5 + 55) s on the trainer's path of a sync loop: 600 s more
    assert (more["training_hours"] - base["training_hours"]) * 3600 == pytest.approx(600.0, rel=0.01)


@pytest.mark.slow
def test_the_compiled_loop_applies_the_new_terms_as_the_trajectory_engine_does():
    d = build(Row("async", "host", "train"), 0, 20, 256)
    d["training"].update(
        steps=8, critical_path=30.0, model={"params_b": 2.0},
        train_time={"kind": "flops", "tokens_per_gpu_second": 4000.0, "tokens_half": 20000.0,
                    "logprob_tokens_per_gpu_second": 12000.0, "tokens_per_turn": 500.0},
    )  # fmt: skip
    a, t = _run(d, "compiled"), _run(d, "trajectory")
    for m in ("training_hours", "step_seconds_p50", "trained_samples"):
        assert a[m] == pytest.approx(t[m], rel=0.005), m
    assert a["step_seconds_p50"] > 30.0  # the critical path alone
