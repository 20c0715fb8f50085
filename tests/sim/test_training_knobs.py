"""The frameworks' loop knobs against answers worked out by hand: a trainer with physics, the sync
interval, streaming mini-batches, staleness as a fraction and the stale-sample policy, and the
per-step columns the frameworks report."""

from __future__ import annotations

import numpy as np
import pytest

from simrollout.errors import InputError
from tests.sim.test_training import loop_of, scenario

# every trajectory of test_training's CONST: 16.2 s, 5 turns; B x G = 4 x 4 samples a step
DISAGG = {"placement": "disaggregated", "trainer": {"gpus": 2}}
# 1B parameters, 1,000 tokens trained per turn: a step trains 16 x 5 x 1,000 = 80,000 tokens,
# 6 x 1e9 x 8e4 = 4.8e14 FLOPs of forward and backward passes
FLOPS = {
    "kind": "flops",
    "peak_tflops": 100,
    "mfu": 0.5,
    "tokens_per_turn": 1000,
    "recompute_logprobs": False,
}
MODEL = {"params_b": 1.0}


@pytest.mark.parametrize(
    ("train_time", "gpus", "expected"),
    [
        (FLOPS, 2, 4.8e14 / (2 * 100e12 * 0.5)),  # 4.8 s
        (FLOPS, 4, 4.8e14 / (4 * 100e12 * 0.5)),  # twice the GPUs: half the time
        ({**FLOPS, "recompute_logprobs": True}, 2, 4.8 * (1 + 1 / 3)),  # a forward pass: 2 of 6 FLOPs
        (
            {**FLOPS, "recompute_logprobs": True, "reference_logprobs": True, "intercept": 1.5},
            2,
            1.5 + 4.8 * (1 + 2 / 3),
        ),  # fmt: skip
        (
            {
                "kind": "flops",
                "tokens_per_gpu_second": 10_000,
                "tokens_per_turn": 1000,
                "recompute_logprobs": False,
            },
            2,
            80_000 / (10_000 * 2),
        ),  # fmt: skip
    ],
)
def test_flops_train_time_from_tokens_model_and_trainer_gpus(train_time, gpus, expected):
    tr = {**DISAGG, "trainer": {"gpus": gpus}, "model": MODEL, "train_time": train_time,
          "weight_sync_time": {"kind": "transfer", "gb_per_s": 4, "latency": 0.5}}  # fmt: skip
    loop, _ = loop_of(scenario(tr))
    sync = 0.5 + 1e9 * 2 / 4e9  # 2 GB of bf16 weights over 4 GB/s
    for row in loop.step_table():
        assert row["train_s"] == pytest.approx(expected)
        assert row["sync_s"] == pytest.approx(sync)
        assert row["step_s"] == pytest.approx(16.2 + expected + sync)


def test_colocated_flops_train_on_every_engine_gpu():
    tr = {"model": {"params_b": 2.0}, "train_time": FLOPS}
    loop, _ = loop_of(scenario(tr, **{"cluster.inference": {"engines": 4}}))
    assert loop.step_table()[0]["train_s"] == pytest.approx(2 * 4.8e14 / (4 * 100e12 * 0.5))
    # a mixture of experts computes with its active parameters
    tr["model"] = {"params_b": 30.0, "active_params_b": 3.0}
    loop, _ = loop_of(scenario(tr, **{"cluster.inference": {"engines": 4}}))
    assert loop.step_table()[0]["train_s"] == pytest.approx(3 * 4.8e14 / (4 * 100e12 * 0.5))


def test_sync_every_trains_a_windows_steps_then_syncs_once():
    # sync_every 2: both steps' 8 groups start at once and are ready at 16.2 s; step 0 trains 7 s,
    # step 1 trains 7 s on the groups already waiting, then one 3 s sync
    loop, _ = loop_of(scenario({**DISAGG, "sync_every": 2}))
    rows = loop.step_table()
    assert len(rows) == 6
    for a, b in zip(rows[::2], rows[1::2], strict=True):
        assert a["step_s"] == pytest.approx(16.2 + 7) and a["sync_s"] == 0
        assert b["step_s"] == pytest.approx(7 + 3) and b["sync_s"] == 3
        assert a["rollout_s"] == pytest.approx(16.2) and b["rollout_s"] == pytest.approx(0)
    assert loop.version == 3 and max(loop.staleness) == 0  # versions count weight syncs


def test_streaming_mini_batches_start_training_on_the_first_ready_groups():
    # mini_batch 2 of B 4: the trainer takes the first 2 groups ready (the 2nd smallest duration),
    # trains 3.5 s (half the step's 7 s), then the other 2 when both are ready and it is free
    loop, _ = loop_of(scenario({**DISAGG, "mini_batch": 2, "task_spread": 0.5}))
    start = 0.0
    for k, row in enumerate(loop.step_table()):
        d = sorted(0.5 + 5 * (3 * loop._block("task", g) + 0.1) + 0.2 for g in range(4 * k, 4 * k + 4))
        end = max(start + d[1] + 3.5, start + d[3]) + 3.5 + 3
        assert row["end_s"] == pytest.approx(end)
        whole = start + d[3] + 7 + 3  # the whole step at once waits for the slowest group first
        assert end < whole
        start = end


@pytest.mark.parametrize(("form", "groups"), [({"staleness_fraction": 0.0}, 4),
                                              ({"staleness_fraction": 0.5}, 6),
                                              ({"staleness_fraction": 1.0}, 8),
                                              ({"max_staleness": 1}, 8),
                                              ({"max_staleness": 2}, 12)])  # fmt: skip
def test_async_admits_version_groups_times_one_plus_the_bound(form, groups):
    # a long train time: every group admitted under version 0 starts (concurrency 64) before the
    # first sync; the bound is (0 + 1 + bound) x B groups, B = 4
    loop, _ = loop_of(scenario({**DISAGG, "mode": "async", "train_time": 100, **form}))
    first = np.flatnonzero(loop.started & (loop.v0 == 0))
    assert len(set(loop.group_of[first].tolist())) == groups


@pytest.mark.parametrize("policy", ["discard", "keep"])
def test_stale_samples_discarded_or_kept(policy):
    over = {"workload.llm_time": {"kind": "lognormal", "median": 2, "p99": 20}, "cluster.concurrency": 24}
    tr = {**DISAGG, "mode": "async", "max_staleness": 1, "stale_samples": policy, "steps": 12,
          "task_spread": 0.8, "train_time": 9}  # fmt: skip
    loop, _ = loop_of(scenario(tr, **over))
    stale = np.array(loop.staleness)
    rows = loop.step_table()
    assert sum(r["stale_samples"] for r in rows) == int((stale > 0).sum())
    if policy == "discard":
        assert stale.max() == 1 and loop.discard["staleness"][3] > 0
    else:  # a slow group trains however late it ends
        assert stale.max() >= 2 and loop.discard["staleness"][3] == 0


def test_fraction_keeps_stale_samples_by_default_and_versions_discard():
    tr = scenario({**DISAGG, "mode": "async", "staleness_fraction": 0.3}).training
    assert tr.stale_policy == "keep" and tr.stale_versions == 1 and tr.ahead == pytest.approx(0.3)
    tr = scenario({**DISAGG, "mode": "async", "max_staleness": 2}).training
    assert tr.stale_policy == "discard" and tr.stale_versions == 2


def test_partial_samples_are_those_whose_generation_crossed_a_sync():
    tr = {**DISAGG, "mode": "async", "max_staleness": 2, "steps": 10, "task_spread": 0.8, "train_time": 4}
    loop, _ = loop_of(scenario(tr, **{"cluster.concurrency": 24}))
    idx = np.asarray(loop.trained_members)
    crossed = int((loop.v_end[idx] > loop.v0[idx]).sum())
    assert crossed > 0
    assert sum(r["partial_samples"] for r in loop.step_table()) == crossed


def test_step_columns_trainer_busy_idle_and_rollouter_idle():
    # one trajectory on one engine: its 5 turns keep the engine busy 10 s of each step
    over = {"cluster.inference": {"engines": 1}}
    for placement, avail in (("colocated", 16.2), ("disaggregated", 26.2)):
        tr = {"prompts_per_step": 1, "samples_per_prompt": 1, "placement": placement}
        if placement == "disaggregated":
            tr["trainer"] = {"gpus": 1}
        loop, _ = loop_of(scenario(tr, **over))
        for row in loop.step_table():
            assert row["trainer_busy_s"] == pytest.approx(10.0)
            assert row["trainer_idle_s"] == pytest.approx(16.2)
            assert row["rollout_s"] == pytest.approx(16.2)
            assert row["rollouter_idle_ratio"] == pytest.approx(1 - 10 / avail)


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


@pytest.mark.parametrize(
    ("training", "message"),
    [
        ({"train_time": FLOPS}, "reads the model's size"),
        ({"model": MODEL, "train_time": _without(FLOPS, "mfu")}, "needs either peak_tflops and mfu"),
        ({"model": MODEL, "train_time": {**FLOPS, "tokens_per_gpu_second": 5}}, "not both"),
        ({"model": MODEL, "train_time": _without(FLOPS, "tokens_per_turn")}, "give tokens_per_turn"),
        ({"model": MODEL, "train_time": FLOPS}, "trains on the engines' GPUs"),
        ({"weight_sync_time": {"kind": "transfer", "gb_per_s": 1}}, "reads the model's size"),
        ({"mini_batch": 3}, "mini_batch 3 must divide prompts_per_step 4"),
        ({**DISAGG, "mode": "one_step_off", "sync_every": 2}, "apply to modes sync and async"),
        ({"staleness_fraction": 0.5}, "bounds mode 'async'"),
        ({**DISAGG, "mode": "async", "staleness_fraction": 0.5, "max_staleness": 1}, "not both"),
    ],
)
def test_bad_knobs_are_refused_naming_the_field(training, message):
    with pytest.raises(InputError, match=message):
        scenario(training)


def _single_turn(max_tokens: int | None) -> dict:
    """Single-turn RL (math): no tools, no substrate; 16 engines, one request each, a turn of
    ``o`` output tokens taking ``o`` iterations of 10 ms (the prefill's chunk yields the first)."""
    tokens = {"prompt": 200, "appended": 0, "output": 100}
    if max_tokens:
        tokens["max_tokens"] = max_tokens
    engine = {"iteration": {"base": 0.01, "per_prefill_token": 0.0}, "kv_capacity_tokens": 10_000}
    return {
        "version": 1,
        "workload": {"steps": 1, "tokens": tokens},
        "cluster": {
            "concurrency": 16,
            "inference": {"engines": 16, "engine": engine, "routing": "least_loaded"},
        },
        "training": {
            "prompts_per_step": 4,
            "samples_per_prompt": 4,
            "steps": 3,
            "train_time": 7,
            "weight_sync_time": 3,
        },  # fmt: skip
    }


@pytest.mark.parametrize(("cap", "turn", "truncated"), [(None, 1.0, 0), (60, 0.6, 48)])
def test_single_turn_token_workload_runs_without_tools_or_substrate(cap, turn, truncated):
    from simrollout.run.runner import CellKey, run_cell
    from simrollout.scenario import scenario_from_dict

    scn = scenario_from_dict(_single_turn(cap))
    assert scn.sandboxless and scn.workload.calls_per_step.mean() == 0
    summary = run_cell(scn, CellKey(0, 16, 0)).summary
    assert summary["step_seconds_mean"] == pytest.approx(turn + 7 + 3)
    assert summary["truncated_samples"] == truncated
    assert summary["sandbox_hours"] == 0


def test_tool_calls_without_tools_are_refused():
    d = _single_turn(None)
    d["workload"]["calls_per_step"] = 1
    with pytest.raises(InputError, match="no tools are given"):
        from simrollout.scenario import scenario_from_dict

        scenario_from_dict(d)
