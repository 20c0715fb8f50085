"""verl: its Hydra YAML (``verl/trainer/config/ppo_trainer.yaml`` and its generated form) or a
launch script's Hydra overrides (``recipe/fully_async_policy/*.sh``). verl counts
``ppo_mini_batch_size`` in prompts (its actor multiplies it by ``rollout.n``)."""

from __future__ import annotations

from pathlib import Path

from ...errors import InputError
from ..framework_knobs import derive
from .common import finish, gpus_and_engines
from .table import Imported, Knobs, hydra_overrides, read_yaml

ROLL, ACTOR = "actor_rollout_ref.rollout", "actor_rollout_ref.actor"


def read(path: Path) -> Imported:
    flat = hydra_overrides(path)[0] if path.suffix == ".sh" else read_yaml(path)
    k, imp = Knobs(flat, path), Imported("verl", path)
    G = k.number(f"{ROLL}.n", 1)
    imp.put("training.samples_per_prompt", G, f"{ROLL}.n: {G}")
    tp = k.number(f"{ROLL}.tensor_model_parallel_size", 1)
    trainer = k.number("trainer.nnodes", 1) * k.number("trainer.n_gpus_per_node", 8)
    train_src = "trainer.nnodes x trainer.n_gpus_per_node"
    if any(n.startswith("async_training.") for n in flat):
        _fully_async(k, imp, G)
        rollout = k.number("rollout.nnodes", 1) * k.number("rollout.n_gpus_per_node", 8)
        gpus_and_engines(imp, rollout, tp, "rollout.nnodes x rollout.n_gpus_per_node",
                         f"{ROLL}.tensor_model_parallel_size", trainer, train_src)  # fmt: skip
    else:
        B = k.need("data.train_batch_size", "the prompts a step trains")
        imp.put("training.prompts_per_step", B, f"data.train_batch_size: {B}")
        imp.put("training.mode", "sync", "derived: verl's PPO trainer generates, then trains")
        steps = k.number("trainer.total_training_steps")
        if steps:
            imp.put("training.steps", steps, f"trainer.total_training_steps: {steps}")
        colocated = k.flag("actor_rollout_ref.hybrid_engine", True)
        imp.put("training.placement", "colocated" if colocated else "disaggregated",
                f"actor_rollout_ref.hybrid_engine: {colocated}")  # fmt: skip
        gpus_and_engines(imp, trainer, tp, train_src, f"{ROLL}.tensor_model_parallel_size",
                         None if colocated else trainer, train_src)  # fmt: skip
    return finish(imp, k)


def _fully_async(k: Knobs, imp: Imported, G: int) -> None:
    """The fully-async recipe: B and mini_batch from require_batches x ppo_mini_batch_size."""
    mini = k.need(f"{ACTOR}.ppo_mini_batch_size", "the prompts of a mini-batch")
    req = k.number("async_training.require_batches", 1)
    trig = k.number("async_training.trigger_parameter_sync_step", 1)
    knobs = {"ppo_mini_batch_size": mini, "require_batches": req, "trigger_parameter_sync_step": trig}
    try:
        got = derive("verl-fully-async", {**knobs, "rollout_n": G})
    except ValueError as exc:
        raise InputError(f"{k.path}: {exc}.") from None
    imp.put("training.preset", "verl-fully-async", "async_training.* given: the fully-async recipe")
    knobs = f"async_training.require_batches {req} x {ACTOR}.ppo_mini_batch_size {mini} (prompts)"
    imp.put("training.prompts_per_step", got["prompts_per_step"],
            f"async_training.trigger_parameter_sync_step {trig} x {knobs}")  # fmt: skip
    imp.put("training.mini_batch", got["mini_batch"], knobs)
    st = k.number("async_training.staleness_threshold", None, float)
    if st is not None:
        imp.put("training.staleness_fraction", st, f"async_training.staleness_threshold: {st}")
    partial = k.flag("async_training.partial_rollout")
    if partial is not None:
        imp.put("training.at_sync", "interrupt" if partial else "finish",
                f"async_training.partial_rollout: {partial}")  # fmt: skip
    total = k.number("rollout.total_rollout_steps")
    if total:
        steps = max(total // got["prompts_per_step"], 1)
        imp.put("training.steps", steps, f"rollout.total_rollout_steps {total} prompts / B")
