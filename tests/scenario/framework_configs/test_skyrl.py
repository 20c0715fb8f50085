"""SkyRL: the fully-async example's Hydra overrides."""

from __future__ import annotations

from . import imported, values


def test_fully_async_gsm8k(tmp_path):
    # MINI_BATCH_SIZE 256 = trainer.train_batch_size, n_samples_per_prompt 5, max_staleness_steps 4,
    # colocate_all false, 2 policy GPUs, 2 engines at tensor parallel 1
    imp, text, scn = imported("skyrl", "skyrl_fully_async_run_gsm8k.sh", tmp_path)
    v = values(imp)
    assert (v["training.prompts_per_step"], v["training.samples_per_prompt"]) == (256, 5)
    assert v["training.max_staleness"] == 4 and v["training.trainer.gpus"] == 2
    tr = scn.training
    assert (tr.mode, tr.placement, tr.at_sync) == ("async", "disaggregated", "interrupt")
    assert scn.cluster.inference.engines == 2
    # the script's arithmetic default: 256 x (4 + 1)
    assert imp.unmapped["trainer.fully_async.num_parallel_generation_workers"] == 1280
    # a knob the script leaves out is named with the default taken
    assert (
        "(not given, the default: trainer.placement.policy_num_nodes 1)"
        in imp.fields["training.trainer.gpus"].source
    )
