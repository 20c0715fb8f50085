"""The training loop against answers known in closed form (issue: the RL training loop)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from simrollout.run.runner import CellKey, run_cell
from simrollout.scenario import scenario_from_dict
from simrollout.sim.model import Cell
from simrollout.sim.workload_draws import draw_work
from tests.conftest import make

# every trajectory: cold 0.5 + 5 x (llm 2 + exec 0.1 + tool 1) + teardown 0.2 = 16.2 s
CONST = {
    "workload.steps": 5,
    "workload.llm_time": 2,
    "workload.calls_per_step": 1,
    "workload.tools": {"shell": {"weight": 1, "latency": 1}},
    "substrates.0.cold_start": 0.5,
    "substrates.0.exec_overhead": 0.1,
    "substrates.0.teardown": 0.2,
    "cluster.concurrency": 64,
}


def scenario(training: dict, **over):
    d = make(**{**CONST, **over})
    d["workload"].pop("trajectories")
    d["training"] = {"prompts_per_step": 4, "samples_per_prompt": 4, "steps": 6, "train_time": 7,
                     "weight_sync_time": 3, **training}  # fmt: skip
    return scenario_from_dict(d)


def loop_of(scn, concurrency=None):
    cell = Cell(scn, scn.substrates[0], concurrency or scn.cluster.levels[0], 0,
                draw_work(scn, 0, detail=True), "step", keep=True)  # fmt: skip
    rec = cell.run()
    return cell.loop, rec


def test_sync_step_is_the_slowest_trajectory_plus_train_and_sync():
    loop, _ = loop_of(scenario({}))
    steps = loop.step_table()
    assert len(steps) == 6
    for row in steps:
        assert row["step_s"] == pytest.approx(16.2 + 7 + 3)
        assert row["last_group_s"] == pytest.approx(0.0)  # constant durations: no straggler wait
    # with a per-prompt duration factor, each step waits for its slowest prompt
    loop, _ = loop_of(scenario({"task_spread": 0.5}))
    for k, row in enumerate(loop.step_table()):
        x = max(loop._block("task", g) for g in range(4 * k, 4 * k + 4))
        assert row["step_s"] == pytest.approx(0.5 + 5 * (3 * x + 0.1) + 0.2 + 7 + 3)
        assert row["last_group_s"] > 0


@pytest.mark.parametrize("train", [4.0, 30.0])
@pytest.mark.parametrize("pause", [False, True])
def test_one_step_off_step_is_max_of_generation_and_train_plus_sync(train, pause):
    disagg = {
        "mode": "one_step_off",
        "placement": "disaggregated",
        "trainer": {"gpus": 1},
        "train_time": train,
        "pause_engines_on_sync": pause,
    }
    loop, _ = loop_of(scenario({**disagg, "steps": 8}))
    steps = loop.step_table()
    assert len(steps) == 8
    # A batch starts as the one before is gathered, which the trainer takes at once. Training 4 s,
    # the sync runs 4-7 s into the batch: its samples start their turns at 0.5, 3.6, 6.7, ... s
    # (cold 0.5, a turn 2 + 0.1 + 1 s), so with the engines paused the third turn waits 0.3 s to
    # 7 s. Training 30 s, the batch is done (16.2 s) before the sync: nothing waits.
    gen = 16.2 + (0.3 if pause and train == 4.0 else 0.0)
    for row in steps[2:]:  # after the pipeline fills
        assert row["step_s"] == pytest.approx(max(gen, train + 3))
    assert max(loop.staleness) == 1


@pytest.mark.parametrize("staleness", [0, 1, 3])
@pytest.mark.parametrize("partial", [True, False])
def test_async_staleness_never_exceeds_the_bound(staleness, partial):
    scn = scenario(
        {"mode": "async", "placement": "disaggregated", "trainer": {"gpus": 1}, "max_staleness": staleness,
         "partial_rollouts": partial, "steps": 12, "task_spread": 0.8, "train_time": 9},
        **{"workload.llm_time": {"kind": "lognormal", "median": 2, "p99": 20}, "cluster.concurrency": 24},
    )  # fmt: skip
    loop, _ = loop_of(scn)
    assert len(loop.staleness) == 12 * 16  # every step trained on B x G samples
    assert max(loop.staleness) <= staleness
    if staleness:
        assert max(loop.staleness) >= 1  # the bound is used, not just respected


def test_one_prompt_per_group_with_batch_c_is_todays_sync_batch():
    over = {**CONST, "workload.llm_time": {"kind": "lognormal", "median": 2, "p99": 20},
            "workload.trajectories": 96, "cluster.concurrency": 16,
            "cluster.inference": {"engines": 4, "slowdown": 0.05}}  # fmt: skip
    batch = scenario_from_dict(make(**over, **{"policy.mode": "sync", "policy.batch_size": 16}))
    d = make(**over)
    d["workload"].pop("trajectories")
    d["training"] = {"prompts_per_step": 16, "samples_per_prompt": 1, "steps": 6, "train_time": 0}
    loop_scn = scenario_from_dict(d)
    a = run_cell(batch, CellKey(0, 16, 0)).records
    b = run_cell(loop_scn, CellKey(0, 16, 0)).records
    assert b.start.size == 96
    np.testing.assert_allclose(np.sort(b.end), np.sort(a.end))
    np.testing.assert_allclose(b.worker.sum(), a.worker.sum())


def test_expected_maximum_of_a_step_matches_integration():
    # one step of pure generation per trajectory: a step waits for the max of B x G draws
    dist = {"kind": "lognormal", "median": 3.0, "p99": 30.0}
    scn = scenario({"steps": 300, "train_time": 0, "weight_sync_time": 0},
                   **{"workload.steps": 1, "workload.llm_time": dist, "workload.calls_per_step": 0,
                      "substrates.0.cold_start": 0, "substrates.0.exec_overhead": 0,
                      "substrates.0.teardown": 0})  # fmt: skip
    loop, _ = loop_of(scn)
    gen = np.array([r["step_s"] for r in loop.step_table()])
    sigma = np.log(30 / 3) / stats.norm.ppf(0.99)
    F = stats.lognorm(s=sigma, scale=3.0).cdf
    expected = integrate.quad(lambda x: 1 - F(x) ** 16, 0, np.inf, limit=200)[0]
    assert abs(gen.mean() - expected) < 3 * gen.std(ddof=1) / np.sqrt(gen.size)


def test_over_sampling_never_lengthens_a_step():
    dist = {"kind": "lognormal", "median": 2, "p99": 20}
    for seed in range(8):
        over = {"workload.llm_time": dist, "seed": seed}
        base = loop_of(scenario({"steps": 1, "task_spread": 0.5}, **over))[0].step_table()[0]
        more = loop_of(scenario({"steps": 1, "task_spread": 0.5, "over_sampling": 0.5}, **over))[0]
        assert more.step_table()[0]["step_s"] <= base["step_s"] + 1e-9
        assert more.discard["over_sampling"][3] > 0  # the unused groups were cancelled
    # over many steps, the mean step is shorter
    a = loop_of(scenario({"steps": 20, "task_spread": 0.5}, **{"workload.llm_time": dist}))[0]
    b = loop_of(
        scenario({"steps": 20, "task_spread": 0.5, "over_sampling": 0.5}, **{"workload.llm_time": dist})
    )[0]
    assert np.mean([r["step_s"] for r in b.step_table()]) < np.mean([r["step_s"] for r in a.step_table()])


def test_dynamic_sampling_keeps_groups_at_the_beta_rate():
    ds = {"alpha": 2.0, "beta": 3.0}
    scn = scenario({"steps": 40, "samples_per_prompt": 4, "dynamic_sampling": ds, "train_time": 1,
                    "weight_sync_time": 0}, **{"workload.steps": 1, "workload.calls_per_step": 0})  # fmt: skip
    loop, _ = loop_of(scn)
    seen = loop.filtered + loop.passed
    kept = loop.passed / seen
    p = scn.training.dynamic_sampling.keep_rate(4)
    # 1 - E[p^G] - E[(1-p)^G] by integration over the Beta
    beta = stats.beta(2.0, 3.0)
    ref = 1 - integrate.quad(lambda x: (x**4 + (1 - x) ** 4) * beta.pdf(x), 0, 1)[0]
    assert p == pytest.approx(ref, rel=1e-9)
    assert abs(kept - p) < 3 * np.sqrt(p * (1 - p) / seen)
    assert len(loop.step_table()) == 40  # more groups were started until B useful were ready


def test_failures_masked_dropped_or_retried():
    fail = {"substrates.0.failures": {"exec": 0.05}, "cluster.concurrency": 64}
    masked, _ = loop_of(scenario({"steps": 8}, **fail))
    assert sum(r["masked"] for r in masked.step_table()) > 0
    dropped, _ = loop_of(scenario({"steps": 8, "on_failure": "drop_group"}, **fail))
    assert sum(r["masked"] for r in dropped.step_table()) == 0
    assert dropped.discard["failures"][3] > 0
    retried, _ = loop_of(scenario({"steps": 8, "on_failure": "retry", "retries": 5}, **fail))
    assert sum(r["masked"] for r in retried.step_table()) == 0
    assert len(retried.step_table()) == 8


def test_colocated_engines_hold_generation_while_training():
    # carried trajectories keep running through training, but start no generation in it
    scn = scenario({"steps": 6, "over_sampling": 1.0, "leftover": "carry", "task_spread": 0.8, "train_time": 40},
                   **{"cluster.inference": {"engines": 64}})  # fmt: skip
    calls = []
    loop, _ = loop_of(scn)  # a first run to learn the training windows
    windows = [(r["end_s"] - r["train_s"] - r["sync_s"], r["end_s"]) for r in loop.step_table()]
    cell = Cell(scn, scn.substrates[0], 64, 0, draw_work(scn, 0, detail=True), "step")
    duration = cell.tier.duration

    def spy(base):
        calls.append(cell.env.now)
        return duration(base)

    cell.tier.duration = spy
    cell.run()
    assert calls
    for t in calls:
        assert not any(a < t < b for a, b in windows)
    assert cell.loop.discard["over_sampling"][3] == 0  # carried, not cancelled


def test_a_run_out_of_budget_says_so():
    from simrollout.run.executors import run_scenario

    d = make(**CONST)
    d["workload"]["trajectories"] = 40  # a cap: 2.5 steps of 16
    d["training"] = {"prompts_per_step": 4, "samples_per_prompt": 4, "steps": 6, "train_time": 7}
    scn = scenario_from_dict(d)
    assert scn.trajectories == 40
    res = run_scenario(scn, executor="serial")
    row = res.summary.iloc[0]
    assert row.training_steps_done == 2 and row.training_steps == 6
    assert row.trajectories == 40  # two groups of the third step ran, and were left at the end
    assert row.discarded_end == 8
    from io import StringIO

    from rich.console import Console

    from simrollout.run.report import print_table

    buf = StringIO()
    print_table(res, Console(file=buf, width=300))
    assert "only 2 of 6 steps trained" in buf.getvalue()


@pytest.mark.slow
def test_every_combination_of_the_loop_trains_its_steps():
    """Modes x partial rollouts x leftovers x failure handling x dynamic sampling x over-sampling,
    with lost sandboxes, timeouts and a loaded tier: every run trains all its steps, every
    trajectory run has one outcome, and async staleness stays within its bound."""
    import itertools

    from simrollout.run.executors import run_scenario

    over = {**CONST, "workload.steps": {"kind": "lognormal", "median": 4, "p99": 20},
            "workload.llm_time": {"kind": "lognormal", "median": 1, "p99": 10}, "cluster.concurrency": 24,
            "substrates.0.failures": {"exec": 0.01}, "cluster.inference": {"engines": 3, "slowdown": 0.05},
            "policy": {"timeout": 60, "retries": 1}}  # fmt: skip
    combos = itertools.product(["sync", "one_step_off", "async"], [True, False], ["cancel", "carry"],
                               ["mask", "drop_group", "retry"], [None, {"alpha": 1, "beta": 1}], [0, 0.5])  # fmt: skip
    runs = 0
    for mode, partial, leftover, on_failure, ds, f in combos:
        if mode == "async" and (f or leftover == "carry"):
            continue
        tr = {"prompts_per_step": 3, "samples_per_prompt": 4, "steps": 5, "mode": mode, "partial_rollouts": partial,
              "leftover": leftover, "on_failure": on_failure, "over_sampling": f, "train_time": 8,
              "task_spread": 0.5, "dynamic_sampling": ds}  # fmt: skip
        if mode != "sync":
            tr.update(placement="disaggregated", trainer={"gpus": 1})
        r = run_scenario(scenario({k: v for k, v in tr.items() if v is not None}, **over), executor="serial",
                         keep_records=False).summary.iloc[0]  # fmt: skip
        case = (mode, partial, leftover, on_failure, ds, f)
        assert r.training_steps_done == 5, case
        assert r.completed + r.failed + r.timeouts + r.cancelled == r.trajectories, case
        assert r.trained_samples == 5 * 12, case
        if mode == "async":
            assert r.staleness_max <= 1, case
        runs += 1
    assert runs == 108


def test_length_bias_of_a_bound_that_always_discards_the_long_mode():
    """A quarter of the prompts take 400 turns of 1 s, the rest 1 turn: a step takes a few seconds
    (short samples are plenty within the bound), so every long sample lags by more than the bound
    of 5 versions long before it ends, and training sees only the short mode while the loop starts
    both."""
    scn = scenario(
        {"mode": "async", "placement": "disaggregated", "trainer": {"gpus": 1}, "max_staleness": 5,
         "partial_rollouts": True, "steps": 20, "samples_per_prompt": 1, "train_time": 1,
         "weight_sync_time": 0.5},
        **{"workload.steps": {"kind": "discrete", "values": [1, 400], "weights": [3, 1]},
           "workload.llm_time": 1, "workload.tools": {"shell": {"weight": 1, "latency": 0}},
           "cluster.concurrency": 64},
    )  # fmt: skip
    loop, _ = loop_of(scn)
    out = loop.summary(0, 0.0)
    assert out["training_steps_done"] == 20
    assert out["discarded_staleness"] > 0
    assert out["trained_mean_turns"] == 1.0 and out["trained_mean_body_seconds"] == pytest.approx(1.0)
    assert out["stale_mean_turns"] == 400.0 and out["stale_mean_body_seconds"] == pytest.approx(400.0)
    started = loop.cell.work.steps[loop.started]
    assert set(np.unique(started)) == {1, 400}
    assert out["started_mean_turns"] == pytest.approx(started.mean())
    assert out["length_bias_turns"] == pytest.approx(1.0 / started.mean())
    assert out["length_bias_turns"] < 0.2
    # sync without over-sampling trains every group it starts: no bias
    sync, _ = loop_of(
        scenario(
            {"steps": 4}, **{"workload.steps": {"kind": "discrete", "values": [1, 40], "weights": [1, 1]}}
        )
    )
    s = sync.summary(0, 0.0)
    assert np.isnan(s["stale_mean_turns"])
    assert s["length_bias_turns"] == pytest.approx(1.0)
