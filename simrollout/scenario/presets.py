"""Presets of the ``training`` section: the loop settings of the recipes users run, each field
as the framework's own documentation gives it (``SOURCES``). A scenario names one with
``training: {preset: <name>, ...}``; its own fields override the preset's."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # verl docs/advance/fully_async.md, "Asynchronous Training on 7B Model" and its parameter table
    "verl-fully-async": {
        "mode": "async",
        "placement": "disaggregated",  # Trainer and Rollouter GPUs apart (n_gpus_per_node)
        "staleness_fraction": 0.5,  # async_training.staleness_threshold: 0.5
        "stale_samples": "keep",  # used, counted: fully_async/count/stale_samples_processed
        "partial_rollouts": True,  # async_training.partial_rollout: True
        # partial_rollout: "sleep() and resume()" save the ongoing rollouts' samples at a parameter
        # sync and continue them in the next rollout (not waiting for ongoing tasks)
        "at_sync": "interrupt",
        # one version per B: B = trigger_parameter_sync_step x require_batches x ppo_mini_batch_size
        # prompts, mini_batch = require_batches x ppo_mini_batch_size (the framework block derives both)
        "sync_every": 1,
    },
    # AReaL docs, algorithms/async.html ("Off-Policyness Control", partial rollouts)
    "areal": {
        "mode": "async",
        "placement": "disaggregated",  # "overlapped ... on disaggregated GPUs"
        "max_staleness": 4,  # rollout.max_head_offpolicyness: 4
        "partial_rollouts": True,  # "a single trajectory can be segmented across multiple policy versions"
        "at_sync": "interrupt",  # partial rollouts: generation interrupted at a weight update
    },
    # slime train_async.py: "Colocation is not supported for async training"; the next rollout
    # is generated while the current one trains
    "slime-async": {"mode": "one_step_off", "placement": "disaggregated"},
    # prime-rl docs, async.md: max_async_level k, "By default, we set k=2"
    "prime-rl": {"mode": "async", "placement": "disaggregated", "max_staleness": 2},
    # SkyRL docs, tutorials/fully_async ("In-flight Weight Update / Multi-Turn Partial Rollout")
    # and its FullyAsyncConfig
    "skyrl": {
        "mode": "async",
        "placement": "disaggregated",  # training and generation on separate GPUs (colocate_all: false)
        # trainer.fully_async.max_staleness_steps: 4 (a group scheduled at step i trains at j <= i + 4)
        "max_staleness": 4,
        "stale_samples": "keep",  # the bound holds at admission; no group is dropped for staleness
        "at_sync": "interrupt",  # in-flight weight update: generation aborted, resumed
    },
}

SOURCES = {
    "verl-fully-async": "https://verl.readthedocs.io/en/latest/advance/fully_async.html",
    "areal": "https://inclusionai.github.io/AReaL/algorithms/async.html",
    "slime-async": "https://github.com/THUDM/slime/blob/main/train_async.py",
    "prime-rl": "https://docs.primeintellect.ai/prime-rl/async",
    "skyrl": "https://docs.skyrl.ai/docs/tutorials/fully_async",
}

# one field of a pair given by the user replaces the preset's other one
_EXCLUSIVE = (("max_staleness", "staleness_fraction"),)


def apply_preset(data: Any) -> Any:
    """``data`` with its named preset's fields beneath its own (unchanged without ``preset``);
    its ``framework:`` block, the framework's batch knobs, derives B and ``mini_batch``
    (:mod:`.framework_knobs`), beneath the scenario's own fields too."""
    if not isinstance(data, dict) or "preset" not in data:
        if isinstance(data, dict) and "framework" in data:
            raise ValueError("framework (a framework's batch knobs) needs preset: the framework's preset")
        return data
    user = dict(data)
    name = user.pop("preset")
    if name not in PRESETS:
        raise ValueError(f"preset '{name}' is not one of: {', '.join(sorted(PRESETS))}")
    base = dict(PRESETS[name])
    if "framework" in user:
        from .framework_knobs import derive

        base.update(derive(name, user.pop("framework")))
    keeps = user.get("partial_rollouts", True) and user.get("pause_engines_on_sync", True)
    if not keeps or user.get("placement", "disaggregated") != "disaggregated":
        base.pop("at_sync", None)  # the user's loop cannot interrupt requests
    for a, b in _EXCLUSIVE:
        for mine, theirs in ((a, b), (b, a)):
            if mine in user:
                base.pop(theirs, None)
    return {**base, **user}
