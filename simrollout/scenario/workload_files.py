"""``workload: {import: PATH, ...}`` and ``workload: {replay: PATH, format: FORMAT, ...}`` in a
scenario, expanded into an ordinary workload mapping before validation. Fields beside
``import`` override the imported ones; beside ``replay``, ``llm_time``, ``setup`` and
``reward`` are drawn instead of replayed, and the rest (``trajectories``, ``max_turns``,
``tool_timeout``, ``images``) apply as usual."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputError, did_you_mean_file, load_yaml
from .base import merge

REPLAY_KEYS = ("format", "resample", "llm", "overlap", "on_bad", "tool_map")
TRACE_FIXED = ("steps", "calls_per_step", "tools", "tokens")  # what a replay takes from the trace
DRAWN = ("llm_time", "setup", "reward")


def _find(ref, scenario: Path, field: str, section: str = "workload") -> Path:
    if not isinstance(ref, str) or not ref:
        raise InputError(f"{scenario}: field '{section}.{field}' must be a file path, got {ref!r}.")
    for cand in (scenario.parent / ref, Path(ref)):
        if cand.is_file():
            return cand
    raise InputError(
        f"{scenario}: field '{section}.{field}': '{ref}' not found (looked relative to the scenario file "
        f"and to the current directory){did_you_mean_file(ref, scenario) or '.'}"
    )


def expand_workload(wl: dict, scenario: Path, training: bool = False) -> dict:
    if "import" in wl and "replay" in wl:
        raise InputError(
            f"{scenario}: field 'workload': give 'import' (a fitted workload) or 'replay' (a "
            "trace), not both."
        )
    return _import(wl, scenario) if "import" in wl else _replay(wl, scenario, training)


def imported_inference(wl: dict, scenario: Path) -> dict:
    """A training profile's ``inference`` fields (the engines' ``slowdown`` its rollout was fitted
    with), which ``workload: {import: PROFILE}`` lays under the scenario's ``cluster.inference``."""
    data, _ = load_yaml(_find(wl["import"], scenario, "import"))
    inf = data.get("inference") if isinstance(data, dict) and data.get("kind") == "training" else None
    return inf if isinstance(inf, dict) else {}


def _import(wl: dict, scenario: Path) -> dict:
    path = _find(wl["import"], scenario, "import")
    data, _ = load_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("workload"), dict):
        raise InputError(
            f"{path}: expected a workload section ('workload:' mapping) written by "
            "'simrollout workload'; imported by " + str(scenario) + "."
        )
    over = {k: v for k, v in wl.items() if k not in ("import", "llm")}
    base = dict(data["workload"])
    if wl.get("llm", "time") == "tokens":
        if not isinstance(data.get("tokens"), dict):
            raise InputError(
                f"{scenario}: field 'workload.llm' is 'tokens' but {path} has no token workload "
                "(the trace had no token counts); use llm: time."
            )
        base.pop("llm_time", None)
        base["tokens"] = data["tokens"]
    elif wl.get("llm", "time") != "time":
        raise InputError(f"{scenario}: field 'workload.llm': expected 'time' or 'tokens', got {wl['llm']!r}.")
    if "llm_time" in over or "tokens" in over:  # one LLM model: the override replaces the imported one
        base.pop("llm_time", None)
        base.pop("tokens", None)
    return merge(base, over)


def _replay(wl: dict, scenario: Path, training: bool) -> dict:
    from ..distributions import Discrete, Empirical, dump_dist
    from ..traces.fit import fit_values
    from ..traces.replay import load
    from .workload import Replay

    fixed = [k for k in TRACE_FIXED if k in wl]
    if fixed:
        raise InputError(
            f"{scenario}: field 'workload.{fixed[0]}' beside 'replay': a replay takes steps, tool calls, "
            "their latencies and tokens from the trace; drop it, or fit the trace ('simrollout workload') "
            "and use 'import'."
        )
    path = _find(wl["replay"], scenario, "replay")
    spec = {"path": str(path.resolve()), **{k: wl[k] for k in REPLAY_KEYS if k in wl}}
    spec["draw"] = [k for k in DRAWN if k in wl]
    try:
        rp = Replay.model_validate(spec)
    except Exception as exc:  # shown with its field by the scenario's own validation below
        from pydantic import ValidationError

        from ..errors import explain

        if isinstance(exc, ValidationError):
            raise explain(exc, scenario) from None
        raise
    data = load(rp)
    out = {k: v for k, v in wl.items() if k not in ("replay", *REPLAY_KEYS)}
    out["replay"] = rp.model_dump() | {"size": data.n}
    vals, n = np.unique(data.steps, return_counts=True)
    out["steps"] = dump_dist(Discrete(values=vals.tolist(), weights=(n / n.sum()).tolist()))
    vals, n = np.unique(data.calls, return_counts=True)
    out["calls_per_step"] = dump_dist(Discrete(values=vals.tolist(), weights=(n / n.sum()).tolist()))
    out["tools"] = {
        c: {"weight": float(max((data.category == k).sum(), 1)), "latency": 0.0}
        for k, c in enumerate(data.categories)
    } or {"none": {"weight": 1.0, "latency": 0.0}}
    if rp.llm == "tokens":
        if data.prompt is None:
            raise InputError(
                f"{scenario}: field 'workload.llm' is 'tokens' but the trace {path.name} has no "
                "token counts for every step; use llm: time."
            )
        tok = {}
        for k, x in (("prompt", data.prompt), ("appended", data.append), ("output", data.output)):
            tok[k] = dump_dist(fit_values(x, floor=1.0)[0])
        tok["max_context"] = int(
            max(x.input_tokens + x.output_tokens for t in data.trace.trajectories for x in t.steps)
        )
        out["tokens"] = tok
        out.pop("llm_time", None)
    elif "llm_time" not in out:
        llm = data.llm[np.isfinite(data.llm)]
        if not llm.size:
            raise InputError(
                f"{scenario}: the trace {path.name} ({rp.format}) records no LLM time; give 'llm_time' "
                "beside 'replay' (a distribution drawn per step) or llm: tokens."
            )
        out["llm_time"] = dump_dist(Empirical(samples=np.quantile(llm, np.linspace(0, 1, 101)).tolist()))
    if "trajectories" not in out and not training:  # the trace's own count (a loop sets its budget)
        out["trajectories"] = data.n
    return out
