"""Refits of an engine profile from resamples of its ``probe openai`` records.

Each refit fits the same way the point fit does (:func:`.engine_fit.fit_engine`) on a resample
taken by block: within each run, level, mode and prompt length, the requests are drawn with
replacement (a shared-prefix pair as one block: its second request's time depends on the
first), so every group keeps its size and every request the load it met. Without decode runs
the split of the lone iteration into ``base`` and ``per_decode`` is kept as the point fit has
it. Where the probe has reference blocks, each refit's prefill costs (and the request overhead)
are then scaled by the first token's drift factor and its decode costs by the time per output
token's, at one moment of the probe drawn per refit (:func:`.drift.drift_factors`). The refits,
re-simulated with common random numbers (:mod:`simrollout.whatif.uncertainty`), give a projection's
band.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import InputError
from .bootstrap import redraw
from .drift import NOT_MEASURED, drift_factors

DEFAULT_ENGINE_BOOTSTRAP = 20  # a refit replays the probe's loaded levels: about 0.1-0.3 s each
METHOD = "block bootstrap: requests resampled within each run, level, mode and prompt length"
PREFILL = ("per_prefill_token", "per_prefill_attention", "per_cached_attention")  # x the TTFT drift
DECODE = ("base", "per_decode", "per_context_token")  # x the TPOT drift


def request_blocks(records: list[dict]) -> list[list[list[dict]]]:
    """Groups (run, level, mode, prompt length) of blocks: a request each, a shared-prefix pair
    together."""
    groups: dict[tuple, list[list[dict]]] = {}
    for r in sorted(records, key=lambda r: r["start"]):
        key = (r["run_id"], r["concurrency"], r["mode"], r.get("prompt_length") or r.get("prompt_tokens"))
        blocks = groups.setdefault(key, [])
        if r["mode"] == "shared_prefix" and blocks and len(blocks[-1]) == 1:
            blocks[-1].append(r)
        else:
            blocks.append([r])
    return list(groups.values())


def resample(groups: list[list[list[dict]]], rng: np.random.Generator) -> list[dict]:
    """One resample: each group's blocks drawn with replacement, as many as it had."""
    out: list[dict] = []
    for blocks in groups:
        for k in rng.integers(0, len(blocks), len(blocks)):
            out.extend(blocks[k])
    return out


MIN_LONE = 4  # requests per prompt length at concurrency 1 a resample needs to carry a spread


def thin(records: list[dict]) -> str | None:
    """Why a probe is too thin to resample (too few lone requests of a prompt length), or None."""
    counts: dict[int, int] = {}
    for r in records:
        if r["concurrency"] == 1 and r["mode"] == "plain":
            length = r.get("prompt_length") or r["prompt_tokens"]
            counts[length] = counts.get(length, 0) + 1
    short = {k: v for k, v in sorted(counts.items()) if v < MIN_LONE}
    if not short:
        return None
    files = ", ".join(sorted({str(r.get("_file", "the records")) for r in records}))
    told = ", ".join(f"{v} of prompt length {k}" for k, v in short.items())
    return (f"{files}: {told} at concurrency 1; at least {MIN_LONE} of each are needed to resample "
            "them (fewer leave the refits without the prefill's spread); probe more")  # fmt: skip


def with_drift(engine: dict, factors: dict[str, float]) -> dict:
    """``engine`` with its prefill costs times the TTFT factor and its decode costs times the
    TPOT factor."""
    out = {**engine, "iteration": dict(engine["iteration"])}
    it = out["iteration"]
    for key, phase in [(k, "ttft") for k in PREFILL] + [(k, "tpot") for k in DECODE]:
        if it.get(key) is not None and phase in factors:
            it[key] = float(f"{it[key] * factors[phase]:.4g}")
    if "ttft" in factors:
        out["overhead"] = float(f"{out.get('overhead', 0.0) * factors['ttft']:.4g}")
    return out


def engine_uncertainty(records: list[dict], point: dict, drift: dict | None, refits: int, seed: int = 0,
                       kv_capacity: int | None = None, max_running: int | None = None,
                       strict: bool = False, fit_engine=None) -> dict:  # fmt: skip
    """The engine profile's ``uncertainty`` mapping: ``refits`` refits of the fit (``engines``)
    and the drift. A probe too thin to resample (:func:`thin`), or whose resamples cannot be
    fitted, gets no refits and says why (refused with an InputError when ``strict``: refits
    asked for)."""
    from ..scenario import Engine

    out = {"method": METHOD if refits else "none: --bootstrap 0", "refits": 0, "seed": seed,
           "drift": drift if drift is not None else NOT_MEASURED,
           "drift_applied": drift is not None}  # fmt: skip
    reason = thin(records) if refits else None
    if reason:
        if strict:
            raise InputError(f"--bootstrap {refits}: {reason}; or calibrate with --bootstrap 0.")
        warnings.warn(f"no refits (no bands from this engine profile): {reason}", stacklevel=2)
        return {**out, "refused": reason, "engines": []}
    groups = request_blocks(records)
    split = len({r["concurrency"] for r in records if r["mode"] == "decode"}) >= 2

    def one(rng: np.random.Generator) -> dict:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted = fit_engine(resample(groups, rng), kv_capacity, max_running)["engine"]
        engine = with_drift(fitted if split else _keep_split(fitted, point), drift_factors(drift, rng))
        Engine.model_validate(engine)
        return engine

    engines, failed, reason = redraw(one, refits, seed)
    if reason:
        warnings.warn(f"no refits (no bands from this engine profile): {reason}", stacklevel=2)
        return {**out, "refused": reason, "engines": []}
    out["refits"] = len(engines)
    if failed:
        out["redrawn"] = failed
    out["spread"] = spread(point, engines)
    out["engines"] = engines
    return out


def _keep_split(engine: dict, point: dict) -> dict:
    """``engine`` with its lone iteration split into ``base`` and ``per_decode`` as ``point``'s is:
    without decode runs only the replay of the loaded levels reads the split, and a resample's
    replay (requests repeated in a closed loop) is biased."""
    it, p = dict(engine["iteration"]), point["iteration"]
    lone = it["base"] + it["per_decode"]
    share = p["per_decode"] / (p["base"] + p["per_decode"])
    it["per_decode"] = float(f"{lone * share:.4g}")
    it["base"] = float(f"{max(lone - it['per_decode'], 1e-6):.4g}")
    return {**engine, "iteration": it}


def spread(point: dict, engines: list[dict]) -> dict[str, dict[str, float]]:
    """Per iteration cost, the refits' 5th and 95th percentile relative to the point fit's."""
    out = {}
    for key, p in point["iteration"].items():
        if key not in PREFILL + DECODE:  # a size, not a cost (cached_attention_below)
            continue
        vals = np.array([e["iteration"].get(key, np.nan) for e in engines], float)
        vals = vals[np.isfinite(vals)]
        if p and len(vals):
            lo, hi = np.quantile(vals, [0.05, 0.95]) / p - 1
            out[key] = {"lo": round(float(lo), 4), "hi": round(float(hi), 4)}
    return out
