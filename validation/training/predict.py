"""Published async-vs-sync training tables predicted from their sync rows (validation/training/README.md).

    python validation/training/predict.py fit    # fit on the sync rows, write scenarios/ and fit.json
    python validation/training/predict.py run    # simulate every row, write predictions.csv

``fit`` reads only the rows of ``published.csv`` whose role is ``input`` (and the setups' published
settings); ``run`` simulates every row, held-out ones included, and compares the mean step of the
steady state (the first ``WARMUP`` steps left out) with the published figure.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy import optimize, stats

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SAMPLES = 512 * 16  # both setups: 512 prompts x 16 samples a step
Z = float(stats.norm.ppf(1.0 - 1.0 / SAMPLES))  # the 1-in-8192 quantile: a step's longest sample
WARMUP = 2  # steps left out of the mean (the pipeline filling)
STEPS = 8


def _workload(fit: dict) -> dict:
    """One LLM turn a sample, no tools: its time lognormal as fitted on the sync rows."""
    llm = {"kind": "lognormal", "median": round(fit["median_s"], 4), "sigma": round(fit["sigma"], 4)}
    return {"steps": 1, "calls_per_step": 0, "llm_time": llm}


def _lognormal_through(mean: float, top: float) -> tuple[float, float]:
    """Median and sigma of a lognormal with ``mean`` whose 1-in-8192 quantile is ``top``:
    ln(top / mean) = Z sigma - sigma^2 / 2 (the smaller root)."""
    r = math.log(top / mean)
    sigma = Z - math.sqrt(Z * Z - 2.0 * r)
    return mean / math.exp(sigma * sigma / 2.0), sigma


def _lognormal(fit: dict) -> dict:
    """One sample's generation time on an engine alone."""
    return {"kind": "lognormal", "median": round(fit["median_s"], 4), "sigma": round(fit["sigma"], 4)}


# ----------------------------------------------------------------- verl, fully async (Qwen2.5-Math-7B, H20)
VERL = {
    "params_b": 7.6,  # Qwen2.5-Math-7B
    "peak_tflops": 148.0,  # H20, dense BF16 (NVIDIA's H20 specification)
    "mfu": 0.4,  # assumed: only sets the mean response length from the trainer's FLOPs
    "max_tokens": 28 * 1024,  # max_response_length 28K
    "max_num_seqs": 1024,  # verl's rollout default (actor_rollout_ref.rollout.max_num_seqs)
    "sync_s": 0.12,  # the same page's checkpoint-engine table: Qwen2.5-Math-7B, 4:4 ranks, without it
}


def fit_verl(rows: pd.DataFrame) -> dict:
    """Trainer: update_actor = a + b / GPUs (relative least squares over the sync rows). Rollout:
    gen = Q x (1 + s (8192 / GPUs - 1)), Q the step's longest sample on an engine alone and s the
    slowdown per request running beside it (log least squares). The mean response length: the
    trained tokens implied by b at the assumed MFU (tokens per GPU-second = peak x mfu / 6 N)."""
    g = rows["gpus"].to_numpy(float)
    upd, gen = rows["update_actor"].to_numpy(float), rows["gen"].to_numpy(float)
    a, b = optimize.least_squares(lambda p: (p[0] + p[1] / g) / upd - 1.0, [50.0, 5000.0],
                                  bounds=([0, 0], [np.inf, np.inf])).x  # fmt: skip
    q, s = optimize.least_squares(lambda p: np.log(p[0] * (1 + p[1] * (SAMPLES / g - 1)) / gen),
                                  [100.0, 0.01], bounds=([1e-3, 0], [np.inf, np.inf])).x  # fmt: skip
    v = VERL
    tps = v["peak_tflops"] * 1e12 * v["mfu"] / (6.0 * v["params_b"] * 1e9)  # tokens / GPU-s, fwd + bwd
    mean_tokens = b * tps / SAMPLES
    med, sigma = _lognormal_through(mean_tokens, v["max_tokens"])
    per_token = q / v["max_tokens"]  # s per token on an engine alone
    return {"intercept": a, "gpu_seconds": b, "tokens_per_gpu_second": tps, "mean_tokens": mean_tokens,
            "longest_s": q, "slowdown": s, "median_s": med * per_token, "sigma": sigma}  # fmt: skip


def verl_scenario(row: pd.Series, fit: dict) -> dict:
    sync = row["mode"] == "sync"
    engines = int(row["gpus"]) if sync else int(row["rollout_gpus"])
    training = {
        "prompts_per_step": 512,
        "samples_per_prompt": 16,
        "steps": STEPS,
        "model": {"params_b": VERL["params_b"]},
        "train_time": {
            "kind": "flops",
            "tokens_per_gpu_second": round(fit["tokens_per_gpu_second"], 3),
            "tokens_per_turn": round(fit["mean_tokens"], 1),
            "recompute_logprobs": False,  # old_log_prob is apart in the sync rows; the engines' in async
            "intercept": round(fit["intercept"] / (1 if sync else 4), 3),  # per 512 prompts
        },
        "weight_sync_time": VERL["sync_s"],
    }
    if not sync:
        training.update({"mode": "async", "placement": "disaggregated", "mini_batch": 128,
                         "trainer": {"gpus": int(row["train_gpus"])},
                         "staleness_fraction": float(row["staleness"])})  # fmt: skip
    return {
        "version": 1,
        "name": f"verl-{row['row']}",
        "seed": 2026,
        "workload": _workload(fit),
        "cluster": {
            "concurrency": VERL["max_num_seqs"] * engines,
            "inference": {"engines": engines, "slowdown": round(fit["slowdown"], 6)},
        },
        "training": training,
    }


def verl_extra(row: pd.Series, fit: dict) -> float:
    """Seconds of a sync step the loop does not simulate: the old_log_prob pass as published."""
    return float(row["old_log_prob"]) if row["mode"] == "sync" else 0.0


# ----------------------------------------------------------------- AReaL, staleness vs throughput (1.5B)
AREAL = {
    "params_b": 1.78,  # DeepSeek-R1-Distill-Qwen-1.5B
    "peak_tflops": 989.0,  # H800, dense BF16
    "mfu": 0.4,  # assumed, as for verl
    "max_tokens": 8192,  # the ablation's max_new_tokens
    "mean_tokens": 4500,  # AReaL v0.1 blog, Figure 1: response length in the 8K stage, 5.7K falling to 4.1K
    "gpus": 32,  # assumed: 4 nodes, as the same blog's interruptible-generation ablation
    "rollout_share": 0.75,  # AReaL's benchmark allocation: 3/4 of the GPUs to SGLang (build_cmd.py)
    "prompt_tokens": 100,  # assumed
}


def fit_areal(rows: pd.DataFrame) -> dict:
    """The sync row (max staleness 0) as step = longest sample + train + 0: train from the FLOPs
    (forward and backward plus the recomputed log-probs) on the trainer's GPUs at the assumed MFU,
    the longest sample the rest. Engines keep their speed under load (slowdown 0)."""
    a = AREAL
    tokens = SAMPLES * (a["mean_tokens"] + a["prompt_tokens"])
    step = tokens / (float(rows["throughput_k"].iloc[0]) * 1e3)
    train_gpus = round(a["gpus"] * (1 - a["rollout_share"]))
    train = tokens * 6 * a["params_b"] * 1e9 * (1 + 1 / 3) / (train_gpus * a["peak_tflops"] * 1e12 * a["mfu"])
    longest = step - train
    med, sigma = _lognormal_through(a["mean_tokens"], a["max_tokens"])
    per_token = longest / a["max_tokens"]
    return {"step_s": step, "train_s": train, "longest_s": longest, "median_s": med * per_token,
            "sigma": sigma, "train_gpus": train_gpus, "tokens_per_step": tokens}  # fmt: skip


def areal_scenario(row: pd.Series, fit: dict) -> dict:
    a = AREAL
    eta = row["staleness"]
    engines = int(a["gpus"] - fit["train_gpus"])
    training = {
        "prompts_per_step": 512,
        "samples_per_prompt": 16,
        "steps": STEPS,
        "placement": "disaggregated",
        "trainer": {"gpus": int(fit["train_gpus"])},
        "model": {"params_b": a["params_b"]},
        "train_time": {"kind": "flops", "peak_tflops": a["peak_tflops"], "mfu": a["mfu"],
                       "tokens_per_turn": a["mean_tokens"] + a["prompt_tokens"], "recompute_logprobs": True},
    }  # fmt: skip
    if eta == "inf" or float(eta) > 0:
        training.update({"mode": "async", "max_staleness": 10_000 if eta == "inf" else int(float(eta))})
    else:
        training["mode"] = "sync"
    return {
        "version": 1,
        "name": f"areal-{row['row']}",
        "seed": 2026,
        "workload": _workload(fit),
        "cluster": {
            "concurrency": SAMPLES,
            "inference": {"engines": engines},
        },  # max_concurrent_rollouts 512 prompts
        "training": training,
    }


# ----------------------------------------------------------------- fit, run
TARGETS = {"verl": (fit_verl, verl_scenario), "areal": (fit_areal, areal_scenario)}


def published() -> pd.DataFrame:
    return pd.read_csv(HERE / "published.csv", dtype={"staleness": str})


def fit() -> None:
    table = published()
    fits, out = {}, HERE / "scenarios"
    out.mkdir(exist_ok=True)
    for target, (fitter, writer) in TARGETS.items():
        rows = table[table["target"] == target]
        fits[target] = {k: float(v) for k, v in fitter(rows[rows["role"] == "input"]).items()}
        for _, row in rows.iterrows():
            path = out / f"{target}-{row['row']}.yaml"
            path.write_text(yaml.safe_dump(writer(row, fits[target]), sort_keys=False))
    (HERE / "fit.json").write_text(json.dumps(fits, indent=1, sort_keys=True) + "\n")


def _simulate(path: Path) -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "simrollout.cli", "run", str(path), "-o", d, "--no-records"]
        subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
        return pd.read_csv(Path(d) / "training_steps.csv")


def run() -> None:
    fits, rows = json.loads((HERE / "fit.json").read_text()), []
    for _, row in published().iterrows():
        steps = _simulate(HERE / "scenarios" / f"{row['target']}-{row['row']}.yaml").iloc[WARMUP:]
        step = float(steps["step_s"].mean())
        rec = {"target": row["target"], "row": row["row"], "role": row["role"],
               "rollout_s": float(steps["rollout_s"].mean()),
               "train_s": float(steps["train_s"].mean())}  # fmt: skip
        if row["target"] == "verl":
            step += verl_extra(row, fits["verl"])
            rec.update(metric="step_s", published=float(row["step"]), predicted=step)
        else:  # effective training throughput, k tokens/s
            rec.update(metric="throughput_k", published=float(row["throughput_k"]),
                       predicted=fits["areal"]["tokens_per_step"] / step / 1e3)  # fmt: skip
        rec["error_pct"] = 100.0 * (rec["predicted"] / rec["published"] - 1.0)
        rows.append(rec)
        print(f"{rec['target']:6} {rec['row']:14} {rec['role']:8} published {rec['published']:8.2f} "
              f"predicted {rec['predicted']:8.2f} ({rec['error_pct']:+.0f}%)", flush=True)  # fmt: skip
    pd.DataFrame(rows).round(3).to_csv(HERE / "predictions.csv", index=False)


if __name__ == "__main__":
    {"fit": fit, "run": run}[sys.argv[1]]()
