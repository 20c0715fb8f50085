"""A training profile fitted from training-run logs (:mod:`.training_logs`): the response-length
law, the engines' generation throughput, the trainer's tokens per GPU-second by placement, the
log-prob pass's rate, weight sync and the other critical-path seconds, with block-bootstrap refits
over consecutive steps (docs/calibration.md, "Calibrate the GPU side from a training run's logs").

The trainer: each run's mean update seconds against its tokens trained per GPU, ``update = a +
(tokens / GPUs) / rate``. Runs at two GPU counts or more fit both (least squares); one count
fits ``rate`` with ``a = 0``. Fitted on colocated runs, ``a`` is the colocated switching cost per
step (``train_time.colocated.fitted_s``: offload and reload, sleep and wake, resharding), which a
disaggregated trainer does not pay; fitted on disaggregated runs, it is the saturation of the
throughput per GPU (``tokens_half = a x rate``, docs/model.md, "The trainer")."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import optimize, stats

from ..errors import InputError
from .bootstrap import redraw

STAGES = ("gen_s", "logprob_s", "ref_s", "adv_s", "reward_s", "update_s", "sync_s", "save_s")
OFF_PATH = ("adv_s", "reward_s", "save_s")  # on the trainer's path, outside the update and the sync
# a sync step's share on the trainer (update and log-prob passes) where a log gives the step alone:
# the median over the published input rows that split it (verl 0.47, 0.56, 0.47; verl one-step-off
# 0.50, 0.66; vime Setup 2 0.46), validation/training/README.md
TRAIN_SHARE = 0.5
SHARES = (0.47, 0.56, 0.47, 0.50, 0.66, 0.46)  # those rows' shares: the refits of a split step
SIGMA = 0.5  # a response's spread when the logs give no lengths: verl logs' clip-ratio fits, 0.47 and 0.53
DEFAULT_REFITS = 200  # a refit is a few means and one least squares: 200 take well under a second
SPLIT = "the step split at each trainer share of the published sync rows (SHARES), in place of --train-share"
# a step split by the trainer's FLOPs (--mfu): refitted at the MFU halved to doubled, where a
# cited training benchmark's MFU stands for the run's own
MFU_FACTORS = (0.5, 0.71, 1.41, 2.0)
SPLIT_FLOPS = "the step split at the trainer's FLOPs time at --mfu x 0.5, 0.71, 1.41 and 2 (MFU_FACTORS)"
MAX_SHARE = 0.95  # a FLOPs-derived trainer share is capped below the whole step
JACKKNIFE = "jackknife over runs (every run one step: each refit leaves one run out)"
METHOD = "moving-block bootstrap over consecutive steps, within each run (block: ceil(steps^(1/3)))"


def flops_seconds(tokens: float, gpus: int, flops: dict) -> float:
    """A step's trainer passes from their FLOPs: ``(6 + 2 x forward passes) x active parameters x
    tokens / (GPUs x peak x MFU)`` (a forward and backward pass, and each forward-only pass: the
    old policy's and the reference model's log-probs)."""
    per_token = (6.0 + 2.0 * flops["forward_passes"]) * flops["active_params_b"] * 1e9
    return per_token * tokens / (gpus * flops["peak_tflops"] * 1e12 * flops["mfu"])


def run_means(
    table: pd.DataFrame,
    responses: int | None,
    gpus: int,
    train_share: float | None = None,
    flops: dict | None = None,
) -> dict:
    """One run's means, and its tokens trained and responses per step where the log gives them;
    a sync run logging its step seconds alone is split ``train_share`` to the trainer (or, with
    ``flops`` and the tokens trained, the trainer's :func:`flops_seconds`), the rest to generation
    (verl's tokens per data-parallel rank times the ``gpus`` that trained, when the total is not
    logged: every trainer GPU a data-parallel rank, as FSDP runs them; NeMo-RL's tokens per
    second per GPU over the step, times the step and the GPUs)."""
    m = {q: float(table[q].mean()) for q in table.columns if table[q].notna().any()}
    if "update_s" not in m and "train_s" in m:  # slime's perf/train_time: log-prob passes and update
        m["update_s"] = m.pop("train_s")
    if "gen_s" not in m and "wait_s" in m:  # a sync trainer waits for its batch's generation
        m["gen_s"] = m.pop("wait_s")
    if "total_tokens" not in m and "tokens_per_rank" in m:
        m["total_tokens"] = m["tokens_per_rank"] * gpus
    per = m.get("prompt_mean", 0.0) + m.get("response_mean", 0.0)
    if "update_s" not in m and "gen_s" not in m and "step_s" in m and (train_share or flops):
        if flops is not None:  # the step alone: the trainer's share from its FLOPs
            seconds = flops_seconds(_trained(m, responses, gpus, per), gpus, flops)
            train_share = m["flops_share"] = min(seconds / m["step_s"], MAX_SHARE)
        m["update_s"], m["gen_s"] = train_share * m["step_s"], (1.0 - train_share) * m["step_s"]
        m["train_share"] = train_share
    if responses is None and "total_tokens" in m and per > 0:
        responses = m["total_tokens"] / per
    if "total_tokens" not in m and responses and per > 0:
        m["total_tokens"] = responses * per
    elif "total_tokens" not in m and responses:  # no lengths logged: a response counts as one token
        m["total_tokens"], m["per_response"] = float(responses), 1.0
    if responses:
        m["responses"] = float(responses)
    if "step_s" in m:
        named = sum(m.get(s, 0.0) for s in STAGES)
        m["other_s"] = max(m["step_s"] - named, 0.0)
    if "response_max" in table:
        m["response_top"] = float(table["response_max"].max())
    return m


def _trained(m: dict, responses: int | None, gpus: int, per: float) -> float:
    """The tokens a step trains, for its FLOPs: as logged, or NeMo-RL's tokens per second per GPU
    over the step times the step and the GPUs, or the responses times their logged lengths."""
    if "total_tokens" in m:
        return m["total_tokens"]
    if "step_tokens_per_gpu_second" in m:
        return m["step_tokens_per_gpu_second"] * m["step_s"] * gpus
    if responses and per > 0:
        return responses * per
    raise InputError(
        "--mfu: the log gives no tokens trained, so the trainer's FLOPs are unknown (verl "
        "perf/total_num_tokens, NeMo-RL train/total_num_tokens or performance/tokens_per_sec_per_gpu, "
        "or the prompt and response lengths with --responses); split the step with --train-share instead."
    )


def response_law(mean: float, cap: float, clip: float | None, responses: float | None) -> dict:
    """Lognormal response length (in tokens) with the logged ``mean``: where a share ``clip`` is cut
    at ``cap``, its sigma makes ``P(X > cap) = clip`` and ``E[min(X, cap)] = mean``; else ``cap``
    (the longest response logged) is the 1-in-``responses`` quantile (1-in-1000 if unknown)."""
    if clip and 0 < clip < 1 and cap > mean:
        z = float(stats.norm.ppf(1.0 - clip))

        def gap(s: float) -> float:
            mu = math.log(cap) - s * z
            body = math.exp(mu + s * s / 2) * stats.norm.cdf((math.log(cap) - mu - s * s) / s)
            return body + cap * clip - mean

        hi = 10.0
        if gap(1e-3) * gap(hi) > 0:
            raise InputError(
                f"response_length: no lognormal has mean {mean:.1f} with {clip:.3f} of responses "
                f"cut at {cap:.0f}."
            )
        sigma = optimize.brentq(gap, 1e-3, hi)
        median = cap / math.exp(sigma * z)
        how = "derived: P(X > max) = clip_ratio and E[min(X, max)] = mean"
    else:
        z = float(stats.norm.ppf(1.0 - 1.0 / max(responses or 1000.0, 2.0)))
        r = math.log(max(cap, mean * 1.0001) / mean)
        sigma = z - math.sqrt(max(z * z - 2.0 * r, 0.0))  # ln(top / mean) = z s - s^2 / 2, the smaller root
        sigma = max(sigma, 1e-3)
        median = mean / math.exp(sigma * sigma / 2)
        how = "derived: mean as logged, the longest response the 1-in-N quantile (N responses a step)"
    return {"kind": "lognormal", "median": round(median, 3), "sigma": round(sigma, 5), "derivation": how}


def trainer_fit(runs: list[dict], gpus: list[int]) -> tuple[float, float]:
    """``(a, rate)`` of ``update = a + (tokens / GPUs) / rate`` over the runs' means, in relative
    least squares (each run's error as a share of its update: the runs span several-fold); from
    one GPU count, or where the two-term fit's intercept or slope comes out negative, ``a = 0``
    and the rate of all the runs' tokens per GPU over all their update seconds."""
    x = np.array([r["total_tokens"] / g for r, g in zip(runs, gpus)])
    y = np.array([r["update_s"] for r in runs])
    if len(set(gpus)) >= 2:
        design = np.column_stack([np.ones_like(x), x]) / y[:, None]
        (a, slope), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
        if a >= 0 and slope > 0:
            return float(a), float(1.0 / slope)
    return 0.0, float(x.sum() / y.sum())


def fit_training(runs: list[dict], gpus: list[int], placement: str) -> dict:
    """The ``training:`` fragment a scenario imports, from the runs' means."""
    missing = [q for q in ("update_s", "total_tokens") if any(q not in r for r in runs)]
    if missing:
        raise InputError(
            f"the logs give no {missing[0]} for every run: the trainer's rate needs each step's update "
            "seconds (verl timing_s/update_actor, AReaL timeperf/train_step, slime perf/actor_train_time, "
            "SkyRL timing/policy_train) and its tokens trained (verl perf/total_num_tokens, or the "
            "prompt and response lengths with --responses)."
        )
    a, rate = trainer_fit(runs, gpus)
    tt: dict = {"kind": "flops", "tokens_per_gpu_second": round(rate, 4)}
    with_lp = [(r, g) for r, g in zip(runs, gpus) if r.get("logprob_s")]
    if with_lp:
        gpu_s = sum(r["logprob_s"] * g for r, g in with_lp)
        tt["logprob_tokens_per_gpu_second"] = round(sum(r["total_tokens"] for r, _ in with_lp) / gpu_s, 4)
    tt["recompute_logprobs"] = bool(with_lp)
    if any(r.get("per_response") for r in runs):  # rates in responses: a response is one turn's tokens
        tt["tokens_per_turn"] = 1.0
    tt["reference_logprobs"] = any(r.get("ref_s") for r in runs)
    if placement == "colocated":
        tt["colocated"] = {"fitted_s": round(a, 4)}
    else:
        tt["tokens_half"] = round(a * rate, 2)
    out = {"train_time": tt}
    syncs = [r["sync_s"] for r in runs if "sync_s" in r]
    if syncs:
        out["weight_sync_time"] = round(float(np.mean(syncs)), 4)
    path = [sum(r.get(s, 0.0) for s in OFF_PATH) + r.get("other_s", 0.0) for r in runs]
    out["critical_path"] = round(float(np.mean(path)), 4)
    return out


def generation(runs: list[dict], gpus: list[int]) -> dict:
    """The engines' response tokens per second against the responses in flight (each run's step,
    all at once), per GPU; from two loads or more, the saturating law ``tokens/s/GPU = peak x r /
    (r + requests_half)`` at ``r`` requests per GPU (least squares in the logs of the rates)."""
    points = []
    for r, g in zip(runs, gpus):
        if r.get("gen_s") and r.get("responses") and r.get("response_mean"):
            tps = r["responses"] * r["response_mean"] / r["gen_s"]
            points.append({"gpus": g, "requests": round(r["responses"], 1), "tokens_per_s": round(tps, 2),
                           "tokens_per_gpu_second": round(tps / g, 3)})  # fmt: skip
    out: dict = {"points": points}
    load = np.array([p["requests"] / p["gpus"] for p in points])
    rate = np.array([p["tokens_per_gpu_second"] for p in points])
    if len(set(load.round(6))) >= 2:
        fit = optimize.least_squares(
            lambda q: np.log(q[0] * load / (load + q[1]) / rate), [rate.max() * 2, load.mean()],
            bounds=([1e-9, 0.0], [np.inf, np.inf]),
        )  # fmt: skip
        out["law"] = {"peak_tokens_per_gpu_second": round(float(fit.x[0]), 3),
                      "requests_half_per_gpu": round(float(fit.x[1]), 3)}  # fmt: skip
    return out


def rollout_fit(runs: list[dict], gpus: list[int], sigma: float = SIGMA) -> dict | None:
    """The rollout as a scenario simulates it from each run's generation seconds ``gen`` on ``E``
    engines (one per GPU) for ``N`` responses: ``gen = T x (1 + s x (N / E - 1))``, ``T`` the longest
    response's seconds on an engine alone, ``s`` the slowdown per request beside it (log least
    squares; one GPU count: ``s = 0``). A response's seconds alone are lognormal with ``sigma``
    and ``T`` its 1-in-N quantile. None without generation seconds and responses."""
    pts = [
        (r["gen_s"], r["responses"], g) for r, g in zip(runs, gpus) if r.get("gen_s") and r.get("responses")
    ]
    if not pts:
        return None
    gen, n, e = (np.array(v, dtype=float) for v in zip(*pts))
    load = np.maximum(n / e - 1.0, 0.0)
    top, slow = float(np.exp(np.mean(np.log(gen)))), 0.0
    if len(set(e)) >= 2 and load.max() > 0:
        res = optimize.minimize_scalar(
            lambda s: np.var(np.log(gen) - np.log1p(s * load)), bounds=(0.0, 10.0), method="bounded"
        )
        slow = float(res.x)
        top = float(np.exp(np.mean(np.log(gen) - np.log1p(slow * load))))
    z = float(stats.norm.ppf(1.0 - 1.0 / max(float(n.max()), 2.0)))
    median = top * math.exp(-z * sigma)
    law = {"kind": "lognormal", "median": round(median, 4), "sigma": sigma}
    how = f"gen = T x (1 + s (N / GPUs - 1)): T {top:.2f} s, s {slow:.6f}; T the 1-in-{int(n.max())} quantile"
    return {
        "workload": {"steps": 1, "calls_per_step": 0, "llm_time": law},
        "inference": {"slowdown": round(slow, 6)},
        "derivation": f"{how} of a lognormal with sigma {sigma} (--response-sigma)",
    }


def _blocks(table: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """A moving-block resample of a run's consecutive steps, as many as it had."""
    n = len(table)
    size = max(1, math.ceil(n ** (1 / 3)))
    starts = rng.integers(0, n - size + 1, math.ceil(n / size))
    idx = np.concatenate([np.arange(s, s + size) for s in starts])[:n]
    return table.iloc[idx]


def training_profile(
    tables: list[pd.DataFrame],
    gpus: list[int],
    placement: str,
    responses: int | None = None,
    params_b: float | None = None,
    refits: int = DEFAULT_REFITS,
    seed: int = 0,
    sigma: float = SIGMA,
    train_share: float = TRAIN_SHARE,
    flops: dict | None = None,
) -> dict:
    """The profile (``version: 1``): provenance, the fitted laws, the ``training`` fragment and
    refits; ``flops`` (``mfu``, ``peak_tflops``, ``active_params_b``, ``forward_passes``) splits a
    step logged alone at its trainer's FLOPs time instead of ``train_share``."""
    if len(gpus) == 1 and len(tables) > 1:
        gpus = gpus * len(tables)
    if len(gpus) != len(tables):
        raise InputError(
            f"--gpus: give one GPU count, or one per run ({len(tables)}: a file each, TensorBoard's "
            f"one-metric files together one run), got {len(gpus)}."
        )
    runs = [run_means(t, responses, g, train_share, flops) for t, g in zip(tables, gpus)]
    training = _sized(fit_training(runs, gpus, placement), params_b)
    top = max(r.get("response_top", 0.0) for r in runs)
    logged = [r["response_mean"] for r in runs if "response_mean" in r]
    mean = float(np.mean(logged)) if len(logged) == len(runs) else None
    profile: dict = {
        "version": 1,
        "kind": "training",
        "provenance": {
            "sources": [t.attrs.get("source", "?") for t in tables],
            "framework": tables[0].attrs.get("framework"),
            "kind": [t.attrs.get("kind") for t in tables],
            "steps": [[int(t.index.min()), int(t.index.max()), len(t)] for t in tables],
            "gpus": gpus,
            "placement": placement,
            "made_by": "simrollout calibrate --training",
        },
    }
    split = [round(r["train_share"], 4) for r in runs if "train_share" in r]
    if split:  # a step logged alone: how it was split between the trainer and the rest
        how = {"mfu": flops} if any("flops_share" in r for r in runs) else {"train_share": train_share}
        profile["provenance"]["step_split"] = {**how, "trainer_shares": split}
    if mean is not None and top > 0:
        clip = float(np.mean([r.get("clip_ratio", 0.0) for r in runs]))
        law = response_law(mean, top, clip, max((r.get("responses") or 0) for r in runs) or None)
        extra = {"mean": round(mean, 3), "max_tokens": top, "clip_ratio": round(clip, 5)}
        profile["response_length"] = {**law, **extra}
    profile["generation"] = generation(runs, gpus)
    rollout = rollout_fit(runs, gpus, sigma)
    if rollout is not None:  # what ``workload: {import: PROFILE}`` takes
        profile["workload"], profile["inference"] = rollout["workload"], rollout["inference"]
        profile["rollout_derivation"] = rollout["derivation"]
    profile["stages"] = [{q: round(v, 4) for q, v in r.items()} for r in runs]
    profile["training"] = training
    profile["uncertainty"] = _uncertainty(
        tables, gpus, placement, responses, training, refits, seed, params_b, train_share, flops, bool(split)
    )
    return profile


def _sized(fit: dict, params_b: float | None) -> dict:
    """A ``training`` fragment with the policy's size where ``--params-b`` gave it."""
    return {**fit, "model": {"params_b": params_b}} if params_b is not None else fit


def _jackknife(tables, gpus, placement, responses, params_b, share, flops=None) -> list[dict]:
    """Tables of one mean a run: the fits with one run left out (those that still fit)."""
    fits = []
    for i in range(len(tables)):
        keep = [j for j in range(len(tables)) if j != i]
        runs = [run_means(tables[j], responses, gpus[j], share, flops) for j in keep]
        fits.append(_sized(fit_training(runs, [gpus[j] for j in keep], placement), params_b))
    return fits


def _uncertainty(tables, gpus, placement, responses, point, refits, seed, params_b=None, share=None,
                 flops=None, split=False) -> dict:  # fmt: skip
    """The refits' band; ``split``: a run's step was logged alone and split by an assumed share."""
    one_step = all(len(t) < 2 for t in tables)
    why = None
    if refits and split:  # the step split by an assumed share (or MFU): refit at each the sources give
        if flops is None:
            splits, method = [(sh, None) for sh in SHARES], SPLIT
        else:
            splits, method = [(None, {**flops, "mfu": flops["mfu"] * f}) for f in MFU_FACTORS], SPLIT_FLOPS
        fits = []
        for sh, fl in splits:
            fit = fit_training(
                [run_means(t, responses, g, sh, fl) for t, g in zip(tables, gpus)], gpus, placement
            )
            fits.append(_sized(fit, params_b))
    elif refits and one_step and len(tables) >= 3:
        fits, method = _jackknife(tables, gpus, placement, responses, params_b, share, flops), JACKKNIFE
    elif not refits or one_step:
        why = (
            "no refits (--bootstrap 0)"
            if not refits
            else "no refits (every run has one step, fewer than 3 runs)"
        )
        return {"method": f"none: {why}", "refits": 0, "seed": seed}
    else:

        def one(rng: np.random.Generator) -> dict:
            means = [run_means(_blocks(t, rng), responses, g, share, flops) for t, g in zip(tables, gpus)]
            return _sized(fit_training(means, gpus, placement), params_b)

        fits, _, why = redraw(one, refits, seed)
        method = METHOD
    values = {"tokens_per_gpu_second": [f["train_time"]["tokens_per_gpu_second"] for f in fits],
              "critical_path": [f["critical_path"] for f in fits]}  # fmt: skip
    ref = {"tokens_per_gpu_second": point["train_time"]["tokens_per_gpu_second"],
           "critical_path": point["critical_path"]}  # fmt: skip
    if "weight_sync_time" in point:
        values["weight_sync_time"] = [f["weight_sync_time"] for f in fits]
        ref["weight_sync_time"] = point["weight_sync_time"]
    spread = {k: {"p5": round(float(np.percentile(v, 5)), 4), "p95": round(float(np.percentile(v, 95)), 4),
                  "point": ref[k]} for k, v in values.items()}  # fmt: skip
    out = {"method": method, "refits": len(fits), "seed": seed, "spread": spread, "training": fits}
    if why:
        out["stopped"] = why
    return out
