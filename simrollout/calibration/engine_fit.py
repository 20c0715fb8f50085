"""Fit an engine profile (simrollout.sim.serving's iteration model) to ``probe openai`` records.

- Prefill: at concurrency 1 a request's first token comes after ``overhead`` plus one iteration
  over its prompt: ``ttft = overhead + base + per_prefill_token x P`` (least squares over the
  prompt lengths).
- Decode: a request's time per output token is the mean iteration it shares with the others:
  ``base + per_decode x D + per_context_token x C`` plus the prefills of the requests that join
  meanwhile (each of the ``D - 1`` others prefills about once per request, spread over its
  ``O`` iterations). Non-negative least squares over every request, ``D`` its concurrency level
  and ``C`` its batch's context.
- KV capacity and running requests: from the server where it says (llama.cpp's slots), else
  given.

Goodness of fit: per level and prompt length, the median measured TTFT and TPOT beside the
profile's prediction, and their relative errors.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
from scipy import optimize

from ..errors import InputError
from ..scenario import Engine

MIN_REQUESTS = 8


def _ok(records: list[dict]) -> list[dict]:
    files = ", ".join(sorted({str(r["_file"]) for r in records})) or "the given files"
    ok = [r for r in records if r.get("ok") and r.get("ttft") is not None and r.get("output_tokens")]
    if len(ok) < MIN_REQUESTS:
        raise InputError(
            f"{files}: {len(ok)} successful generate records (of {len(records)}); at least "
            f"{MIN_REQUESTS} are needed to fit an engine profile. Probe again ('simrollout probe openai')."
        )
    ones = [r for r in ok if r["concurrency"] == 1 and r["mode"] == "plain"]
    if len({r["prompt_tokens"] for r in ones}) < 2:
        raise InputError(
            f"{files}: the prefill fit needs requests at concurrency 1 with at least two prompt "
            "lengths; probe with the default --concurrency (it starts at 1) and --prompts."
        )
    if len({r["concurrency"] for r in ok}) < 2:
        raise InputError(f"{files}: the decode fit needs at least two concurrency levels; probe 1,2,4,8.")
    return ok


def fit_engine(records: list[dict], kv_capacity: int | None = None, max_running: int | None = None) -> dict:
    """The ``engine`` mapping of a profile and its goodness of fit."""
    ok = _ok(records)
    plain = [r for r in ok if r["mode"] == "plain"]
    ones = [r for r in plain if r["concurrency"] == 1]
    p1 = np.array([r["prompt_tokens"] for r in ones], float)
    slope, intercept = np.polyfit(p1, [r["ttft"] for r in ones], 1)
    per_prefill = max(float(slope), 0.0)
    dec = [r for r in plain if r["output_tokens"] > 1 and r["tpot"] is not None]
    by_level: dict[int, list[dict]] = {}
    for r in dec:
        by_level.setdefault(r["concurrency"], []).append(r)
    mean_ctx = {
        c: np.mean([r["prompt_tokens"] + r["output_tokens"] / 2 for r in rs]) for c, rs in by_level.items()
    }
    mean_prompt = {c: np.mean([r["prompt_tokens"] for r in rs]) for c, rs in by_level.items()}
    rows, y = [], []
    for r in dec:
        d = r["concurrency"]
        own = r["prompt_tokens"] + r["output_tokens"] / 2
        ctx = own + (d - 1) * mean_ctx[d]
        joins = per_prefill * mean_prompt[d] * (d - 1) / r["output_tokens"]
        rows.append([1.0, d, ctx])
        y.append(r["tpot"] - joins)
    coef, _ = optimize.nnls(np.array(rows), np.array(y))
    base = max(float(coef[0]), 1e-6)
    overhead = max(float(intercept) - base, 0.0)
    slots = next((r.get("slots") for r in ok if r.get("slots")), None)
    slot_ctx = next((r.get("slot_context") for r in ok if r.get("slot_context")), None)
    kv = kv_capacity or (slots * slot_ctx if slots and slot_ctx else None)
    if kv is None:
        raise InputError(
            "the server did not say its KV-cache size: give --kv-capacity TOKENS (vLLM logs it at "
            "start as 'GPU KV cache size: N tokens')."
        )
    engine = {
        "iteration": {"base": round(base, 6), "per_prefill_token": float(f"{per_prefill:.4g}"),
                      "per_decode": float(f"{coef[1]:.4g}"), "per_context_token": float(f"{coef[2]:.4g}")},
        "kv_capacity_tokens": int(kv),
        "max_running": int(max_running or slots or 256),
        "max_batch_tokens": 2048 if slots else 8192,  # llama.cpp's -b default; vLLM's chunked prefill
        "overhead": round(overhead, 6),
    }  # fmt: skip
    model = Engine.model_validate(engine)
    return {"engine": engine, "fit": goodness(ok, model)}


def predict(
    model: Engine, concurrency: int, prompt: float, output: float, mean_prompt: float
) -> tuple[float, float]:
    """The profile's TTFT and TPOT for a plain request in a closed loop at ``concurrency``."""
    it = model.iteration
    ttft = model.overhead + it(prompt, 0, 0) if concurrency == 1 else float("nan")
    ctx = concurrency * (mean_prompt + output / 2)
    tpot = it(0, concurrency, ctx) + it.per_prefill_token * mean_prompt * (concurrency - 1) / output
    return ttft, tpot


def goodness(ok: list[dict], model: Engine) -> dict:
    """Median measured vs predicted TTFT (concurrency 1) and TPOT, per level and prompt length."""
    out: dict = {}
    plain = [r for r in ok if r["mode"] == "plain"]
    for c in sorted({r["concurrency"] for r in plain}):
        at = [r for r in plain if r["concurrency"] == c]
        mean_prompt = float(np.mean([r["prompt_tokens"] for r in at]))
        for p in sorted({r["prompt_tokens"] for r in at}):
            g = [r for r in at if r["prompt_tokens"] == p]
            o = float(np.median([r["output_tokens"] for r in g]))
            ttft, tpot = predict(model, c, p, o, mean_prompt)
            tp = [r["tpot"] for r in g if r["tpot"] is not None]
            row = {"n": len(g), "tpot_median": float(np.median(tp)) if tp else None, "tpot_predicted": tpot}
            if tp:
                row["tpot_rel_error"] = round(tpot / row["tpot_median"] - 1, 4)
            if c == 1:
                row["ttft_median"] = float(np.median([r["ttft"] for r in g]))
                row["ttft_predicted"] = ttft
                row["ttft_rel_error"] = round(ttft / row["ttft_median"] - 1, 4)
            out[f"c{c}_p{p}"] = row
    shared = [r for r in ok if r["mode"] == "shared_prefix"]
    if shared:  # pairs: the second of each found the prefix cached (if the server caches)
        first, second = shared[0::2], shared[1::2]
        out["shared_prefix"] = {
            "first_ttft_median": float(np.median([r["ttft"] for r in first])),
            "second_ttft_median": float(np.median([r["ttft"] for r in second])) if second else None,
            "second_cached_tokens": [r.get("cached_tokens") for r in second],
        }
    return out


def engine_profile(records: list[dict], name: str, kv_capacity: int | None = None,
                   max_running: int | None = None) -> dict:  # fmt: skip
    """Records -> a profile under calibration/engines/ (with provenance and goodness of fit)."""
    fitted = fit_engine(records, kv_capacity, max_running)
    first = records[0]
    return {
        "version": 1,
        "name": name,
        "provenance": {
            "method": "probe fit (simrollout probe openai; simrollout.calibration.engine_fit)",
            "server": first["host"],
            "model": first["image"],
            "engine_version": first.get("engine_version", ""),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
            "probe_files": sorted({Path(r["_file"]).name for r in records}),
            "runs": sorted({r["run_id"] for r in records}),
            "requests": len(records),
            "failed": sum(not r.get("ok") for r in records),
        },
        "engine": fitted["engine"],
        "fit": fitted["fit"],
    }
