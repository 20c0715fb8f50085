"""The training loop on the compiled engine (simrollout.sim.compiled_training) against the step
engine and the trajectory engine, its bookkeeping, and what it covers."""

from __future__ import annotations

import numpy as np
import pytest

from simrollout.errors import InputError
from simrollout.run.runner import CellKey, run_cell, work_for
from simrollout.scenario import scenario_from_dict
from simrollout.sim import compiled_loop as L
from simrollout.sim.compiled import run_compiled
from simrollout.sim.model import Cell
from simrollout.validation.fidelity import Row, build, compare
from simrollout.validation.verdicts import TRAINING_TOLERANCE
from tests.sim.test_training import loop_of, scenario


def _row(extra: str = "train", load: str = "host", steps: int = 30, mode: str = "async", **training) -> dict:
    d = build(Row(mode, load, extra), 0, 20, 256)
    d["training"].update(steps=steps, **training)
    return d


def _cell(d: dict, fid: str):
    scn = scenario_from_dict({**d, "fidelity": fid})
    scn._overhead_per_call = scn._tools_per_call = True  # the same draws in every engine
    res = run_cell(scn, CellKey(0, scn.cluster.levels[0], 0), keep=True)
    summary, rec = res.summary, res.records
    return summary, rec


def _compiled_loop(scn):
    """``scn``'s first cell through the compiled loop: its training loop (the group book)."""
    sub = scn.substrates[0]
    cell = Cell(scn, sub, scn.cluster.levels[0], 0, work_for(scn, 0, False, sub=sub), "trajectory", keep=True)
    run_compiled(cell)
    return cell.loop


ROWS = [Row("async", "host", "train"), Row("async", "none", "train_fraction"), Row("sync", "host", "train"),
        Row("one_step_off", "host", "train"), Row("sync", "host", "train_over"),
        Row("sync", "host", "train_stream"), Row("async", "host", "train_interrupt"),
        Row("one_step_off", "host", "train_interrupt")]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_within_the_training_rows_tolerance_of_the_step_engine(row):
    c = compare(row, fast="compiled")
    for metric, limit in TRAINING_TOLERANCE.items():
        assert abs(c.diff(metric)) <= limit, (row.name, metric, c.diff(metric))
    if row.policy == "async" or row.extra == "train_over":  # the row bounds the discards it makes
        assert c.step.discarded_samples > 0
    assert c.step.masked_samples > 100


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


@pytest.mark.parametrize("mode", ["async", "sync", "one_step_off"])
def test_same_seed_same_numbers_and_the_trajectory_engine_close(mode):
    """Both read a body's steps one by one: the same loop but for the order of events at an
    instant and the compiled loop's arithmetic."""
    d = _row(steps=25 if mode == "async" else 12, mode=mode)
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
        ({"dynamic_sampling": {"alpha": 1.0, "beta": 1.0}}, "dynamic sampling"),
        ({"on_failure": "retry"}, "on_failure 'retry'"),
    ):
        d = _row(**training)
        with pytest.raises(InputError, match=why):
            scenario_from_dict({**d, "fidelity": "compiled"})


def test_sync_steps_are_the_slowest_trajectory_plus_train_and_sync():
    """The closed form of tests/sim/test_training.py on the compiled loop: constant durations,
    each step 16.2 s of rollout, 7 s training and 3 s sync."""
    loop = _compiled_loop(scenario({}))
    steps = loop.step_table()
    assert len(steps) == 6
    for row in steps:
        assert row["step_s"] == pytest.approx(16.2 + 7 + 3)


@pytest.mark.parametrize("train", [4.0, 30.0])
def test_one_step_off_step_is_max_of_generation_and_train_plus_sync(train):
    """Collecting step k + 1 overlaps training step k (the collector beside the trainer), and the
    engines paused at a sync hold a turn that would start in it (tests/sim/test_training.py)."""
    disagg = {
        "mode": "one_step_off",
        "placement": "disaggregated",
        "trainer": {"gpus": 1},
        "train_time": train,
    }
    loop = _compiled_loop(scenario({**disagg, "steps": 8}))
    steps = loop.step_table()
    assert len(steps) == 8
    gen = 16.2 + (0.3 if train == 4.0 else 0.0)
    for row in steps[2:]:  # after the pipeline fills
        assert row["step_s"] == pytest.approx(max(gen, train + 3))
    assert max(loop.staleness) == 1


def test_over_sampled_sync_trains_the_first_ready_groups_and_cancels_or_carries_the_rest():
    """Sync with over-sampling: B x 1.5 groups start a step, the first B ready train, the rest
    are cancelled (their samples discarded as over_sampling) or carried to the next step, whose
    top-up then starts fewer."""
    started = {}
    for leftover in ("cancel", "carry"):
        tr = {"over_sampling": 0.5, "task_spread": 0.8, "leftover": leftover, "steps": 5}
        loop = _compiled_loop(scenario(tr, **{"cluster.concurrency": 24}))
        assert len(loop.steps) == 5 and len(loop.trained_members) == 5 * 16
        started[leftover] = int(loop.li[L.L_NEXTG])
        over = loop.discard["over_sampling"][3]
        assert over > 0 if leftover == "cancel" else over == 0
    assert started["cancel"] == 5 * 6  # ceil(4 x 1.5) groups a step
    assert started["carry"] < started["cancel"]


@pytest.mark.parametrize("mode", ["async", "one_step_off"])
def test_an_interrupted_turn_waits_for_the_weights_then_ends_its_rest_as_in_the_step_engine(mode):
    """at_sync: interrupt on test_training's constant turns (2 s of generation, 1.1 s of calls):
    a sync stops every turn in progress and its rest runs after the new weights, so the steps end
    when the step engine's do, later than at_sync: finish, with as many requests interrupted."""
    tr = {"placement": "disaggregated", "trainer": {"gpus": 1}, "mode": mode, "steps": 5, "train_time": 5}
    ends = {}
    for at_sync in ("finish", "interrupt"):
        scn = scenario({**tr, "at_sync": at_sync})
        compiled, step = _compiled_loop(scn), loop_of(scn)[0]
        ends[at_sync] = [r["end_s"] for r in compiled.step_table()]
        assert ends[at_sync] == pytest.approx([r["end_s"] for r in step.step_table()])
        assert compiled.interrupts == step.interrupts
        assert compiled.resumed[compiled.trained_members].sum() == step.resumed[step.trained_members].sum()
    assert ends["interrupt"][-1] > ends["finish"][-1]
