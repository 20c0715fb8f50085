"""Partial rollouts: at a weight sync the requests still generating finish under the old weights,
or are interrupted and resumed under the new ones, re-prefilling their context (timelines worked
out by hand)."""

from __future__ import annotations

import pytest

from simrollout.errors import InputError
from simrollout.run.runner import CellKey, run_cell
from simrollout.scenario import scenario_from_dict
from simrollout.sim.model import Cell
from simrollout.sim.workload_draws import draw_work
from tests.sim.test_training import scenario

# one engine, one sample a step: a turn of 200 prompt and 100 output tokens. An iteration is
# 10 ms plus 0.1 ms per prefill token: the prefill's iteration (30 ms) yields the first token,
# 99 decodes follow, 1.02 s in all
ENGINE = {"iteration": {"base": 0.01, "per_prefill_token": 0.0001}, "kv_capacity_tokens": 10_000}


def _scenario(partial: str) -> dict:
    return {
        "version": 1,
        "workload": {"steps": 1, "tokens": {"prompt": 200, "appended": 0, "output": 100}},
        "cluster": {"concurrency": 1, "inference": {"engines": 1, "engine": ENGINE}},
        "training": {"prompts_per_step": 1, "samples_per_prompt": 1, "steps": 3,
                     "mode": "one_step_off", "placement": "disaggregated", "trainer": {"gpus": 1},
                     "train_time": 0.505, "weight_sync_time": 0.2, "at_sync": partial},
    }  # fmt: skip


def _loop(partial: str):
    scn = scenario_from_dict(_scenario(partial))
    cell = Cell(scn, scn.substrates[0], 1, 0, draw_work(scn, 0, detail=True), "step", keep=True)
    cell.run()
    return cell.loop, cell.tier


def test_finish_lets_the_running_request_end_under_the_old_weights():
    # sample 0: 0-1.02 s; step 0 trains 1.02-1.525, syncs to 1.725. Sample 1 starts at 1.02 and
    # generates through the sync: ends 2.04, step 1 ends 2.04 + 0.705; sample 2 likewise
    loop, tier = _loop("finish")
    ends = [r["end_s"] for r in loop.step_table()]
    assert ends == pytest.approx([1.725, 2.745, 3.765])
    assert tier.prefill_tokens == 3 * 200 and loop.interrupts == 0


def test_interrupt_resumes_under_the_new_weights_and_prefills_again():
    # Sample 1 starts at 1.02; its first token at 1.05, a decode every 10 ms. The sync at 1.525
    # interrupts it at the iteration's end, 1.53: 49 tokens out, 51 to go. It waits for the new
    # weights (1.725), prefills 200 + 49 tokens again (0.0349 s, its 50th token) and decodes
    # 50 more (0.5 s): ends 2.2599; step 1 trains and syncs to 2.9649. Sample 2 (from 2.2599)
    # meets the next sync 0.505 s in alike: resumes at 2.9649, ends 3.4998; step 2 ends 4.2048.
    loop, tier = _loop("interrupt")
    ends = [r["end_s"] for r in loop.step_table()]
    assert ends == pytest.approx([1.725, 2.9649, 4.2048])
    assert tier.prefill_tokens == 3 * 200 + 2 * 249  # the resumed requests' KV recomputed
    assert tier.decode_tokens + tier.requests == 3 * 100  # each token out once: those before kept
    assert loop.interrupts == 2 and loop.resumed.tolist()[:3] == [False, True, True]
    # a resumed sample's version is the one it resumed under; its staleness, as the frameworks
    # bound it, counts from the version it started under
    assert loop.v0[:3].tolist() == [0, 0, 1] and loop.v_last[:3].tolist() == [0, 1, 2]
    assert loop.staleness == [0, 1, 1]
    assert [r["partial_samples"] for r in loop.step_table()] == [0, 1, 1]


def test_interrupt_summary_counts_resumed_samples():
    summary = run_cell(scenario_from_dict(_scenario("interrupt")), CellKey(0, 1, 0)).summary
    assert summary["resumed_samples_trained"] == 2 and summary["interrupted_requests"] == 2
    assert summary["partial_samples_trained"] == 2


def test_interrupt_of_a_turn_in_seconds_resumes_its_rest():
    # test_training's CONST: 5 turns of 2 s each (plus 0.1 s of tool call and 1 s of tool), async
    # with a long train time; a sync cuts every turn in progress and its rest waits for the weights
    tr = {"placement": "disaggregated", "trainer": {"gpus": 1}, "mode": "async", "steps": 4}
    fin, _ = _loop_time({**tr, "at_sync": "finish"})
    cut, _ = _loop_time({**tr, "at_sync": "interrupt"})
    assert cut.interrupts > 0 and fin.interrupts == 0
    assert cut.step_table()[-1]["end_s"] > fin.step_table()[-1]["end_s"]


def _loop_time(training: dict):
    from tests.sim.test_training import loop_of

    return loop_of(scenario(training))


@pytest.mark.parametrize(
    ("training", "needs"),
    [
        ({}, "placement 'disaggregated'"),
        ({"placement": "disaggregated", "trainer": {"gpus": 1}, "pause_engines_on_sync": False},
         "pause_engines_on_sync: true"),
        ({"placement": "disaggregated", "trainer": {"gpus": 1}, "mode": "async",
          "partial_rollouts": False}, "partial_rollouts: true"),
    ],
)  # fmt: skip
def test_interrupt_is_refused_where_it_cannot_apply(training, needs):
    with pytest.raises(InputError, match=f"at_sync 'interrupt'.*needs {needs}") as e:
        scenario({**training, "at_sync": "interrupt"})
    assert "field 'training'" in str(e.value) and "\n" not in str(e.value)  # one paragraph


def test_unknown_partial_rollout_names_the_choices():
    with pytest.raises(InputError, match="at_sync.*'finish' or 'interrupt'"):
        scenario({"at_sync": "abort"})
