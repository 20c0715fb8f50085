"""prime-rl: TOML configs; batch_size counts samples, max_async_level 0 is on-policy."""

from __future__ import annotations

import pytest

from simrollout.errors import InputError
from simrollout.scenario.framework_configs import import_config

from . import imported, values


def test_on_policy_color_codeword(tmp_path):
    # batch_size 16 samples / group_size 8 = 2 prompts; max_async_level 0; max_steps 20
    imp, text, scn = imported("prime-rl", "prime-rl_rl_color_codeword_feat_renderer.toml", tmp_path)
    tr = scn.training
    assert (tr.prompts_per_step, tr.samples_per_prompt, tr.steps, tr.mode) == (2, 8, 20, "sync")
    assert values(imp)["training.trainer.gpus"] == 1 and scn.cluster.inference.engines == 1
    assert imp.unmapped["orchestrator.renderer.pool_size"] == 4


def test_async_wordle(tmp_path):
    # batch_size 128 / group_size 8 = 16 prompts, max_steps 200, no max_async_level: the preset's 2
    imp, text, scn = imported("prime-rl", "prime-rl_wordle_rl.toml", tmp_path)
    tr = scn.training
    assert (tr.prompts_per_step, tr.steps, tr.mode, tr.max_staleness) == (16, 200, "async", 2)


def test_batch_not_a_multiple_of_the_group_is_refused(tmp_path):
    bad = tmp_path / "rl.toml"
    bad.write_text("[orchestrator]\nbatch_size = 10\ngroup_size = 4\n")
    with pytest.raises(InputError, match="batch_size 10 is not a multiple of orchestrator.group_size 4"):
        import_config("prime-rl", bad)
