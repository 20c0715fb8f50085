"""prime-rl: its TOML (``configs/**/rl.toml``). ``orchestrator.batch_size`` counts samples
(rollouts), ``group_size`` the samples per example; ``max_async_level`` 0 is on-policy."""

from __future__ import annotations

from pathlib import Path

from ...errors import InputError
from .common import finish, gpus_and_engines
from .table import Imported, Knobs, read_toml


def read(path: Path) -> Imported:
    k, imp = Knobs(read_toml(path), path), Imported("prime-rl", path)
    n = k.need("orchestrator.batch_size", "the samples a step trains")
    alias = "orchestrator.rollouts_per_example"
    gname = alias if alias in k else "orchestrator.group_size"
    G = k.number(gname, 1)
    if n % G:
        raise InputError(f"{path}: orchestrator.batch_size {n} is not a multiple of {gname} {G}.")
    imp.put("training.prompts_per_step", n // G, f"orchestrator.batch_size {n} samples / {gname} {G}")
    imp.put("training.samples_per_prompt", G, f"{gname}: {G}")
    steps = k.number("max_steps")
    if steps:
        imp.put("training.steps", steps, f"max_steps: {steps}")
    level_name = "max_async_level" if "max_async_level" in k else "orchestrator.max_async_level"
    level = k.number(level_name)
    if level == 0:
        imp.put("training.mode", "sync", f"{level_name}: 0 (on-policy)")
        imp.put("training.placement", "disaggregated", "prime-rl trains and infers on separate GPUs")
    else:
        imp.put("training.preset", "prime-rl", "prime-rl: inference runs ahead of training")
        if level is not None:
            imp.put("training.max_staleness", level, f"{level_name}: {level}")
    infer = k.number("deployment.num_infer_gpus", 1)
    tp = k.number("inference.parallel.tp", 1)
    train = k.number("deployment.num_train_gpus", 1)
    gpus_and_engines(imp, infer, tp, "deployment.num_infer_gpus", "inference.parallel.tp", train,
                     "deployment.num_train_gpus")  # fmt: skip
    return finish(imp, k)
