"""What every importer fills the same way: GPUs and engines, the assumed times, the unmapped rest."""

from __future__ import annotations

import math

from .table import Imported, Knobs

ASSUMED_STEPS = 20


def gpus_and_engines(imp: Imported, gpus: int, per_engine: int, gpus_src: str, per_src: str,
                     trainer: int | None, trainer_src: str) -> None:  # fmt: skip
    """Inference engines (``gpus / per_engine``) and, apart from them, the trainer's GPUs."""
    engines = max(gpus // max(per_engine, 1), 1)
    imp.put("cluster.inference.engines", engines, f"{gpus_src} = {gpus} GPUs / {per_src} {per_engine}")
    if trainer is not None:
        imp.put("training.trainer.gpus", trainer, f"{trainer_src} = {trainer}")


def finish(imp: Imported, k: Knobs) -> Imported:
    """The fields no config gives (marked assumed), the concurrency, and the unmapped fields."""
    f = imp.fields
    if "training.steps" not in f:
        imp.put("training.steps", ASSUMED_STEPS, "assumed: the config gives no step count")
    if "training.placement" not in f and "training.preset" not in f:
        imp.put("training.placement", "colocated", "assumed: no separate trainer GPUs given")
    disagg = f.get("training.placement", None)
    apart = (disagg is not None and disagg.value == "disaggregated") or "training.preset" in f
    if apart and "training.trainer.gpus" not in f:
        imp.put("training.trainer.gpus", 1, "assumed: the config gives no trainer GPU count")
    imp.put(
        "training.train_time", 60, "assumed: seconds per step's update; calibrate it (docs/calibration.md)"
    )
    imp.put("training.weight_sync_time", 10, "assumed: seconds per weight sync")
    B, G = f["training.prompts_per_step"].value, f["training.samples_per_prompt"].value
    imp.put(
        "cluster.concurrency", int(math.ceil(B * G)), f"derived: one step's samples at once, B {B} x G {G}"
    )
    imp.fields = {**{p: m for p, m in f.items() if p.startswith("cluster")},
                  **{p: m for p, m in f.items() if not p.startswith("cluster")}}  # fmt: skip
    for m in imp.fields.values():  # a knob the config leaves out is named with the default taken
        gone = [f"{n} {d}" for n, d in k.defaulted.items() if n in m.source]
        if gone:
            m.source += f" (not given, the default: {', '.join(gone)})"
    imp.unmapped = k.rest()
    return imp
