"""slime: the command-line arguments of a launch script (``scripts/run-*.sh``): ``train.py``
generates then trains; ``train_async.py`` generates the next rollout while this one trains."""

from __future__ import annotations

from pathlib import Path

from ...errors import read_text
from .common import finish, gpus_and_engines
from .shell import read_script
from .table import Imported, Knobs, scalar


def flags(words: list[str]) -> dict[str, object]:
    """``--name value`` pairs (a ``--name`` followed by another flag: true)."""
    out: dict[str, object] = {}
    for i, w in enumerate(words):
        if w.startswith("--") and len(w) > 2:
            nxt = words[i + 1] if i + 1 < len(words) else None
            out[w[2:]] = scalar(nxt) if nxt is not None and not nxt.startswith("--") else True
    return out


def read(path: Path) -> Imported:
    _, words = read_script(read_text(path, "shell script"))
    k, imp = Knobs(flags(words), path), Imported("slime", path)
    B = k.need("rollout-batch-size", "the prompts a step trains")
    G = k.number("n-samples-per-prompt", 1)
    imp.put("training.prompts_per_step", B, f"--rollout-batch-size {B}")
    imp.put("training.samples_per_prompt", G, f"--n-samples-per-prompt {G}")
    steps = k.number("num-rollout")
    if steps:
        imp.put("training.steps", steps, f"--num-rollout {steps}")
    actor = k.number("actor-num-nodes", 1) * k.number("actor-num-gpus-per-node", 8)
    per = k.number("rollout-num-gpus-per-engine", 1)
    actor_src = "--actor-num-nodes x --actor-num-gpus-per-node"
    is_async = any(w.endswith("train_async.py") for w in words)
    if k.flag("colocate", False):
        imp.put("training.mode", "sync", "--colocate: generation and training take turns")
        imp.put("training.placement", "colocated", "--colocate")
        gpus_and_engines(imp, actor, per, actor_src, "--rollout-num-gpus-per-engine", None, "")
    else:
        if is_async:
            imp.put("training.preset", "slime-async", "train_async.py: the next rollout overlaps training")
        else:
            imp.put("training.mode", "sync", "train.py: each rollout generated, then trained")
            imp.put("training.placement", "disaggregated", "no --colocate: actor and rollout GPUs apart")
        rollout = k.number("rollout-num-gpus", actor)
        gpus_and_engines(imp, rollout, per, "--rollout-num-gpus", "--rollout-num-gpus-per-engine", actor,
                         actor_src)  # fmt: skip
    return finish(imp, k)
