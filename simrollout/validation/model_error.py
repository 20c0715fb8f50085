"""The model's own error, read from the validation suites' held-out residuals, as a band term.

Every held-out cell-metric the suites measured (``validation/residuals.csv``: each sitting's cells
as first measured, before any change the sitting led to) gives a score, the absolute error of the
simulated point against the real mean in log terms, in units of the metric's target
(``|log(sim / real)| / (target_pct / 100)``): a cold start (target 20%) is allowed twice the error
of a makespan (10%). Per target kind (a substrate kind such as ``docker``, or ``engine`` for a
serving engine's agent loop) the term is the split-conformal quantile of those scores at
``level`` (Vovk et al. 2005; Angelopoulos & Bates 2021): the ``ceil((n + 1) level)``-th smallest
of ``n``, which a new exchangeable cell's score exceeds with probability at most ``1 - level``.

:func:`held_out` measures it the honest way: each sitting's cells against the term estimated from
the other sittings alone (leave one sitting out), combined with the cells' own input band.
The term a run uses is :func:`fit` over every sitting, shipped as ``simrollout/whatif/model_error.json``
(read, and combined with a band, by :mod:`simrollout.whatif.model_error_term`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..whatif.model_error_term import SHIPPED_PATH, combine, half_width, shipped  # noqa: F401 (the shipped term)

LEVEL = 0.9
COLUMNS = ["target", "sitting", "date", "workload", "level", "metric", "target_pct", "real_mean",
           "simulated", "sim_lo", "sim_hi"]  # fmt: skip


def read_residuals(path: Path) -> pd.DataFrame:
    """``residuals.csv``: one held-out cell-metric a row (:data:`COLUMNS`)."""
    df = pd.read_csv(path)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        from ..errors import InputError

        raise InputError(f"{path}: missing columns {missing}; expected {COLUMNS}.")
    return df


def scores(df: pd.DataFrame) -> np.ndarray:
    """Each row's error in log terms, in units of its metric's target."""
    sim, real, pct = (pd.to_numeric(df[c]) for c in ("simulated", "real_mean", "target_pct"))
    return np.abs(np.log(sim / real)) / (pct / 100)


def input_half(df: pd.DataFrame) -> np.ndarray:
    """Each row's input band (refits and drift) as a log half-width: the wider side (0: none)."""
    sim, lo, hi = (pd.to_numeric(df[c], errors="coerce") for c in ("simulated", "sim_lo", "sim_hi"))
    lo, hi = np.log(sim / lo).abs(), np.log(hi / sim).abs()
    return np.fmax(lo, hi).fillna(0.0).to_numpy()


def conformal(s, level: float = LEVEL) -> tuple[float, bool]:
    """The split-conformal quantile of ``s`` at ``level`` and whether it is one: with fewer than
    ``level / (1 - level)`` scores the largest stands in (``False``)."""
    s = np.sort(np.asarray(s, float))
    if not len(s):
        return math.nan, False
    k = math.ceil((len(s) + 1) * level)
    return (float(s[k - 1]), True) if k <= len(s) else (float(s[-1]), False)


def fit(df: pd.DataFrame, level: float = LEVEL) -> dict:
    """Per target kind, the term over every sitting: ``q`` (in units of the metric's target), the
    cells and sittings it was read from, and whether it is a conformal quantile."""
    out = {"level": level, "targets": {}}
    for target, g in df.groupby("target"):
        q, exact = conformal(scores(g), level)
        out["targets"][str(target)] = {
            "q": round(q, 4),
            "conformal": exact,
            "cell_metrics": len(g),
            "sittings": int(g.sitting.nunique()),
            "targets_pct": {m: float(t) for m, t in g.groupby("metric").target_pct.first().items()},
        }
    return out


def held_out(df: pd.DataFrame, level: float = LEVEL) -> pd.DataFrame:
    """Every cell-metric against the band of its input uncertainty and the model term estimated
    from the other sittings alone: ``covered`` and ``width_pct`` (the band's width in % of the
    point), and the same for the input band alone."""
    rows = []
    for sitting, test in df.groupby("sitting"):
        rest = df[(df.sitting != sitting) & (df.target == test.target.iloc[0])]
        q, _ = conformal(scores(rest), level)
        inp = input_half(test)
        err = scores(test).to_numpy() * test.target_pct.to_numpy() / 100
        for (_, r), e, h in zip(test.iterrows(), err, inp):
            m = half_width(q, r.target_pct)
            both = math.hypot(h, m)
            rows.append({"target": r.target, "sitting": sitting, "workload": r.workload, "level": r.level,
                         "metric": r.metric, "q": q, "covered": bool(e <= both),
                         "input_covered": bool(e <= h), "width_pct": 100 * (math.exp(both) - math.exp(-both)),
                         "input_width_pct": 100 * (math.exp(h) - math.exp(-h))})  # fmt: skip
    return pd.DataFrame(rows)


def coverage(df: pd.DataFrame, level: float = LEVEL) -> pd.DataFrame:
    """Per target kind: held-out coverage and median width of the combined band and of the input
    band alone (:func:`held_out`)."""
    h = held_out(df, level)
    g = h.groupby("target")
    return pd.DataFrame({
        "cell_metrics": g.size(),
        "sittings": g.sitting.nunique(),
        "coverage": g.covered.mean(),
        "median_width_pct": g.width_pct.median(),
        "input_coverage": g.input_covered.mean(),
        "input_median_width_pct": g.input_width_pct.median(),
    })  # fmt: skip


def first_seen(path: Path, entry: dict) -> pd.DataFrame:
    """``path`` (``residuals.csv``) with ``entry``'s cells (a suite's record of one target) added
    where its workload was never measured before: a sitting counts as held out once, as first
    measured; its repeats and refits are model-choice data. Written back when it grew. A cell's
    sitting is its target and workload unless it names one (a training table's rows share one)."""
    old = read_residuals(path) if path.is_file() else pd.DataFrame(columns=COLUMNS)
    known = set(zip(old.target, old.workload))
    t = entry["target"]
    new = [
        {"target": t, "sitting": c.get("sitting", f"{t}/{c['workload']}"), "date": entry["date"][:10],
         "workload": c["workload"], "level": c["level"], "metric": c["metric"], "target_pct": c["target_pct"],
         "real_mean": c["real_mean"], "simulated": c["simulated"], "sim_lo": c.get("sim_lo"),
         "sim_hi": c.get("sim_hi")}
        for c in entry.get("cells", []) if (t, c["workload"]) not in known
    ]  # fmt: skip
    if not new:
        return old
    out = pd.concat([old, pd.DataFrame(new, columns=COLUMNS)], ignore_index=True)
    out.to_csv(path, index=False, float_format="%.6g")
    return out


def report_lines(df: pd.DataFrame, level: float = LEVEL) -> list[str]:
    """REPORT.md's section on the bands with the model's error: held-out coverage and width."""
    cov = coverage(df, level)
    term = fit(df, level)["targets"]
    lines = [
        "## Bands with the model's error",
        "",
        f"Every band of `run --uncertainty` adds the model's own error to the input uncertainty: the "
        f"split-conformal {level:.0%} quantile of the held-out residuals (`validation/residuals.csv`, each "
        "sitting's cells as first measured), in units of each metric's target, per target kind. Coverage "
        "here is leave one sitting out: each sitting's cells against the band of their own input "
        'uncertainty and the term read from the other sittings alone (docs/model.md, "Bands").',
        "",
        "| target | sittings | cell-metrics | term (x target) | held-out coverage | median width | "
        "input band alone: coverage | median width |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t, r in cov.iterrows():
        lines.append(
            f"| {t} | {int(r.sittings)} | {int(r.cell_metrics)} | {term[t]['q']:.2f} | {r.coverage:.0%} | "
            f"{r.median_width_pct:.0f}% | {r.input_coverage:.0%} | {r.input_median_width_pct:.0f}% |"
        )
    return lines


def write_shipped(df: pd.DataFrame, path: Path | None = None) -> Path:
    """:func:`fit` of ``df`` into ``model_error.json`` (or ``path``)."""
    path = path or SHIPPED_PATH
    path.write_text(json.dumps(fit(df), indent=1, sort_keys=True) + "\n")
    return path
