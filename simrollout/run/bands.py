"""Error bars from a summary's bands, and the line a plot prints about them.

A metric ``M`` has a band when the summary carries ``M_lo`` and ``M_hi`` (``run --uncertainty``: the
5th and 95th percentile over a profile's refits; the ``band`` column says where they came from),
else ``M_ci95`` (the 95% confidence half-width over replications). A row without one (a profile
built from public figures has no records to resample) is named in the plot's note.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NO_UNCERTAINTY = "run without --uncertainty"


def bounds(df: pd.DataFrame, metric: str, scale=1.0) -> tuple[np.ndarray, np.ndarray] | None:
    """Lower and upper ends of ``metric``'s band per row of ``df`` (NaN where a row has none),
    times ``scale`` (a number or one per row); None when the summary has no band for it."""
    lo, hi, ci = f"{metric}_lo", f"{metric}_hi", f"{metric}_ci95"
    if lo in df and hi in df:
        ends = df[lo].to_numpy(float), df[hi].to_numpy(float)
    elif ci in df:
        v, h = df[metric].to_numpy(float), df[ci].to_numpy(float)
        ends = v - h, v + h
    else:
        return None
    k = np.asarray(scale, dtype=float)
    return ends[0] * k, ends[1] * k


def draw(ax, at, ends: tuple[np.ndarray, np.ndarray] | None, metric: str, horizontal: bool = False,
         color: str = "black") -> None:  # fmt: skip
    """Error bars from ``lo`` to ``hi`` at x positions ``at`` (y positions when ``horizontal``),
    for the rows whose band is finite; labelled ``_band <metric>`` (kept out of legends)."""
    if ends is None:
        return
    lo, hi = ends
    ok = np.isfinite(lo) & np.isfinite(hi)
    if not ok.any():
        return
    at = np.asarray(at, dtype=float)[ok]
    mid, half = (lo[ok] + hi[ok]) / 2, np.abs(hi[ok] - lo[ok]) / 2
    kw = dict(fmt="none", ecolor=color, elinewidth=1.2, capsize=4, label=f"_band {metric}", zorder=5)
    if horizontal:
        ax.errorbar(mid, at, xerr=half, **kw)
    else:
        ax.errorbar(at, mid, yerr=half, **kw)


def note(df: pd.DataFrame, metrics: list[str], names: list[str]) -> str:
    """Where the plotted ``metrics``' bands come from, which rows (``names``) have none and why
    (the ``band`` column's word, else that the run had no ``--uncertainty``), and which metrics
    have none anywhere."""
    has = np.zeros(len(df), dtype=bool)
    kinds, unbanded = set(), []
    for m in metrics:
        ends = bounds(df, m)
        if ends is None:
            unbanded.append(m)
            continue
        has |= np.isfinite(ends[0]) & np.isfinite(ends[1])
        kinds.add("5th-95th percentile" if f"{m}_lo" in df else "95% CI over replications")
    why = df["band"].fillna("").astype(str).to_list() if "band" in df else [""] * len(df)
    parts = []
    if has.any():
        source = "; ".join(dict.fromkeys(w for w, h in zip(why, has) if h and w))
        parts.append("error bars: " + " / ".join(sorted(kinds)) + (f" ({source})" if source else ""))
    missing: dict[str, list[str]] = {}
    for name, w, h in zip(names, why, has):
        if not h:
            missing.setdefault(w or NO_UNCERTAINTY, []).append(name)
    if list(missing) == [NO_UNCERTAINTY] and not has.any():
        return f"no band ({NO_UNCERTAINTY})"
    for reason, who in missing.items():
        parts.append(f"no band: {', '.join(dict.fromkeys(who))} ({reason})")
    if unbanded and has.any():
        parts.append(f"no band for {', '.join(unbanded)}")
    return "; ".join(parts)
