"""slime: the launch scripts' command-line arguments."""

from __future__ import annotations

from . import imported, values


def test_colocated_qwen3_4b(tmp_path):
    # --rollout-batch-size 32, --n-samples-per-prompt 8, --num-rollout 3000, --colocate on
    # --actor-num-gpus-per-node ${NUM_GPUS} = 8, --rollout-num-gpus-per-engine 2
    imp, text, scn = imported("slime", "slime_run-qwen3-4B.sh", tmp_path)
    tr = scn.training
    assert (tr.prompts_per_step, tr.samples_per_prompt, tr.steps) == (32, 8, 3000)
    assert (tr.mode, tr.placement) == ("sync", "colocated")
    assert scn.cluster.inference.engines == 8 // 2
    assert imp.unmapped["global-batch-size"] == 256  # optimizer batch in samples: not a streaming knob


def test_disaggregated_glm4_9b(tmp_path):
    # 4 actor GPUs (--actor-num-gpus-per-node 4), --rollout-num-gpus 4 at 2 per engine, train.py
    imp, text, scn = imported("slime", "slime_run-glm4-9B.sh", tmp_path)
    v = values(imp)
    assert v["training.trainer.gpus"] == 4 and v["cluster.inference.engines"] == 2
    assert (scn.training.mode, scn.training.placement) == ("sync", "disaggregated")
    assert "prompts_per_step: 32  # --rollout-batch-size 32" in text
