"""NeMo-RL: the performance recipes with their ``defaults:`` chains, sync colocated and async GRPO."""

from __future__ import annotations

import shutil

import pytest

from simrollout.errors import InputError
from simrollout.scenario.framework_configs import import_config

from . import DATA, imported, values

NEMO = "nemo-rl/"


def test_sync_recipe_takes_its_base_beside_it(tmp_path):
    # 64 prompts x 32, 4 nodes x 8 GPUs colocated (grpo_math_1B.yaml), vLLM TP 2: 16 engines;
    # the recipe's ``defaults: ../../../grpo_math_1B.yaml`` is found by its name beside it
    imp, text, scn = imported("nemo-rl", NEMO + "grpo-qwen3-30ba3b-4n8g.yaml", tmp_path)
    v = values(imp)
    assert (v["training.prompts_per_step"], v["training.samples_per_prompt"]) == (64, 32)
    assert (scn.training.mode, scn.training.placement) == ("sync", "colocated")
    assert scn.cluster.inference.engines == 16 and scn.training.trainer is None
    assert "enabled: true (from grpo_math_1B.yaml)" in imp.fields["training.placement"].source
    assert imp.unmapped["policy.train_global_batch_size"] == 512  # an optimizer step's samples
    assert imp.unmapped["policy.model_name"] == "Qwen/Qwen3-30B-A3B"
    # the recipe's ``optimizer: null`` replaces the base's whole optimizer section
    assert imp.unmapped["policy.optimizer"] is None
    assert not any(n.startswith("policy.optimizer.") for n in imp.unmapped)


@pytest.mark.parametrize(
    ("name", "age", "gen", "per_engine", "train"),
    [
        ("grpo-qwen3-30ba3b-4n8g-async-1off.yaml", 1, 16, 2, 16),  # 2 of 4 nodes generate
        ("grpo-qwen3-30ba3b-24n8g-async-8off.yaml", 8, 64, 2, 128),  # 8 of 24 nodes
        ("grpo-qwen3-235b-32n4g-async-1off.yaml", 1, 64, 8, 64),  # three files: 32n8g's 16 nodes x 4
    ],
)
def test_async_recipes(tmp_path, name, age, gen, per_engine, train):
    imp, text, scn = imported("nemo-rl", NEMO + name, tmp_path)
    tr = scn.training
    assert (tr.mode, tr.placement, tr.max_staleness, tr.at_sync) == (
        "async",
        "disaggregated",
        age,
        "interrupt",
    )
    assert tr.trainer.gpus == train and scn.cluster.inference.engines == gen // per_engine
    assert f"max_trajectory_age_steps: {age}" in imp.fields["training.max_staleness"].source


def test_the_chain_names_the_file_each_field_came_from(tmp_path):
    # 32n4g-async-1off -> 32n8g-async-1off -> 16n8g -> grpo_math_1B
    imp, text, _ = imported("nemo-rl", NEMO + "grpo-qwen3-235b-32n4g-async-1off.yaml", tmp_path)
    assert "prompts_per_step: 16  # grpo.num_prompts_per_step: 16 (from grpo-qwen3-235b-16n8g.yaml)" in text
    assert "(from grpo-qwen3-235b-32n8g-async-1off.yaml)" in imp.fields["training.mode"].source
    assert "cluster.gpus_per_node 4" in imp.fields["training.trainer.gpus"].source  # the file's own


def test_a_base_not_beside_the_recipe(tmp_path):
    alone = tmp_path / "grpo-qwen3-30ba3b-4n8g-async-1off.yaml"
    shutil.copy(DATA / NEMO / alone.name, alone)
    with pytest.raises(InputError, match=r"base ./grpo-qwen3-30ba3b-4n8g.yaml was not found beside it"):
        import_config("nemo-rl", alone)
    sync = tmp_path / "grpo-qwen3-30ba3b-4n8g.yaml"  # B and G its own; colocation assumed
    shutil.copy(DATA / NEMO / sync.name, sync)
    imp = import_config("nemo-rl", sync)
    assert imp.fields["training.placement"].source.startswith("assumed: policy.generation.colocated.enabled")
    assert "grpo_math_1B.yaml was not found" in imp.fields["training.placement"].source


def test_bad_configs(tmp_path):
    base = DATA / NEMO / "grpo_math_1B.yaml"
    coloc = tmp_path / "async-colocated.yaml"
    coloc.write_text(f"defaults: {base}\ngrpo:\n  async_grpo:\n    enabled: true\n")
    with pytest.raises(InputError, match="async GRPO generates on GPUs of its own"):
        import_config("nemo-rl", coloc)
    (tmp_path / "a.yaml").write_text("defaults: b.yaml\n")
    (tmp_path / "b.yaml").write_text("defaults: a.yaml\n")
    with pytest.raises(InputError, match="'defaults' chain returns to a.yaml"):
        import_config("nemo-rl", tmp_path / "a.yaml")
    split = tmp_path / "split.yaml"  # several nodes: generation takes whole nodes
    split.write_text(
        f"defaults: {base}\ncluster: {{num_nodes: 2, gpus_per_node: 8}}\npolicy:\n  generation:\n"
        "    colocated: {enabled: false, resources: {num_nodes: 1, gpus_per_node: 4}}\n"
    )
    with pytest.raises(InputError, match="expected whole generation nodes"):
        import_config("nemo-rl", split)


def test_one_node_splits_its_gpus(tmp_path):
    # the async guide's layout: on one node, resources.gpus_per_node of its GPUs generate
    one = tmp_path / "one-node.yaml"
    one.write_text(
        f"defaults: {DATA / NEMO / 'grpo_math_1B.yaml'}\ncluster: {{num_nodes: 1, gpus_per_node: 8}}\n"
        "grpo: {async_grpo: {enabled: true}}\npolicy:\n  generation:\n"
        "    colocated: {enabled: false, resources: {num_nodes: null, gpus_per_node: 2}}\n"
    )
    imp = import_config("nemo-rl", one)
    v = values(imp)
    assert (v["cluster.inference.engines"], v["training.trainer.gpus"]) == (2, 6)
    assert (v["training.max_staleness"], v["training.at_sync"]) == (1, "finish")  # the base's settings
