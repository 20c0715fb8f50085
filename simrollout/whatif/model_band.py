"""Bands that hold the model's own error: every band of ``--uncertainty`` widened by the term of
:mod:`simrollout.whatif.model_error_term` (fitted from the suites' held-out residuals).

Per row and metric: the input band (the refits' 5th-95th percentile, as before, or none) is kept
as ``<metric>_input_lo`` / ``_input_hi``, and ``<metric>_lo`` / ``_hi`` become the input band and
the model's error added in quadrature on each side (in log terms). The model term is the one of
the substrate's kind (its profile's probe backend) where the suites measured that kind, else the
largest known substrate term, said in ``band``; metrics a serving engine in tokens shapes add the
engine term. A training loop's metrics (step seconds, steps a day, training hours) take the
``training`` term instead: the GPU side's error on published training tables
(validation/training/), where the sandbox side's is not measured. ``band_dominant`` says which part
is the wider on most of the row's metrics.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..scenario import Scenario, load_profile
from ..scenario.files import _resolve
from .model_error_term import combine, half_width, shipped

# a run's metric -> the suite metric whose target sets its width, and its side
SIDE = {
    "worker_hours": ("infra_per_trajectory", "substrate"),
    "makespan_hours": ("makespan", "substrate"),
    "duration_p50": ("duration_p50", "substrate"),
    "completed_duration_p50": ("duration_p50", "substrate"),
    "duration_p99": ("duration_p99", "substrate"),
    "completed_duration_p99": ("duration_p99", "substrate"),
    "cold_start_p50": ("cold_start_p50", "substrate"),
    "cost_usd": ("makespan", "substrate"),
    "training_steps_per_day": ("makespan", "substrate"),
    "llm_request_p50": ("request_p50", "engine"),
    "llm_request_p99": ("request_p99", "engine"),
}
ENGINE = "engine"
TRAINING = "training"
# a training loop's metrics: their width is the training term's (at its target, step seconds)
TRAINING_METRICS = ("step_seconds_mean", "step_seconds_p50", "step_train_seconds", "step_rollout_seconds",
                    "training_hours", "training_steps_per_day")  # fmt: skip


def _kind(scn: Scenario, i: int) -> str | None:
    """The substrate's kind: the backend its profile was probed with (None: public figures)."""
    sub = scn.substrates[i]
    if sub.profile is None:
        return None
    prof = load_profile(_resolve(sub.profile, source_path(scn)))
    return (prof.provenance or {}).get("backend")


def source_path(scn: Scenario) -> Path:
    """The scenario's file (its profiles' paths resolve against it)."""
    return Path(scn._source)


def substrate_term(kind: str | None, table: dict) -> tuple[float, str]:
    """The substrate's term ``q`` (in units of a metric's target) and where it comes from."""
    known = {k: v for k, v in table["targets"].items() if k not in (ENGINE, TRAINING)}
    if kind in known:
        t = known[kind]
        n, k = t["cell_metrics"], t["sittings"]
        return t["q"], f"{kind} held-out residuals ({n} cell-metrics, {k} sittings)"
    worst = max(known, key=lambda k: known[k]["q"])
    what = f"a {kind} substrate" if kind else "public figures"
    return known[worst]["q"], f"no held-out residuals for {what}: the largest known term ({worst}'s)"


def _target_pct(metric: str, table: dict) -> float:
    name = SIDE[metric][0]
    for t in table["targets"].values():
        if name in t["targets_pct"]:
            return t["targets_pct"][name]
    return max(p for t in table["targets"].values() for p in t["targets_pct"].values())


def _metric_half(metric: str, q_sub: float, q_eng: float | None, table: dict) -> float:
    """The model's log half-width on ``metric`` (``tax_*``: as worker-hours)."""
    key = metric if metric in SIDE else "worker_hours"
    side = SIDE[key][1]
    pct = _target_pct(key, table)
    if side == ENGINE:
        return half_width(q_eng if q_eng is not None else q_sub, pct)
    sub = half_width(q_sub, pct)
    return math.hypot(sub, half_width(q_eng, pct)) if q_eng is not None else sub


def training_half(table: dict) -> tuple[float, str] | None:
    """The training term as a log half-width on step seconds, and where it comes from (None: the
    table has none)."""
    t = table["targets"].get(TRAINING)
    if t is None:
        return None
    pct = next(iter(t["targets_pct"].values()))
    why = f"published training tables' held-out rows ({t['cell_metrics']} rows, {t['sittings']} tables)"
    return half_width(t["q"], pct), why


def _pct(q: float) -> str:
    """A term as the half-width it gives a metric of a 10% target, in %."""
    return f"{100 * (math.exp(half_width(q, 10)) - 1):.0f}%"


def widen(scn: Scenario, out: pd.DataFrame, metrics: list[str], table: dict | None = None) -> pd.DataFrame:
    """``out`` (with input bands ``<metric>_lo`` / ``_hi`` where refits gave one) with bands that
    hold the model's error too (module docstring)."""
    table = table or shipped()
    tokens = scn.workload.tokens is not None and scn.cluster.inference is not None
    train = training_half(table) if scn.training is not None else None
    q_eng = table["targets"][ENGINE]["q"] if tokens and ENGINE in table["targets"] else None
    for m in metrics:
        out[f"{m}_input_lo"], out[f"{m}_input_hi"] = out[f"{m}_lo"], out[f"{m}_hi"]
    out["band_dominant"] = ""
    level = int(round(100 * table["level"]))
    for i, sub in enumerate(scn.substrates):
        rows = out.index[out.substrate == sub.name]
        q_sub, why = substrate_term(_kind(scn, i), table)
        eng = f"; engine held-out residuals (±{_pct(q_eng)} at a 10% target)" if q_eng else ""
        note = f"; model error at {level}%: {why} (±{_pct(q_sub)} at a 10% target){eng}"
        if train is not None:
            note += f"; training metrics: {train[1]} (±{100 * (math.exp(train[0]) - 1):.0f}%)"
        for r in rows:
            votes = []
            for m in metrics:
                point = float(out.at[r, m])
                if not np.isfinite(point):
                    continue
                if point <= 0:  # nothing to scale: a zero stays a zero
                    out.at[r, f"{m}_lo"], out.at[r, f"{m}_hi"] = point, point
                    continue
                lo, hi = out.at[r, f"{m}_input_lo"], out.at[r, f"{m}_input_hi"]
                lo = point if not np.isfinite(lo) else float(lo)
                hi = point if not np.isfinite(hi) else float(hi)
                if train is not None and m in TRAINING_METRICS:
                    model = train[0]
                else:
                    model = _metric_half(m, q_sub, q_eng, table)
                out.at[r, f"{m}_lo"], out.at[r, f"{m}_hi"] = combine(point, lo, hi, model)
                inp = max(math.log(point / lo) if lo > 0 else 0.0, math.log(hi / point) if hi > 0 else 0.0)
                votes.append(model >= inp)
            out.at[r, "band"] = f"{out.at[r, 'band']}{note}"
            out.at[r, "band_dominant"] = "model error" if votes and np.mean(votes) >= 0.5 else "input"
    return out
