"""A sweep's plots, against the swept variable whatever it is: numbers on a linear or a log axis
(as their spread calls for), words evenly spaced, the axis labelled with the variable's path.

The x variable is the first swept one whose values vary (``cluster.concurrency`` plots the
``concurrency`` column); every other varying variable makes lines (or panels) of their own. The
throughput plot marks the knee only against concurrency, where it means the smallest level
reaching 90% of the best throughput.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from . import bands
from .plots import _bar_axis, _note, _tax_banded, cost_bars, knee, plt, save, tax_bars


def grid_columns(df: pd.DataFrame) -> list[str]:
    """Columns a sweep added (dotted paths other than the concurrency level), in the order given
    (the sweep inserts each in front of the last)."""
    return [c for c in df.columns if "." in c and c != "cluster.concurrency"][::-1]


def _column(path: str) -> str:
    return "concurrency" if path == "cluster.concurrency" else path


def x_variable(df: pd.DataFrame, swept: list[str] | None = None) -> str:
    """The column on the x axis: the first swept variable that varies, else concurrency."""
    order = [_column(p) for p in (swept if swept is not None else grid_columns(df))] + ["concurrency"]
    return next((c for c in order if c in df and df[c].nunique() > 1), "concurrency")


def _others(df: pd.DataFrame, x: str) -> list[str]:
    """What names a line or a panel: the substrate and every other variable that varies."""
    cands = [*grid_columns(df), "concurrency"]
    return ["substrate", *(c for c in cands if c != x and c in df and df[c].nunique() > 1)]


def _numeric(values: pd.Series) -> bool:
    return values.dtype.kind in "iuf"


def _text(v) -> str:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return f"{int(v):,d}"
    if isinstance(v, (float, np.floating)):
        return f"{v:,g}"
    return str(v)


def _label(key: tuple, names: list[str]) -> str:
    parts = [str(key[0])] + [f"{n.rsplit('.', 1)[-1]}={_text(v)}" for n, v in zip(names[1:], key[1:])]
    return ", ".join(parts)


def groups(df: pd.DataFrame, x: str) -> list[tuple[str, pd.DataFrame]]:
    """One group per substrate and value of the other varying variables, its rows along ``x``."""
    names = _others(df, x)
    out = []
    for key, g in df.groupby(names, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        g = g.sort_values(x) if _numeric(df[x]) else g
        out.append((_label(key, names), g))
    return out


def x_axis(ax, df: pd.DataFrame, x: str) -> dict:
    """Sets ``ax``'s x axis for ``df[x]``; returns each value's position (itself when numeric)."""
    values = df[x]
    ax.set_xlabel("concurrency (cluster.concurrency)" if x == "concurrency" else x)
    if not _numeric(values):
        seen = list(dict.fromkeys(values.astype(str)))
        ax.set_xticks(range(len(seen)), seen)
        return {v: float(i) for i, v in enumerate(seen)}
    v = values.to_numpy(float)
    if v.min() > 0 and v.max() / v.min() >= 8:
        ints = np.all(v == np.round(v))
        powers_of_two = ints and np.all(np.log2(v) == np.round(np.log2(v)))
        ax.set_xscale("log", base=2 if powers_of_two else 10)
        if ints:
            ticks = sorted(set(v))
            ax.set_xticks(ticks, [f"{int(t):,d}" for t in ticks])
            ax.minorticks_off()
    return {}


def _positions(g: pd.DataFrame, x: str, where: dict) -> np.ndarray:
    if where:
        return np.array([where[str(v)] for v in g[x]])
    return g[x].to_numpy(float)


def _row_names(df: pd.DataFrame, x: str) -> list[str]:
    """Each row as the plots' notes name it: its line's name "at" its x value."""
    names = _others(df, x)
    at = (lambda v: _text(v)) if x == "concurrency" else (lambda v: f"{x.rsplit('.', 1)[-1]}={_text(v)}")
    return [f"{_label(tuple(r[c] for c in names), names)} at {at(r[x])}" for _, r in df.iterrows()]


def sweep_lines_figure(df: pd.DataFrame, swept: list[str] | None = None) -> Figure:
    """Throughput, p99 duration and makespan against the swept variable, a line per substrate (and
    per value of any other varying variable); against concurrency, the knee marked."""

    x = x_variable(df, swept)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    cols = ("trajectories_per_hour", "duration_p99", "makespan_hours")
    where = {}
    for ax in axes:
        where = x_axis(ax, df, x)
    for name, g in groups(df, x):
        at = _positions(g, x, where)
        for ax, col in zip(axes, cols):
            line = ax.plot(at, g[col], marker="o", label=name)[0]
            bands.draw(ax, at, bands.bounds(g, col), col, color=line.get_color())
            if col == cols[0] and x == "concurrency" and len(g) > 1:
                k = knee(g.concurrency, g.trajectories_per_hour)
                y = float(g[g.concurrency == k].trajectories_per_hour.iloc[0])
                ax.plot([k], [y], marker="*", ms=16, color=line.get_color(), gid="knee")
    knee_word = "; * = knee (90% of the best)" if x == "concurrency" else ""
    for ax, yl in zip(axes, (f"throughput (trajectories/h){knee_word}", "p99 duration (s)", "makespan (h)")):
        ax.set_ylabel(yl)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    _note(fig, df, list(cols), _row_names(df, x))
    return fig


def sweep_panels_figure(df: pd.DataFrame, what: str, swept: list[str] | None = None) -> Figure:
    """``what`` = ``tax`` or ``cost``: one panel per substrate (and value of any other varying
    variable), a stacked bar per value of the swept variable (the tax per phase, or the cost split)."""
    x = x_variable(df, swept)
    gs = groups(df, x)
    cols = min(len(gs), 4)
    rows = -(-len(gs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols + 2.5, 3.6 * rows + 0.6), sharey=True,
                             squeeze=False)  # fmt: skip
    for ax, (name, g) in zip(axes.flat, gs):
        at = _bar_axis(ax, [_text(v) for v in g[x]])
        if what == "tax":
            tax_bars(ax, g, at)
        else:
            cost_bars(ax, g, at)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("concurrency (cluster.concurrency)" if x == "concurrency" else x)
        ax.grid(True, axis="y", alpha=0.3)
        if ax is not axes[0, 0]:
            ax.set_ylabel("")
    for ax in axes.flat[len(gs) :]:
        ax.set_visible(False)
    axes[0, -1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    shown = pd.concat([g for _, g in gs])
    _note(fig, shown, _tax_banded(shown) if what == "tax" else ["cost_usd"], _row_names(shown, x))
    return fig


def sweep_substrates_figure(df: pd.DataFrame, swept: list[str] | None = None) -> Figure:
    """Worker-hours and cost (split) of each substrate's cheapest row, named by its values."""
    x = x_variable(df, swept)
    best = df.loc[df.groupby("substrate", sort=False).cost_usd.idxmin()]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    short = "concurrency" if x == "concurrency" else x.rsplit(".", 1)[-1]
    names = [f"{s}\n{short}={_text(v)}" for s, v in zip(best.substrate, best[x])]
    at = _bar_axis(axes[0], names)
    axes[0].bar(at, best.worker_hours, 0.7, color="tab:gray", label="worker-hours")
    bands.draw(axes[0], at, bands.bounds(best, "worker_hours"), "worker_hours")
    axes[0].set_ylabel("worker-hours")
    _bar_axis(axes[1], names)
    cost_bars(axes[1], best, at)
    axes[1].legend(fontsize=7)
    for ax, kind in zip(axes, ("worker-hours", "cost")):
        ax.set_title(f"{kind} per substrate (cheapest row of each)", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    _note(fig, best, ["worker_hours", "cost_usd"], _row_names(best, x))
    return fig


def plot_sweep(df: pd.DataFrame, out: Path, swept: list[str] | None = None) -> list[Path]:
    """sweep_<variable>.png (sweep_concurrency.png against concurrency), sweep_tax.png,
    sweep_cost.png and sweep_substrates.png."""
    x = x_variable(df, swept)
    return [
        save(sweep_lines_figure(df, swept), out / f"sweep_{x}.png"),
        save(sweep_panels_figure(df, "tax", swept), out / "sweep_tax.png"),
        save(sweep_panels_figure(df, "cost", swept), out / "sweep_cost.png"),
        save(sweep_substrates_figure(df, swept), out / "sweep_substrates.png"),
    ]
