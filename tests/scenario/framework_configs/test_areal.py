"""AReaL: GPUs from rollout.backend / actor.backend, and from the older allocation_mode."""

from __future__ import annotations

import pytest

from simrollout.errors import InputError
from simrollout.scenario.framework_configs.areal import _parallel

from . import DATA, imported, values


@pytest.mark.parametrize("name", ["areal_boba_grpo.yaml", "areal_boba_grpo_allocation_mode.yaml"])
def test_boba_grpo(tmp_path, name):
    # train_dataset.batch_size 32, gconfig.n_samples 16, max_head_offpolicyness 4, vllm d4 + fsdp d4
    imp, text, scn = imported("areal", name, tmp_path)
    v = values(imp)
    assert (v["training.prompts_per_step"], v["training.samples_per_prompt"]) == (32, 16)
    assert v["training.max_staleness"] == 4 and v["training.trainer.gpus"] == 4
    assert scn.cluster.inference.engines == 4
    assert (scn.training.mode, scn.training.placement) == ("async", "disaggregated")
    assert imp.unmapped["actor.ppo_n_minibatches"] == 4
    assert "max_staleness: 4  # rollout.max_head_offpolicyness: 4" in text


def test_allocation_grammar():
    assert _parallel("sglang.d24p1t1", DATA, "allocation_mode") == ("sglang", {"d": 24, "p": 1, "t": 1})
    assert _parallel("sglang:d2p1t2", DATA, "allocation_mode")[1]["t"] == 2
    with pytest.raises(InputError, match="allocation_mode' is 'sglang:4 gpus'"):
        _parallel("sglang:4 gpus", DATA, "allocation_mode")
