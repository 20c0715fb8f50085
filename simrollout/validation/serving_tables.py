"""GPU engine profiles against published serving-benchmark tables.

A profile's iteration coefficients come from the model's shape and the GPU's figures
(``validation/engines_gpu/specs.yaml``) and up to three efficiencies fitted on the table rows
marked ``fit`` (``published.csv``); the rows marked ``held_out`` are then predicted. Each row's
load runs through the serving engine model (:class:`~simrollout.sim.serving.ServingTier`):
``requests`` requests of ``input_len`` tokens in and ``output_len`` out, sent by ``concurrency``
clients one after another (a closed loop, as ``vllm bench serve --max-concurrency`` and a batch-1
speed benchmark do).

The coefficients, for ``n`` GPUs of bandwidth ``B`` and dense BF16 FLOPs ``F`` each at tensor
parallel ``n`` (``e``: the published efficiency per doubling of ``n``):

- ``base`` = weight bytes / (eta_bandwidth x B_n), ``B_n = n x B x e^log2(n)`` (a decode reads
  every weight once per iteration)
- ``per_context_token`` = KV bytes per token / (eta_bandwidth x B_n)
- ``per_prefill_token`` = 2 x params / (eta_prefill x F_n); ``per_prefill_attention`` =
  4 x layers x query heads x head dim / (eta_prefill x F_n) (QK^T and PV per pair of tokens)
- ``per_decode`` = 2 x params / (eta_decode x F_n) (eta_decode = eta_prefill unless a fit row
  has more than one request in flight)
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import simpy
from scipy.optimize import least_squares

from ..errors import InputError, load_yaml
from ..scenario import Engine, Inference
from ..sim.serving import ServingTier

COLUMNS = ["profile", "input_len", "output_len", "concurrency", "requests", "metric", "value", "split"]
METRICS = ("total_tokens_per_s", "output_tokens_per_s", "itl_median_ms")
GIB = 1024**3
NUMBERS = {
    "models": ("params", "layers", "q_heads", "kv_heads", "head_dim"),
    "gpus": ("memory_gib", "bandwidth", "flops"),
    "profiles": ("tp", "memory_fraction", "activations_gib", "max_batch_tokens", "max_running", "overhead"),
}


def load_rows(path: Path) -> pd.DataFrame:
    """The published rows; an InputError names the file, the column and what was expected."""
    try:
        rows = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read a CSV table ({exc}).") from None
    missing = [c for c in COLUMNS if c not in rows.columns]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}.")
    for col in ("input_len", "output_len", "concurrency", "requests", "value"):
        vals = pd.to_numeric(rows[col], errors="coerce")
        if vals.isna().any() or (vals <= 0).any():
            line = int(np.flatnonzero(vals.isna() | (vals <= 0))[0]) + 2
            raise InputError(f"{path}: line {line}, column '{col}': expected a positive number.")
    bad = ~rows["metric"].isin(METRICS)
    if bad.any():
        line = int(np.flatnonzero(bad)[0]) + 2
        raise InputError(f"{path}: line {line}, column 'metric': expected one of {', '.join(METRICS)}.")
    bad = ~rows["split"].isin(("fit", "held_out"))
    if bad.any():
        line = int(np.flatnonzero(bad)[0]) + 2
        raise InputError(f"{path}: line {line}, column 'split': expected 'fit' or 'held_out'.")
    return rows


def load_specs(path: Path) -> dict:
    """Models, GPUs and profiles; each profile's model and GPU must be named there."""
    data, _ = load_yaml(path)
    for key in ("models", "gpus", "profiles", "tp_efficiency"):
        if not isinstance(data, dict) or key not in data:
            raise InputError(f"{path}: field '{key}' missing (models, gpus, profiles, tp_efficiency).")
    for table, fields in NUMBERS.items():
        for name, entry in data[table].items():
            for f in fields:
                try:
                    entry[f] = float(entry[f])
                except (KeyError, TypeError, ValueError):
                    raise InputError(f"{path}: field '{table}.{name}.{f}': expected a number.") from None
    for name, prof in data["profiles"].items():
        for key in ("efficiencies_from", "prefill_from"):
            src = prof.get(key)
            if src is not None and (src not in data["profiles"] or src == name):
                raise InputError(f"{path}: field 'profiles.{name}.{key}': {src!r} is not another profile.")
        for key, table in (("model", "models"), ("gpu", "gpus")):
            if prof.get(key) not in data[table]:
                raise InputError(
                    f"{path}: field 'profiles.{name}.{key}': {prof.get(key)!r} is not one of {table}."
                )
    return data


def engine_spec(specs: dict, name: str, eff: dict[str, float]) -> dict:
    """The profile's ``engine`` section for efficiencies ``eff`` (bandwidth, prefill, decode)."""
    prof = specs["profiles"][name]
    model, gpu, tp = specs["models"][prof["model"]], specs["gpus"][prof["gpu"]], int(prof["tp"])
    scale = tp * specs["tp_efficiency"] ** math.log2(tp)
    bw, flops = gpu["bandwidth"] * scale, gpu["flops"] * scale
    weights = 2 * model["params"]
    kv = model["layers"] * model["kv_heads"] * model["head_dim"] * 2 * 2
    memory = tp * gpu["memory_gib"] * GIB * prof["memory_fraction"] - tp * prof["activations_gib"] * GIB
    return {
        "iteration": {
            "base": _sig(weights / (eff["bandwidth"] * bw)),
            "per_decode": _sig(2 * model["params"] / (eff["decode"] * flops)),
            "per_context_token": _sig(kv / (eff["bandwidth"] * bw)),
            "per_prefill_token": _sig(2 * model["params"] / (eff["prefill"] * flops)),
            "per_prefill_attention": _sig(
                4 * model["layers"] * model["q_heads"] * model["head_dim"] / (eff["prefill"] * flops)
            ),
        },
        "kv_capacity_tokens": int((memory - weights) // kv),
        "max_batch_tokens": int(prof["max_batch_tokens"]),
        "max_running": int(prof["max_running"]),
        "gpus": tp,
        "overhead": float(prof["overhead"]),
    }


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def simulate(engine: Engine, input_len: int, output_len: int, concurrency: int, requests: int) -> dict:
    """``requests`` requests from ``concurrency`` closed-loop clients on one engine model: output
    and total tokens per second over the run, and the median of the requests' time per output token."""
    env = simpy.Environment()
    tier = ServingTier(env, Inference(engines=1, engine=engine, prefix_cache=False))
    left, tpots, ids = [requests], [], iter(range(requests))

    def client():
        while left[0] > 0:
            left[0] -= 1
            yield env.timeout(engine.overhead)
            req = tier.request(next(ids), input_len, output_len)
            yield req.done
            if output_len > 1:
                tpots.append((req.end - req.first) / (output_len - 1))

    for _ in range(min(concurrency, requests)):
        env.process(client())
    env.run()
    return {
        "output_tokens_per_s": requests * output_len / env.now,
        "total_tokens_per_s": requests * (input_len + output_len) / env.now,
        "itl_median_ms": float(np.median(tpots)) * 1000,
    }


def predict(specs: dict, name: str, rows: pd.DataFrame, eff: dict[str, float]) -> np.ndarray:
    """The model's value of each row's metric for profile ``name`` at efficiencies ``eff``."""
    engine = Engine.model_validate(engine_spec(specs, name, eff))
    out, cache = [], {}
    for r in rows.itertuples():
        key = (int(r.input_len), int(r.output_len), int(r.concurrency), int(r.requests))
        if key not in cache:
            cache[key] = simulate(engine, *key)
        out.append(cache[key][r.metric])
    return np.array(out)


def fit(specs: dict, name: str, rows: pd.DataFrame, known: dict | None = None) -> dict[str, float]:
    """Efficiencies that best match the profile's ``fit`` rows (least squares on log ratios, each
    at most 1); a profile with ``efficiencies_from`` takes another profile's fit unchanged, one
    with ``prefill_from`` that profile's prefill efficiency (its rows' prompts too short to say)."""
    known = {} if known is None else known  # fits made already (profile -> efficiencies)
    if name in known:
        return known[name]
    prof = specs["profiles"][name]
    if prof.get("efficiencies_from"):
        known[name] = fit(specs, prof["efficiencies_from"], rows, known)
        return known[name]
    at = rows[(rows["profile"] == name) & (rows["split"] == "fit")]
    if at.empty:
        raise InputError(f"profile {name}: no row marked 'fit' to fit its efficiencies on.")
    src = prof.get("prefill_from")
    fixed = {"prefill": fit(specs, src, rows, known)["prefill"]} if src else {}
    batched = bool((at["concurrency"] > 1).any())
    keys = [k for k in ["bandwidth", "prefill"] + (["decode"] if batched else []) if k not in fixed]

    def eff(x):
        e = {**fixed, **dict(zip(keys, np.exp(x), strict=True))}
        return {"bandwidth": e["bandwidth"], "prefill": e["prefill"], "decode": e.get("decode", e["prefill"])}

    def resid(x):
        return np.log(predict(specs, name, at, eff(x)) / at["value"].to_numpy())

    sol = least_squares(resid, np.log(np.full(len(keys), 0.5)), bounds=(-5, 0.0), diff_step=1e-3)
    known[name] = {k: round(float(v), 4) for k, v in eff(sol.x).items()}
    return known[name]


def evaluate(specs: dict, rows: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, dict[str, float]]]:
    """Every row with its prediction and error, and each profile's fitted efficiencies."""
    unknown = sorted(set(rows["profile"]) - set(specs["profiles"]))
    if unknown:
        raise InputError(
            f"published rows name profile(s) {', '.join(unknown)} that specs.yaml does not define."
        )
    parts, effs = [], {}
    for name in specs["profiles"]:
        at = rows[rows["profile"] == name].copy()
        if at.empty:
            continue
        fit(specs, name, rows, effs)
        at["predicted"] = predict(specs, name, at, effs[name])
        at["error_pct"] = 100 * (at["predicted"] / at["value"] - 1)
        parts.append(at)
    return pd.concat(parts, ignore_index=True), effs


def mape(pred: pd.DataFrame) -> pd.DataFrame:
    """Per profile and split: rows and mean absolute percentage error."""
    g = pred.assign(abs_err=pred["error_pct"].abs()).groupby(["profile", "split"])["abs_err"]
    return g.agg(rows="size", mape_pct="mean").reset_index()
