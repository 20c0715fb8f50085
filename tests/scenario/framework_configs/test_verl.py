"""verl: the fully-async recipe script and the PPO trainer's YAML."""

from __future__ import annotations

from . import imported, values


def test_fully_async_recipe_64_64(tmp_path):
    # the script: rollout.n 16, ppo_mini_batch_size 32 (prompts), require_batches 4,
    # trigger_parameter_sync_step 4, staleness_threshold 0.5, partial_rollout True, 8 x 8 trainer
    # GPUs, 8 x 8 rollout GPUs at tensor parallel 4, total_rollout_steps 512 x 400 prompts
    imp, text, scn = imported("verl", "verl_dapo_7b_math_fsdp2_64_64.sh", tmp_path)
    v = values(imp)
    assert v["training.prompts_per_step"] == 4 * 4 * 32 == 512
    assert v["training.mini_batch"] == 4 * 32 == 128
    assert v["training.samples_per_prompt"] == 16 and v["training.steps"] == 400
    assert v["training.trainer.gpus"] == 64 and v["cluster.inference.engines"] == 64 // 4
    tr = scn.training
    assert (tr.mode, tr.placement, tr.staleness_fraction, tr.at_sync, tr.stale_policy) == (
        "async", "disaggregated", 0.5, "interrupt", "keep")  # fmt: skip
    assert tr.update_groups == 128 and tr.version_groups == 512
    assert "staleness_fraction: 0.5  # async_training.staleness_threshold: 0.5" in text
    assert (
        "mini_batch: 128  # async_training.require_batches 4 x actor_rollout_ref.actor.ppo_mini_batch_size"
        in text
    )
    # read but not mapped: listed, with their values
    assert imp.unmapped["data.max_response_length"] == 1024 * 28
    assert imp.unmapped["algorithm.adv_estimator"] == "grpo"
    assert "data.max_response_length=28672" in text.split("# Not mapped")[1]
    assert "async_training.require_batches" not in imp.unmapped


def test_ppo_trainer_yaml(tmp_path):
    # data.train_batch_size 1024, rollout.n 1, hybrid engine (colocated), 1 x 8 GPUs at tensor
    # parallel 2, no total_training_steps (null)
    imp, text, scn = imported("verl", "verl_ppo_trainer.yaml", tmp_path)
    tr = scn.training
    assert (tr.prompts_per_step, tr.samples_per_prompt, tr.mode, tr.placement) == (
        1024,
        1,
        "sync",
        "colocated",
    )
    assert scn.cluster.inference.engines == 8 // 2
    assert imp.fields["training.steps"].source.startswith("assumed")
    assert "prompts_per_step: 1024  # data.train_batch_size: 1024" in text
    assert imp.unmapped["actor_rollout_ref.actor.ppo_mini_batch_size"] == 256
    assert len(imp.unmapped) > 400  # every other leaf of the config is listed
