"""The step table's columns as each framework logs them: one mapping, used by ``simrollout run
--names FRAMEWORK`` on ``training_steps.csv`` (docs/model.md, "The step table in a framework's
names"). A column a framework does not log keeps its own name."""

from __future__ import annotations

import pandas as pd

from ..errors import InputError

NAMES: dict[str, dict[str, str]] = {
    # verl: marked_timer(...) in verl/trainer/ppo/ray_trainer.py, logged as timing_s/<name>
    # (verl/trainer/ppo/metric_utils.py); its old_log_prob pass is inside train_s here
    "verl": {
        "step_s": "timing_s/step",
        "rollout_s": "timing_s/gen",
        "train_s": "timing_s/update_actor",
        "sync_s": "timing_s/update_weights",
    },  # fmt: skip
    # AReaL: stats_tracker.record_timing(...) in areal/trainer/rl_trainer.py, under "timeperf/"
    # (areal/utils/stats_tracker.py); no whole-step timer
    "areal": {
        "rollout_s": "timeperf/rollout",
        "train_s": "timeperf/train_step",
        "sync_s": "timeperf/update_weights",
    },  # fmt: skip
    # slime: slime/observability/train_metric_utils.py: step_time = train_wait_time + train_time
    "slime": {"step_s": "perf/step_time", "rollout_s": "perf/train_wait_time", "train_s": "perf/train_time"},
    # SkyRL: Timer(...) in skyrl/train/trainer.py, logged as timing/<name>
    "skyrl": {
        "step_s": "timing/step",
        "rollout_s": "timing/generate",
        "train_s": "timing/policy_train",
        "sync_s": "timing/sync_weights",
    },  # fmt: skip
    # prime-rl: the trainer's metrics in src/prime_rl/trainer/rl/train.py
    "prime-rl": {
        "step_s": "time/step",
        "rollout_s": "time/wait_for_batch",
        "train_s": "time/forward_backward",
        "sync_s": "time/broadcast_weights",
    },  # fmt: skip
}

SOURCES = {
    "verl": "https://github.com/volcengine/verl/blob/b178a3cd56f58b2d502255daba591e92833930a7/verl/trainer/ppo/ray_trainer.py",
    "areal": "https://github.com/inclusionAI/AReaL/blob/4aef98d8d818af55b43621aaadba047ae10f4e77/areal/trainer/rl_trainer.py",
    "slime": "https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/observability/train_metric_utils.py",
    "skyrl": "https://github.com/NovaSky-AI/SkyRL/blob/a9564572eb8e91076be43c1bd5e4615e3de17265/skyrl/train/trainer.py",
    "prime-rl": "https://github.com/PrimeIntellect-ai/prime-rl/blob/559b44772e471d1538537b8805cc77f3824a5e64/src/prime_rl/trainer/rl/train.py",
}


def check(names: str | None) -> None:
    """``--names``: one of the frameworks (or none: the table's own names)."""
    if names is not None and names not in NAMES:
        raise InputError(
            f"--names '{names}' is not one of: {', '.join(NAMES)} (the step table's own names: omit it)."
        )


def renamed(steps: pd.DataFrame, names: str | None) -> pd.DataFrame:
    """``steps`` with its columns named as ``names`` logs them (unchanged without ``names``)."""
    check(names)
    return steps if names is None else steps.rename(columns=NAMES[names])
