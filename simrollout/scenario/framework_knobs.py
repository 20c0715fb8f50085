"""A preset's ``framework:`` block: the framework's own batch knobs, from which the ``training``
fields they fix are derived (``prompts_per_step`` B, ``mini_batch``, ``samples_per_prompt``,
the staleness bound). Each knob is spelled as the framework spells it; docs/scenario.md, "Presets".

verl counts ``ppo_mini_batch_size`` in prompts (the actor multiplies it by ``rollout.n``:
``verl/workers/fsdp_workers.py``), so the fully-async trainer takes ``require_batches x
ppo_mini_batch_size`` prompts at a time and syncs after ``trigger_parameter_sync_step`` of them."""

from __future__ import annotations

from typing import Any

# per preset: its knobs and their defaults (None: required)
KNOBS: dict[str, dict[str, Any]] = {
    "verl-fully-async": {
        "ppo_mini_batch_size": None,  # actor_rollout_ref.actor.ppo_mini_batch_size, prompts
        "require_batches": 1,  # async_training.require_batches
        "trigger_parameter_sync_step": 1,  # async_training.trigger_parameter_sync_step
        "rollout_n": None,  # actor_rollout_ref.rollout.n
    },
    "areal": {"batch_size": None, "n_samples": None},  # train_dataset.batch_size, gconfig.n_samples
    "slime-async": {"rollout_batch_size": None, "n_samples_per_prompt": None},
    "prime-rl": {"batch_size": None, "group_size": None},  # orchestrator.batch_size is in samples
    "skyrl": {"train_batch_size": None, "n_samples_per_prompt": None},
}


def derive(preset: str, knobs: Any) -> dict[str, Any]:
    """The training fields ``knobs`` (a preset's ``framework:`` block) fix."""
    spec = KNOBS[preset]
    if not isinstance(knobs, dict):
        raise ValueError(f"framework must be a mapping of {preset}'s knobs: {', '.join(spec)}")
    unknown = sorted(set(knobs) - set(spec))
    if unknown:
        raise ValueError(f"framework knob '{unknown[0]}' is not one of {preset}'s: {', '.join(spec)}")
    k = {**{n: d for n, d in spec.items() if d is not None}, **knobs}
    missing = [n for n in spec if n not in k]
    if missing:
        raise ValueError(f"framework: {preset} needs {', '.join(missing)} to derive the batch")
    for n, v in k.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"framework knob '{n}' must be a whole number >= 1 (got {v!r})")
    if preset == "verl-fully-async":
        per_fetch = k["require_batches"] * k["ppo_mini_batch_size"]  # prompts trained at a time
        return {
            "prompts_per_step": per_fetch * k["trigger_parameter_sync_step"],  # prompts per sync
            "mini_batch": per_fetch,
            "samples_per_prompt": k["rollout_n"],
            "sync_every": 1,
        }
    if preset == "areal":
        return {"prompts_per_step": k["batch_size"], "samples_per_prompt": k["n_samples"]}
    if preset == "slime-async":
        return {"prompts_per_step": k["rollout_batch_size"], "samples_per_prompt": k["n_samples_per_prompt"]}
    if preset == "prime-rl":
        if k["batch_size"] % k["group_size"]:
            raise ValueError(
                f"framework: prime-rl's batch_size {k['batch_size']} (samples) must be a multiple of "
                f"group_size {k['group_size']}"
            )
        return {"prompts_per_step": k["batch_size"] // k["group_size"], "samples_per_prompt": k["group_size"]}
    return {"prompts_per_step": k["train_batch_size"], "samples_per_prompt": k["n_samples_per_prompt"]}
