"""A preset's framework block derives B and mini_batch from the framework's own knobs."""

from __future__ import annotations

import pytest

from simrollout.errors import InputError
from simrollout.scenario import scenario_from_dict
from tests.conftest import make

TRAINER = {"trainer": {"gpus": 2}}


def scenario(training: dict):
    """A scenario whose training section is ``training`` (B and G left to the preset)."""
    d = make()
    d["workload"].pop("trajectories")
    d["training"] = {"steps": 2, "train_time": 7, **training}
    return scenario_from_dict(d)


def test_verl_fully_async_recipe_trains_512_prompts_a_step_128_a_mini_batch():
    # verl's 7B fully-async recipe (validation/training/README.md): ppo_mini_batch_size 32 prompts
    # (verl multiplies it by rollout.n inside the actor), require_batches 4,
    # trigger_parameter_sync_step 4, rollout.n 16; 512 prompts a step as its colocated baseline
    knobs = {
        "ppo_mini_batch_size": 32,
        "require_batches": 4,
        "trigger_parameter_sync_step": 4,
        "rollout_n": 16,
    }
    tr = scenario({"preset": "verl-fully-async", "framework": knobs, **TRAINER}).training
    assert (tr.prompts_per_step, tr.mini_batch, tr.samples_per_prompt) == (512, 128, 16)
    assert tr.update_groups == 128 and tr.version_groups == 512 and tr.sync_every == 1
    # the samples-per-prompt division was the defect: 4 x 32 / 16 = 8 groups, not 128
    assert tr.mini_batch != 4 * 32 // 16


def test_defaults_and_the_scenarios_own_fields_win():
    tr = scenario({"preset": "verl-fully-async", "framework": {"ppo_mini_batch_size": 2, "rollout_n": 4},
                   **TRAINER}).training  # fmt: skip
    assert (tr.prompts_per_step, tr.mini_batch) == (2, 2)  # require_batches 1, one fetch a sync
    tr = scenario({"preset": "verl-fully-async", "framework": {"ppo_mini_batch_size": 2, "rollout_n": 4},
                   "mini_batch": 1, **TRAINER}).training  # fmt: skip
    assert tr.mini_batch == 1


@pytest.mark.parametrize(
    ("preset", "knobs", "want"),
    [
        ("areal", {"batch_size": 32, "n_samples": 16}, (32, 16)),
        ("slime-async", {"rollout_batch_size": 32, "n_samples_per_prompt": 8}, (32, 8)),
        ("prime-rl", {"batch_size": 128, "group_size": 8}, (16, 8)),  # batch_size counts samples
        ("skyrl", {"train_batch_size": 256, "n_samples_per_prompt": 5}, (256, 5)),
    ],
)
def test_each_presets_knobs_give_b_and_g(preset, knobs, want):
    tr = scenario({"preset": preset, "framework": knobs, **TRAINER}).training
    assert (tr.prompts_per_step, tr.samples_per_prompt) == want


@pytest.mark.parametrize(
    ("block", "match"),
    [
        ({"preset": "areal", "framework": {"batch_size": 8}}, "areal needs n_samples"),
        ({"preset": "areal", "framework": {"batch_size": 8, "n_samples": 4, "ppo_mini_batch_size": 2}},
         "framework knob 'ppo_mini_batch_size' is not one of areal's"),
        ({"preset": "prime-rl", "framework": {"batch_size": 10, "group_size": 4}}, "multiple of group_size"),
        ({"preset": "skyrl", "framework": {"train_batch_size": 0, "n_samples_per_prompt": 4}}, "whole number"),
        ({"framework": {"batch_size": 8}}, "needs preset"),
    ],
)  # fmt: skip
def test_bad_knobs_are_refused_in_one_paragraph(block, match):
    with pytest.raises(InputError, match=match):
        scenario({**block, **TRAINER})
