"""The validation suite's arithmetic: a real mean's confidence interval over repeats, the paired
error (each real repeat against the simulation of the probe blocks run beside it), a cell's
verdict against its target, and a suite's summary (MAPE, band coverage, cells per verdict).

>>> mean, half = t_interval([10.0, 12.0, 14.0])
>>> round(mean, 3), round(half, 3)
(12.0, 4.968)
>>> verdict(100.0, 5.0, 108.0, 10), verdict(100.0, 5.0, 115.0, 10), verdict(100.0, 12.0, 100.0, 10)
('pass', 'miss', 'indeterminate')
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

VERDICTS = ("pass", "miss", "indeterminate")
CONFIDENCE = 0.95  # of the real mean's interval (a t-interval over the repeats)


def t_interval(values, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Mean of ``values`` and the half-width of its two-sided t-interval (``nan`` for one value)."""
    x = np.asarray(values, dtype=float)
    mean = float(np.mean(x))
    if len(x) < 2:
        return mean, float("nan")
    sem = float(stats.sem(x))
    return mean, float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1) * sem)


def relative(x: float, of: float) -> float:
    """``x`` in % of ``of`` (``nan`` when ``of`` is zero)."""
    return 100 * x / of if of else float("nan")


def paired_errors(real: list[float], simulated: list[float]) -> np.ndarray:
    """Each real repeat's error in % (simulated minus real, of the real), where the repeat has a
    simulated partner (``nan`` in ``simulated``: none)."""
    r, s = np.asarray(real, dtype=float), np.asarray(simulated, dtype=float)
    ok = np.isfinite(s) & (r != 0)
    return 100 * (s[ok] - r[ok]) / r[ok]


def precision(real: list[float], simulated: list[float] | None) -> float:
    """How well a cell knows its error, in % of the real mean: the 95% half-width of the paired
    errors (:func:`paired_errors`) when at least 3 repeats have a partner, else the real mean's
    own 95% half-width. Paired, a drift of the machine that moves a real repeat and the probe
    blocks beside it alike cancels; the real mean's interval keeps it."""
    if simulated is not None:
        e = paired_errors(real, simulated)
        if len(e) >= 3:
            return t_interval(e)[1]
    mean, half = t_interval(real)
    return relative(half, abs(mean))


def verdict(
    real_mean: float, half_width: float, simulated: float, target_pct: float, half_pct: float | None = None
) -> str:
    """``indeterminate`` when the error is not known to within the target: the real mean's 95%
    half-width (or ``half_pct``, :func:`precision`, in %) is above the target or unknown (one
    repeat); else ``pass`` when the simulated point is within the target of the real mean, else
    ``miss``."""
    half = relative(half_width, abs(real_mean)) if half_pct is None else half_pct
    if not half <= target_pct:  # nan (one repeat, a zero mean) is indeterminate too
        return "indeterminate"
    return "pass" if abs(relative(simulated - real_mean, real_mean)) <= target_pct else "miss"


def needs_repeats(
    real: dict[str, list[float]], targets: dict[str, float], paired: dict[str, list[float]] | None = None
) -> list[str]:
    """The metrics whose error is not yet known to within their target (:func:`precision`; more
    repeats help)."""
    paired = paired or {}
    return [m for m, tgt in targets.items() if not precision(real[m], paired.get(m)) <= tgt]


def covers_with_noise(point: float, lo: float, hi: float, real: list[float]) -> bool | None:
    """Whether the 90% band ``[lo, hi]`` around ``point`` holds the mean of the ``real`` repeats
    once it is widened by that mean's own sampling noise (each side in quadrature with 1.645
    standard errors of the mean, the normal 90% half-range; the t quantile of 3 repeats would
    widen it 1.8x more, which a miss would hide behind): the band is on what the
    simulated quantity is expected to be, the real mean only an estimate of it, so a perfect band
    held to a mean of a few noisy repeats would cover it less often than 90%. None without a band
    or with one repeat."""
    x = np.asarray(real, dtype=float)
    if not (lo == lo and hi == hi) or len(x) < 2:
        return None
    noise = stats.norm.ppf(0.95) * float(stats.sem(x))
    mean = float(np.mean(x))
    return bool(
        point - np.hypot(max(point - lo, 0.0), noise) <= mean <= point + np.hypot(max(hi - point, 0.0), noise)
    )


def cell_rows(
    cell: dict,
    real: dict[str, list[float]],
    sim: dict[str, dict],
    targets: dict[str, float],
    paired: dict[str, list[float]] | None = None,
) -> list[dict]:
    """One row per metric of a cell (``cell``'s keys first): the real mean, its 95% half-width,
    the repeats, the simulated point and its 90% band, the error (% of the real mean), the paired
    errors' mean and 95% half-width (``paired``: per metric one simulated point per real repeat,
    :func:`paired_errors`), whether the band covers the real mean, and the verdict."""
    rows = []
    paired = paired or {}
    for m, tgt in targets.items():
        mean, half = t_interval(real[m])
        s = sim[m]
        e = paired_errors(real[m], paired[m]) if m in paired else np.array([])
        p_mean, p_half = t_interval(e) if len(e) else (float("nan"), float("nan"))
        known = precision(real[m], paired.get(m))
        lo, hi = s.get("lo", float("nan")), s.get("hi", float("nan"))
        rows.append(
            {
                **cell,
                "metric": m,
                "target_pct": tgt,
                "repeats": len(real[m]),
                "real_mean": mean,
                "real_half": half,
                "real_half_pct": relative(half, abs(mean)),
                "simulated": s["point"],
                "sim_lo": lo,
                "sim_hi": hi,
                "error_pct": relative(s["point"] - mean, mean),
                "pairs": int(len(e)),
                "paired_error_pct": p_mean,
                "paired_half_pct": p_half,
                "precision_pct": known,
                "covered": bool(lo <= mean <= hi) if lo == lo and hi == hi else None,
                "covered_with_noise": covers_with_noise(s["point"], lo, hi, real[m]),
                "verdict": verdict(mean, half, s["point"], tgt, known),
                "real": [float(v) for v in real[m]],
                "paired": [float(v) for v in paired.get(m, [])],
            }
        )
    return rows


def summarize(rows: pd.DataFrame) -> pd.DataFrame:
    """Per metric over a suite's cells: its target, MAPE (mean absolute error, % of the real
    mean), band coverage (share of cells whose 90% band holds the real mean; cells without a
    band are left out), the same with the real mean's own noise (:func:`covers_with_noise`), and
    the count of cells per verdict."""
    out = []
    for m, g in rows.groupby("metric", sort=False):
        out.append(
            {
                "metric": m,
                "target_pct": float(g.target_pct.iloc[0]),
                "cells": len(g),
                "mape_pct": float(np.mean(np.abs(g.error_pct))),
                "coverage": _share(g.covered),
                "coverage_with_noise": _share(g.get("covered_with_noise")),
                **{v: int((g.verdict == v).sum()) for v in VERDICTS},
            }
        )
    return pd.DataFrame(out)


def overall(rows: pd.DataFrame) -> dict:
    """The suite in a few figures: cells, band coverage over every banded cell and metric, and the
    cell-metric pairs per verdict."""
    return {
        "cells": int(rows[["workload", "level"]].drop_duplicates().shape[0]),
        "coverage": _share(rows.covered),
        "coverage_with_noise": _share(rows.get("covered_with_noise")),
        **{v: int((rows.verdict == v).sum()) for v in VERDICTS},
    }


def _share(covered: pd.Series | None) -> float:
    """The share of True among the banded cells (None: no band), ``nan`` without any."""
    banded = covered.dropna() if covered is not None else pd.Series([], dtype=object)
    return float(banded.astype(bool).mean()) if len(banded) else float("nan")
