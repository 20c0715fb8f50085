"""SkyRL: its Hydra YAML or a launch script's overrides (``examples/train/*/*.sh``)."""

from __future__ import annotations

from pathlib import Path

from .common import finish, gpus_and_engines
from .table import Imported, Knobs, hydra_overrides, read_yaml

ENGINE = "generator.inference_engine"


def read(path: Path) -> Imported:
    flat = hydra_overrides(path)[0] if path.suffix == ".sh" else read_yaml(path)
    k, imp = Knobs(flat, path), Imported("skyrl", path)
    B = k.need("trainer.train_batch_size", "the prompts a step trains")
    G = k.number("generator.n_samples_per_prompt", 1)
    imp.put("training.prompts_per_step", B, f"trainer.train_batch_size: {B}")
    imp.put("training.samples_per_prompt", G, f"generator.n_samples_per_prompt: {G}")
    colocated = k.flag("trainer.placement.colocate_all", True)
    trainer = k.number("trainer.placement.policy_num_nodes", 1) * k.number(
        "trainer.placement.policy_num_gpus_per_node", 1
    )
    engines = k.number(f"{ENGINE}.num_engines", None) or k.number("generator.num_inference_engines", 1)
    tp = k.number(f"{ENGINE}.tensor_parallel_size", None) or k.number(
        "generator.inference_engine_tensor_parallel_size", 1
    )
    if k.flag("trainer.fully_async.enabled", False):
        imp.put("training.preset", "skyrl", "trainer.fully_async.enabled: true")
        s = k.number("trainer.fully_async.max_staleness_steps")
        if s is not None:
            imp.put("training.max_staleness", s, f"trainer.fully_async.max_staleness_steps: {s}")
    else:
        imp.put("training.mode", "sync", "trainer.fully_async.enabled not set: generate, then train")
        imp.put("training.placement", "colocated" if colocated else "disaggregated",
                f"trainer.placement.colocate_all: {colocated}")  # fmt: skip
    gpus_and_engines(imp, engines * tp, tp, f"{ENGINE}.num_engines {engines} x tensor_parallel_size",
                     "tensor_parallel_size", None if colocated else trainer,
                     "trainer.placement.policy_num_nodes x policy_num_gpus_per_node")  # fmt: skip
    return finish(imp, k)
