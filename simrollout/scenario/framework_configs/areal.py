"""AReaL: its experiment YAML (``examples/*/*.yaml``). The GPUs come from ``allocation_mode``
(``sglang:d4p1t1+d4p1t1``, ``vllm:d4+d4``, ``sglang.d24p1t1+d8p1t1``: inference + training) or,
in newer configs, ``rollout.backend`` and ``actor.backend`` (``sglang:d4p1t1``, ``fsdp:d4``)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from ...errors import InputError
from .common import finish, gpus_and_engines
from .table import Imported, Knobs, read_yaml

_PART = re.compile(r"^(?:([a-z_]+)[:.])?((?:[a-z]\d+)+)$")


def _parallel(spec: str, path: Path, knob: str) -> tuple[str | None, dict[str, int]]:
    """``sglang:d4p1t2`` -> ("sglang", {d: 4, p: 1, t: 2})."""
    m = _PART.match(spec.strip())
    if not m:
        raise InputError(
            f"{path}: field '{knob}' is {spec!r}; expected a backend and its parallel sizes, "
            "e.g. 'sglang:d4p1t1' (d data, p pipeline, t tensor parallel)."
        )
    return m.group(1), {a: int(n) for a, n in re.findall(r"([a-z])(\d+)", m.group(2))}


def _gpus(sizes: dict[str, int]) -> int:
    return math.prod(sizes.values())


def read(path: Path) -> Imported:
    k, imp = Knobs(read_yaml(path), path), Imported("areal", path)
    # AReaL-boba (v0.2) names them dataset.train_bs_n_seqs and group_size
    bk = "train_dataset.batch_size" if "train_dataset.batch_size" in k else "dataset.train_bs_n_seqs"
    gk = "gconfig.n_samples" if "gconfig.n_samples" in k or "group_size" not in k else "group_size"
    B, G = k.need(bk, "the prompts a step trains"), k.number(gk, 1)
    imp.put("training.prompts_per_step", B, f"{bk}: {B}")
    imp.put("training.samples_per_prompt", G, f"{gk}: {G}")
    if "allocation_mode" in k:
        mode = str(k.get("allocation_mode"))
        parts, knobs = mode.split("+"), ["allocation_mode"] * 2
    else:
        parts = [str(k.get(n)) for n in ("rollout.backend", "actor.backend") if n in k]
        knobs = ["rollout.backend", "actor.backend"]
    gen = _parallel(parts[0], path, knobs[0]) if parts else (None, {"d": 1})
    tp = gen[1].get("t", gen[1].get("m", 1)) * gen[1].get("p", 1)  # v0.2 writes tensor parallel as m
    if len(parts) == 2:
        train = _gpus(_parallel(parts[1], path, knobs[1])[1])
        imp.put("training.preset", "areal", "inference and training GPUs apart: AReaL's async loop")
        off = k.number("rollout.max_head_offpolicyness")
        if off is not None:
            imp.put("training.max_staleness", off, f"rollout.max_head_offpolicyness: {off}")
        gpus_and_engines(imp, _gpus(gen[1]), tp, f"{knobs[0]} {parts[0]}", "its p x t", train,
                         f"{knobs[1]} {parts[1]}")  # fmt: skip
    else:
        imp.put("training.mode", "sync", "derived: one allocation shared by generation and training")
        imp.put("training.placement", "colocated", f"{knobs[0]}: one allocation")
        gpus_and_engines(imp, _gpus(gen[1]), tp, knobs[0], "its p x t", None, "")
    return finish(imp, k)
