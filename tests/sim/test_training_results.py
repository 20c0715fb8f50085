"""The step table's ``rollout_s`` worked by hand in every mode (constant times: each trajectory
takes 16.2 s, a step trains ``train_time`` and syncs 3 s; B = 4 groups of 4, all started at once)."""

from __future__ import annotations

import pytest

from tests.sim.test_training import loop_of, scenario

APART = {"placement": "disaggregated", "trainer": {"gpus": 1}, "pause_engines_on_sync": False}


def rollout_column(training: dict) -> list[float]:
    loop, _ = loop_of(scenario(training))
    rows = loop.step_table()
    for r in rows:  # the critical path is the wait for rollouts, then training, then the sync
        assert r["rollout_s"] == pytest.approx(r["step_s"] - r["train_s"] - r["sync_s"])
    return [r["rollout_s"] for r in rows]


def test_sync_waits_for_every_steps_batch():
    # each step's 16 samples start as the step does and end 16.2 s later
    assert rollout_column({"train_time": 7}) == pytest.approx([16.2] * 6)


def test_one_step_off_waits_for_the_rest_of_the_next_batch():
    # batch k+1 starts as batch k is gathered (16.2 s apart while generation is the slower side):
    # the trainer, free 4 + 3 s after taking batch k, waits 16.2 - 7 = 9.2 s for batch k+1
    assert rollout_column({**APART, "mode": "one_step_off", "train_time": 4}) == pytest.approx(
        [16.2] + [9.2] * 5
    )
    # training 30 s outlasts generation: the next batch is always ready
    assert rollout_column({**APART, "mode": "one_step_off", "train_time": 30}) == pytest.approx(
        [16.2] + [0.0] * 5
    )


def test_one_step_off_without_partial_rollouts_counts_the_held_sync():
    # no sample may mix versions: a sync waits until the batch in generation is gathered.
    # Step 0: batch 0 ready at 16.2, trained to 20.2; batch 1 (started 16.2) ready at 32.4, the
    # sync runs 32.4-35.4: 35.4 - 4 - 3 = 28.4 s waiting. Batch 2 may start only under version 1
    # (35.4), ready at 51.6; step 1 takes batch 1 at 35.4, trains to 39.4, its sync waits to
    # 51.6: 12.2 s. The last step has no batch in generation: it syncs at once.
    got = rollout_column({**APART, "mode": "one_step_off", "train_time": 4, "partial_rollouts": False})
    assert got == pytest.approx([28.4, 12.2, 12.2, 12.2, 12.2, 0.0])


def test_async_alternates_a_wait_and_a_batch_ready():
    # max_staleness 1 admits (version + 2) x 4 groups: 8 start at 0 and are ready at 16.2.
    # Step 0 waits 16.2 s and ends at 23.2 (version 1: 4 more start); step 1 trains groups 4-7,
    # ready, and ends at 30.2 (4 more start); step 2 waits for the groups started at 23.2, ready
    # at 39.4: 9.2 s; step 3's started at 30.2 are ready at 46.4, when step 2 ends: 0 s; and so on.
    got = rollout_column({**APART, "mode": "async", "train_time": 4})
    assert got == pytest.approx([16.2, 0.0, 9.2, 0.0, 9.2, 0.0])
