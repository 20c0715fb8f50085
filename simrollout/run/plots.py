"""The plots of a run and of a sweep, each built as a figure from the summary (tests read the
figures' artists back) and written as PNG.

Every bar and point with a band in the summary draws it as an error bar (``simrollout.run.bands``),
and each figure's note (a text with gid ``band-note``) says where there is none.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ..sim.metrics import TAX  # noqa: E402
from . import bands  # noqa: E402
from .runner import CDF_LEVELS, RunResult  # noqa: E402

# the tax's phases bottom to top (the wait is outside worker-hours), and worker time's parts
TAX_PARTS = [
    ("tax_cold_start_s", "tab:blue", None),
    ("tax_exec_overhead_s", "tab:orange", None),
    ("tax_teardown_s", "tab:green", None),
    ("tax_retry_s", "tab:red", None),
    ("tax_wait_s", "white", "//"),
]
WORKER_PARTS = [*TAX_PARTS[:4], ("tax_tool_s", "lightgrey", None)]
TAX_LABEL = {**TAX, "tax_wait_s": "wait for a sandbox (outside worker-hours)"}


def _cost_parts(df: pd.DataFrame) -> list[tuple[str, str, np.ndarray]]:
    """Cost bars' parts: sandbox $, inference GPU $, and trainer $ with a training loop."""
    trainer = df["trainer_cost_usd"].to_numpy(float) if "trainer_cost_usd" in df else np.zeros(len(df))
    parts = [("sandbox $", "tab:blue", df.sandbox_cost_usd.to_numpy(float)),
             ("GPU $ (inference)", "tab:purple", df.gpu_cost_usd.to_numpy(float) - trainer)]  # fmt: skip
    if "trainer_cost_usd" in df:
        parts.append(("trainer $", "tab:brown", trainer))
    return parts


def _stack(ax, x, parts, width=0.7) -> np.ndarray:
    """Stacked bars at ``x`` from ``parts`` [(label, color, values[, hatch])]; returns the tops."""
    bottom = np.zeros(len(x))
    for label, color, values, *hatch in parts:
        h = hatch[0] if hatch else None
        ax.bar(x, values, width, bottom=bottom, label=label, color=color, hatch=h,
               edgecolor="grey" if h else None)  # fmt: skip
        bottom = bottom + values
    return bottom


def tax_bars(ax, df: pd.DataFrame, x, parts=TAX_PARTS) -> None:
    """Each row of ``df`` as a bar at ``x`` stacked from ``parts`` (the tax's phases, or worker
    time's), a part's own band (``tax_*_lo``/``_hi``) at its top, the total written above; worker
    time's parts carry worker-hours' band at their top."""
    bottom = np.zeros(len(df))
    for c, color, hatch in parts:
        values = df[c].to_numpy(float)
        ax.bar(x, values, 0.7, bottom=bottom, label=TAX_LABEL[c], color=color, hatch=hatch,
               edgecolor="grey" if hatch else None)  # fmt: skip
        ends = bands.bounds(df, c)
        if ends is not None and parts is TAX_PARTS:
            bands.draw(ax, x, (ends[0] + bottom, ends[1] + bottom), c)
        bottom = bottom + values
    if parts is WORKER_PARTS:
        per = 3600 / df.trajectories.to_numpy(float)
        bands.draw(ax, x, bands.bounds(df, "worker_hours", per), "worker_seconds_per_trajectory")
    for xi, top in zip(x, bottom):
        ax.annotate(f"{top:,.1f} s", (xi, top), ha="center", va="bottom", fontsize=7, xytext=(0, 2),
                    textcoords="offset points")  # fmt: skip
    ax.set_ylabel("seconds per trajectory")


def cost_bars(ax, df: pd.DataFrame, x) -> None:
    """Cost of each row of ``df`` stacked at ``x``, its band at the top."""
    _stack(ax, x, _cost_parts(df))
    bands.draw(ax, x, bands.bounds(df, "cost_usd"), "cost_usd")
    ax.set_ylabel("cost (USD)")


def _tax_banded(df: pd.DataFrame) -> list[str]:
    """The tax plot's banded metrics: worker-hours, and the phases that carry a band."""
    return ["worker_hours", *(c for c in TAX if bands.bounds(df, c) is not None)]


def _note(fig: Figure, df: pd.DataFrame, metrics: list[str], names: list[str]) -> None:
    text = bands.note(df, metrics, names)
    if text:
        fig.text(0.01, 0.005, text, fontsize=7, va="bottom", ha="left", gid="band-note", wrap=True)


def _names(df: pd.DataFrame, with_level: bool) -> list[str]:
    if with_level:
        return [f"{s}\n{c:,d}" for s, c in zip(df.substrate, df.concurrency)]
    return list(df.substrate)


def _bar_axis(ax, names: list[str]) -> np.ndarray:
    x = np.arange(len(names), dtype=float)
    ax.set_xticks(x, names, fontsize=8)
    return x


def tax_figure(summary: pd.DataFrame, title: str) -> Figure:
    """The tax per row (substrate, and concurrency when several levels): its phases stacked, and
    beside them worker time per trajectory (the phases but the wait, and the task's own tool
    calls, setup and reward), whose total is worker_hours x 3600 / trajectories."""
    several = summary.concurrency.nunique() > 1
    names = _names(summary, several)
    width = max(5.0, 0.8 * len(names) + 2)
    fig, axes = plt.subplots(1, 2, figsize=(2 * width + 2.5, 4.8), width_ratios=[1.2, 1])
    panels = ((axes[0], TAX_PARTS, "the tax by phase"),
              (axes[1], WORKER_PARTS, "worker time (worker-hours x 3600 / trajectories)"))  # fmt: skip
    for ax, parts, what in panels:
        x = _bar_axis(ax, names)
        tax_bars(ax, summary, x, parts)
        ax.set_title(what, fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("seconds per trajectory outside model inference")
    handles, labels = axes[1].get_legend_handles_labels()
    h0, l0 = axes[0].get_legend_handles_labels()
    legend = dict(zip(l0 + labels, h0 + handles))
    axes[1].legend(legend.values(), legend.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(title, fontsize=10)
    _note(fig, summary, _tax_banded(summary), [n.replace("\n", " at ") for n in names])
    return fig


def cost_figure(summary: pd.DataFrame, title: str) -> Figure:
    """Cost stacked into sandbox, inference-GPU and trainer dollars; worker-hours beside it."""
    several = summary.concurrency.nunique() > 1
    names = _names(summary, several)
    fig, axes = plt.subplots(1, 2, figsize=(max(10.0, 1.6 * len(names) + 4), 4.4))
    x = _bar_axis(axes[0], names)
    cost_bars(axes[0], summary, x)
    axes[0].legend(fontsize=7)
    axes[0].set_title(f"cost per substrate {title}", fontsize=10)
    _bar_axis(axes[1], names)
    axes[1].bar(x, summary.worker_hours, 0.7, color="tab:gray", label="worker-hours")
    bands.draw(axes[1], x, bands.bounds(summary, "worker_hours"), "worker_hours")
    axes[1].set_ylabel("worker-hours")
    axes[1].set_title(f"worker-hours per substrate {title}", fontsize=10)
    for ax in axes:
        ax.grid(True, axis="y", alpha=0.3)
    _note(fig, summary, ["cost_usd", "worker_hours"], [n.replace("\n", " at ") for n in names])
    return fig


def cdf_figure(result: RunResult, which: str, summary: pd.DataFrame | None = None) -> Figure:
    """The ``duration`` or ``cold_start`` CDF per substrate at the top concurrency level
    (replication 0, log x); the duration CDF marks the timeout; the bands of ``summary`` (the
    run's by default) on p50 and p99."""
    scn = result.scenario
    level = scn.cluster.levels[-1]
    curves = result.cdf if which == "duration" else result.cold_cdf
    fig, ax = plt.subplots(figsize=(7, 4.8))
    for key, values in curves.items():
        if key.replication == 0 and key.concurrency == level:
            keep = values > 0
            ax.plot(values[keep], CDF_LEVELS[keep], label=scn.substrates[key.substrate].name)
    summary = result.summary if summary is None else summary
    s = summary[summary.concurrency == level]
    quantiles = {"duration": (("duration_p50", 0.5), ("duration_p99", 0.99)),
                 "cold_start": (("cold_start_p50", 0.5), ("cold_start_p99", 0.99))}[which]  # fmt: skip
    colors = {ln.get_label(): ln.get_color() for ln in ax.get_lines()}
    for metric, q in quantiles:
        ends = bands.bounds(s, metric)
        for k, name in enumerate(s.substrate) if ends is not None else ():
            one = (ends[0][k : k + 1], ends[1][k : k + 1])
            bands.draw(ax, [q], one, metric, horizontal=True, color=colors.get(name, "black"))
    what = "trajectory duration" if which == "duration" else "sandbox acquisition (cold or warm start)"
    if which == "duration" and scn.policy.timeout:
        t = scn.policy.timeout
        ax.axvline(t, color="black", ls="--", lw=1, label=f"timeout ({t:,.0f} s)", gid="timeout")
    ax.set_xscale("log")
    ax.set_xlabel(f"{what} (s, log scale)")
    ax.set_ylabel("fraction of trajectories")
    ax.set_title(f"{what.capitalize()} CDF at concurrency {level:,d}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _note(fig, s, [m for m, _ in quantiles], list(s.substrate))
    return fig


def levels_figure(summary: pd.DataFrame) -> Figure:
    """Throughput and p99 duration against concurrency, one line per substrate."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
    for name, g in summary.groupby("substrate", sort=False):
        for ax, col in ((axes[0], "trajectories_per_hour"), (axes[1], "duration_p99")):
            line = ax.plot(g.concurrency, g[col], marker="o", label=name)[0]
            bands.draw(ax, g.concurrency, bands.bounds(g, col), col, color=line.get_color())
    for ax, label in ((axes[0], "throughput (trajectories/h)"), (axes[1], "p99 duration (s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    names = [f"{s} at {c:,d}" for s, c in zip(summary.substrate, summary.concurrency)]
    _note(fig, summary, ["trajectories_per_hour", "duration_p99"], names)
    return fig


# a training step's phases bottom to top (docs/model.md, "The training loop"): the columns of
# training_steps.csv, the legend's words, the colours
STEP_PHASES = (
    ("generation_s", "generation (until the trained samples' mean end)", "tab:blue"),
    ("last_group_s", "waiting for the last group", "tab:orange"),
    ("train_s", "train", "tab:green"),
    ("sync_s", "weight sync", "tab:red"),
)


def steps_figure(result: RunResult) -> Figure:
    """Each step's time stacked by phase (:data:`STEP_PHASES`), one panel per substrate at the
    first concurrency level, replication 0: each step one unit wide, as areas (a bar per step and
    phase took 10 s to draw at 1,000 steps), named once in the legend."""
    s = result.steps
    level = s.concurrency.iloc[0]
    df = s[(s.replication == 0) & (s.concurrency == level)]
    subs = list(dict.fromkeys(df.substrate))
    fig, axes = plt.subplots(len(subs), 1, figsize=(11, 2.6 * len(subs) + 0.8), sharex=True, squeeze=False)
    for ax, sub in zip(axes[:, 0], subs):
        g = df[df.substrate == sub]
        x = np.append(g.step.to_numpy(float), g.step.iloc[-1] + 1.0) - 0.5  # each step's edges
        bottom = np.zeros(len(x))
        for col, label, color in STEP_PHASES:
            v = g[col].to_numpy(float)
            top = bottom + np.append(v, v[-1])  # the last value once more: its step's right edge
            ax.fill_between(x, bottom, top, step="post", label=label, color=color, linewidth=0, gid=col)
            bottom = top
        ax.set_ylabel("seconds")
        ax.set_title(f"{sub} at concurrency {level:,d}", fontsize=9)
        ax.set_xlim(x[0], x[-1])
    axes[-1, 0].set_xlabel("training step")
    axes[0, 0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="phase of the step",
                      title_fontsize=8)  # fmt: skip
    fig.suptitle("Time per training step, by phase (replication 0)", fontsize=10)
    fig.tight_layout()
    return fig


def save(fig: Figure, path: Path) -> Path:
    fig.tight_layout(rect=(0, 0.05 if any(t.get_gid() == "band-note" for t in fig.texts) else 0, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_run(result: RunResult, out: Path) -> list[Path]:
    """tax.png, worker_hours_cost.png, cold_start_cdf.png, duration_cdf.png, concurrency.png when
    concurrency is swept, and training_steps.png with a training loop; drawn on two cores where
    there are (:func:`_draw_all`)."""
    s, levels = result.summary, result.scenario.cluster.levels
    at = f"(concurrency {levels[0]:,d})" if len(levels) == 1 else "(each concurrency level)"
    figures = {  # file name -> (its figure, drawn when called; how it is written)
        "tax.png": (lambda: tax_figure(s, f"Where the infrastructure time goes {at}"), save),
        "worker_hours_cost.png": (lambda: cost_figure(s, at), save),
        "cold_start_cdf.png": (lambda: cdf_figure(result, "cold_start"), save),
        "duration_cdf.png": (lambda: cdf_figure(result, "duration"), save),
    }
    if len(levels) > 1:
        figures["concurrency.png"] = (lambda: levels_figure(s), save)
    if not result.steps.empty:  # laid out by steps_figure itself
        figures["training_steps.png"] = (lambda: steps_figure(result), _save_as_laid_out)
    _draw_all([partial(_write, *how, out / name) for name, how in figures.items()])
    return [out / name for name in figures]


def _write(figure, saver, path: Path) -> Path:
    return saver(figure(), path)


def _save_as_laid_out(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _draw_all(draws: list) -> None:
    """Run each figure's draw-and-save: every other one in a forked process beside this one when
    the machine has two cores or more (matplotlib draws on one core; a run's four figures took
    about a second in turn), the rest here; a figure the child did not write is drawn here."""
    import os

    if len(draws) < 2 or (os.cpu_count() or 1) < 2 or not hasattr(os, "fork"):
        for draw in draws:
            draw()
        return
    theirs, mine = draws[1::2], draws[0::2]
    pid = os.fork()
    if pid == 0:  # the child: its figures, then out without the parent's exit handlers
        code = 0
        try:
            for draw in theirs:
                draw()
        except BaseException:
            code = 1
        os._exit(code)
    try:
        for draw in mine:
            draw()
    finally:
        _, status = os.waitpid(pid, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        for draw in theirs:
            draw()


def knee(concurrency, throughput, share: float = 0.9) -> int:
    """The smallest concurrency reaching ``share`` of the best throughput seen."""
    pairs = sorted(zip(concurrency, throughput))
    best = max(t for _, t in pairs)
    return next(c for c, t in pairs if t >= share * best)
