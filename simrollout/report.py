"""Results of a run: the terminal table, and the results folder (CSV, JSON, Parquet, PNG)."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from . import __version__  # noqa: E402
from .runner import CDF_LEVELS, RunResult  # noqa: E402

TABLE = [
    ("substrate", "substrate", "{}"),
    ("concurrency", "conc.", "{:d}"),
    ("worker_hours", "worker-h", "{:,.1f}"),
    ("sandbox_hours", "sandbox-h", "{:,.1f}"),
    ("gpu_hours", "GPU-h", "{:,.1f}"),
    ("gpu_idle_fraction", "GPU idle", "{:.0%}"),
    ("makespan_hours", "makespan h", "{:,.2f}"),
    ("trajectories_per_hour", "traj/h", "{:,.0f}"),
    ("completed_duration_p50", "dur p50 s", "{:,.1f}"),
    ("completed_duration_p99", "dur p99 s", "{:,.1f}"),
    ("cold_start_p50", "cold p50 s", "{:.3f}"),
    ("cold_start_p99", "cold p99 s", "{:.3f}"),
    ("completed", "done", "{:,d}"),
    ("timeouts", "timed out", "{:,d}"),
    ("failed", "failed", "{:,d}"),
    ("cancelled", "cancelled", "{:,d}"),  # shown when any (the training loop)
    ("retries", "retries", "{:,d}"),  # shown when any
    ("sandbox_cost_usd", "sandbox $", "{:,.0f}"),
    ("gpu_cost_usd", "GPU $", "{:,.0f}"),
    ("cost_usd", "cost $", "{:,.0f}"),
]


TRAINING = [
    ("substrate", "substrate", "{}"),
    ("concurrency", "conc.", "{:d}"),
    ("training_steps_done", "steps", "{:,d}"),
    ("training_steps_per_day", "steps/day", "{:,.0f}"),
    ("training_hours", "to finish h", "{:,.2f}"),
    ("step_seconds_mean", "step s", "{:,.1f}"),
    ("step_generation_seconds", "gen s", "{:,.1f}"),
    ("step_last_group_seconds", "last group s", "{:,.1f}"),
    ("step_train_seconds", "train s", "{:,.1f}"),
    ("step_sync_seconds", "sync s", "{:,.1f}"),
    ("trainer_idle_fraction", "trainer idle", "{:.0%}"),
    ("inference_idle_fraction", "engine idle", "{:.0%}"),
    ("staleness_p99", "stale p99", "{:.0f}"),
    ("staleness_max", "stale max", "{:.0f}"),
    ("masked_samples", "masked", "{:,d}"),
    ("discarded_samples", "discarded", "{:,d}"),
    ("discarded_worker_hours", "discarded worker-h", "{:,.2f}"),
    ("useful_trajectories_per_hour", "useful traj/h", "{:,.0f}"),
]


SERVING = [
    ("substrate", "substrate", "{}"),
    ("concurrency", "conc.", "{:d}"),
    ("engine_busy_fraction", "engines busy", "{:.0%}"),
    ("engine_tokens_per_busy_second", "tok/s busy", "{:,.0f}"),
    ("kv_queued_fraction", "KV queued", "{:.1%}"),
    ("kv_used_mean", "KV used", "{:.0%}"),
    ("prefix_hit_rate", "prefix hit", "{:.1%}"),
    ("reprefilled_tokens", "re-prefilled tok", "{:,.0f}"),
    ("reprefill_gpu_hours", "re-prefill GPU-h", "{:,.2f}"),
    ("compactions", "compactions", "{:,d}"),
    ("ttft_p50", "TTFT p50 s", "{:,.2f}"),
    ("ttft_p99", "TTFT p99 s", "{:,.2f}"),
    ("tpot_p50", "TPOT p50 ms", "{:,.1f}"),
    ("tpot_p99", "TPOT p99 ms", "{:,.1f}"),
    ("llm_request_p50", "turn p50 s", "{:,.1f}"),
    ("llm_request_p99", "turn p99 s", "{:,.1f}"),
]


def _table(title: str, cols, summary: pd.DataFrame) -> Table:
    t = Table(title=title)
    for _, head, _ in cols:
        t.add_column(head, justify="left" if head == "substrate" else "right", no_wrap=True)
    for _, row in summary.iterrows():
        cells = []
        for key, _, fmt in cols:
            v = row[key]
            if isinstance(v, float) and np.isnan(v):
                cells.append("-")
            else:
                cells.append(fmt.format(int(v) if "d}" in fmt else v) + _band(row, key, fmt))
        t.add_row(*cells)
    return t


def _band(row, key: str, fmt: str) -> str:
    """`` [lo-hi]`` where the run has a band on ``key`` (``run --uncertainty``), else nothing."""
    lo, hi = row.get(f"{key}_lo"), row.get(f"{key}_hi")
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return ""
    return f" [{fmt.format(lo)}-{fmt.format(hi)}]"


def print_table(result: RunResult, console: Console | None = None) -> None:
    console = console or Console()
    if not console.is_terminal:
        console.width = max(console.width, 240)
    scn = result.scenario
    title = (
        f"{scn.name}: {_count(result)}, fidelity {result.fidelity}"
        + f" ({result.fidelity_reason})"
        + (f", mean of {scn.replications} replications" if scn.replications > 1 else "")
    )
    one_wait = result.summary.get("one_wait_fraction", pd.Series([0.0]))
    if one_wait.max() > 0:  # the steady state's one-wait trajectories (docs/model.md, "Two fidelities")
        lo, hi = f"{one_wait.min():.0%}", f"{one_wait.max():.0%}"
        title += f"; {lo if lo == hi else f'{lo}-{hi}'} of trajectories waited at once in the steady state"
    when_any = ("retries", "cancelled")
    cols = [c for c in TABLE if c[0] not in when_any or result.summary.get(c[0], pd.Series([0])).sum() > 0]
    t = _table(title, cols, result.summary)
    console.print(t)
    if "band" in result.summary:  # run --uncertainty: where each substrate's band comes from
        bands = dict(zip(result.summary.substrate, result.summary.band))
        console.print(
            "bands [5th-95th percentile over the profile's refits, common random numbers]: "
            + "; ".join(f"{k}: {v}" for k, v in bands.items()),
        )
    console.print(
        "worker-h: infrastructure worker-hours (the Rollout Infrastructure Tax paper's definition: "
        "time on the substrate, model inference excluded); durations are of completed trajectories "
        "(timed out and failed ones are counted apart); done / timed out / failed / cancelled count "
        "trajectories. Every column: simrollout run --explain; docs/model.md.",
        style="dim",
    )
    if scn.workload.tokens is not None:
        inf = scn.cluster.inference
        ms = result.summary.assign(
            tpot_p50=result.summary.tpot_p50 * 1e3, tpot_p99=result.summary.tpot_p99 * 1e3
        )
        title = (f"serving engines: {inf.engines} x {inf.engine.gpus} GPU, routing {inf.routing}, "
                 f"prefix cache {'on' if inf.prefix_cache else 'off'}")  # fmt: skip
        if "serving_from" in result.summary:  # trajectory fidelity: say where these figures come from
            title += "; " + "; ".join(dict.fromkeys(result.summary.serving_from.astype(str)))
        console.print(_table(title, SERVING, ms))
        console.print(
            "engines busy: time in iterations; KV queued: turns that waited for KV-cache space; prefix "
            "hit: share of a turn's previous context found cached; re-prefilled: context computed "
            "again after an eviction; turn: a request's whole latency (docs/model.md, 'Serving engines').",
            style="dim",
        )
    if scn.training is not None:
        tr = scn.training
        title = (
            f"training loop: {tr.mode}, {tr.prompts_per_step} prompts x {tr.samples_per_prompt} samples, "
            f"{tr.steps:,} steps, {tr.placement}"
            + (f", max staleness {tr.max_staleness}" if tr.mode == "async" else "")
        )
        console.print(_table(title, TRAINING, result.summary))
        short = result.summary[result.summary.training_steps_done < tr.steps]
        for _, row in short.iterrows():
            console.print(
                f"{row.substrate} at {row.concurrency:d}: only {row.training_steps_done:,.0f} of "
                f"{tr.steps:,} steps trained: the trajectory budget ({scn.trajectories:,}) ran out; raise "
                "workload.trajectories or check the failure and filter rates.",
                style="bold red",
            )
        console.print(
            "step s = generation + last group (waiting from the trained samples' mean end to the "
            "last group) + train + sync; idle: trainer GPUs not training or syncing, engines "
            "without a request while they could generate; discarded: over-sampled, filtered, stale, "
            "failed groups and groups left at the end (docs/model.md).",
            style="dim",
        )


EXPLAIN = {
    "worker-h": "infrastructure worker-hours, the Rollout Infrastructure Tax paper's definition: the sum "
    "over trajectories of wall time on the substrate excluding model inference (create or warm start, "
    "setup, exec overhead and tool time, reward, teardown, every attempt) / 3600",
    "sandbox-h": "billed sandbox lifetime, create to teardown including time waiting for the LLM, with "
    "minimum billing and idle warm-pool sandboxes, / 3600",
    "GPU-h": "inference engines (and trainer GPUs) x makespan / 3600: provisioned, not used",
    "GPU idle": "share of GPU time with no request running (and, with training, not training or syncing); "
    "with serving engines, not in an iteration",
    "makespan h": "time until the last trajectory released its rollout worker",
    "traj/h": "completed trajectories per hour of makespan",
    "dur p50 s / dur p99 s": "duration of completed trajectories, from getting a worker to release",
    "cold p50 s / cold p99 s": "sandbox acquisition latency of the last attempt (cold or warm start)",
    "done / timed out / failed": "trajectories completed, cut by policy.timeout, failed after their retries",
    "cancelled": "trajectories stopped by the training loop (over-sampled, stale, dropped, left at the end)",
    "retries": "further attempts after a failed create or a lost sandbox",
    "sandbox $ / GPU $ / cost $": "sandbox-seconds x price (with minimums), GPU-hours x price, their sum",
    "training table": "see docs/model.md, 'The training loop' and its metrics",
    "serving table": "with workload.tokens: see docs/model.md, 'Serving engines' and its metrics",
}


def print_explain(console: Console | None = None) -> None:
    """What every column of the run table means."""
    console = console or Console()
    t = Table(title="columns of the run table", show_lines=False)
    t.add_column("column", no_wrap=True)
    t.add_column("meaning")
    for k, v in EXPLAIN.items():
        t.add_row(k, v)
    console.print(t)


def _count(result: RunResult) -> str:
    scn = result.scenario
    if scn.training is None:
        return f"{scn.trajectories:,} trajectories"
    ran = int(result.summary.trajectories.mean())
    return f"{ran:,} trajectories run by the training loop"


def write_results(result: RunResult, out: Path) -> list[Path]:
    """Write summary.csv/json, cells.csv and plots into ``out`` (per-trajectory records are
    streamed to ``out/trajectories/`` by the run itself)."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "summary.csv", out / "cells.csv", out / "summary.json"]
    result.summary.to_csv(written[0], index=False)
    result.cells.to_csv(written[1], index=False)
    meta = {
        "simrollout": __version__,
        "scenario": result.scenario.model_dump(mode="json", by_alias=True, exclude_none=True),
        "fidelity": result.fidelity,
        "fidelity_reason": result.fidelity_reason,
        "python": platform.python_version(),
        "summary": json.loads(result.summary.to_json(orient="records")),
    }
    written[2].write_text(json.dumps(meta, indent=2))
    if not result.steps.empty:
        written.append(out / "training_steps.csv")
        result.steps.to_csv(written[-1], index=False)
        written.append(plot_steps(result, out / "training_steps.png"))
    return written + plot_run(result, out)


def plot_steps(result: RunResult, path: Path) -> Path:
    """Per-step time as stacked bars (generation, last group, train, sync), one panel per
    substrate at the first concurrency level, replication 0."""
    s = result.steps
    df = s[(s.replication == 0) & (s.concurrency == s.concurrency.iloc[0])]
    subs = list(dict.fromkeys(df.substrate))
    fig, axes = plt.subplots(len(subs), 1, figsize=(10, 2.6 * len(subs)), sharex=True, squeeze=False)
    parts = (("generation_s", "generation", "tab:blue"), ("last_group_s", "last group", "tab:orange"),
             ("train_s", "train", "tab:green"), ("sync_s", "weight sync", "tab:red"))  # fmt: skip
    for ax, sub in zip(axes[:, 0], subs):
        g = df[df.substrate == sub]
        bottom = np.zeros(len(g))
        for col, label, color in parts:
            ax.bar(g.step, g[col], bottom=bottom, width=0.9, label=label, color=color)
            bottom += g[col].to_numpy()
        ax.set_ylabel("step time (s)")
        ax.set_title(sub, fontsize=9)
    axes[-1, 0].set_xlabel("training step")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.legend(handles, labels, loc="upper center", ncol=4, fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_run(result: RunResult, out: Path) -> list[Path]:
    """Duration CDF per substrate (log x), worker-hours and cost bars, and, when concurrency is
    swept, throughput and p99 duration against concurrency."""
    paths = []
    levels = result.scenario.cluster.levels
    level = levels[-1]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, durations in result.cdf.items():
        if key.replication == 0 and key.concurrency == level:
            keep = durations > 0
            ax.plot(durations[keep], CDF_LEVELS[keep], label=result.scenario.substrates[key.substrate].name)
    ax.set_xscale("log")
    ax.set_xlabel("trajectory duration (s, log scale)")
    ax.set_ylabel("fraction of trajectories")
    ax.set_title(f"Trajectory duration CDF at concurrency {level}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    paths.append(_save(fig, out / "duration_cdf.png"))

    s = result.summary[result.summary.concurrency == level]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, col, label in (
        (axes[0], "worker_hours", "worker-hours"),
        (axes[1], "cost_usd", "cost (USD)"),
    ):
        ax.bar(s.substrate, s[col], yerr=s.get(f"{col}_ci95"), color="tab:blue", capsize=4)
        ax.set_ylabel(label)
        ax.set_title(f"{label} per substrate (concurrency {level})")
        ax.tick_params(axis="x", rotation=20)
    paths.append(_save(fig, out / "worker_hours_cost.png"))

    if len(levels) > 1:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for name, g in result.summary.groupby("substrate", sort=False):
            axes[0].plot(g.concurrency, g.trajectories_per_hour, marker="o", label=name)
            axes[1].plot(g.concurrency, g.duration_p99, marker="o", label=name)
        for ax, label in ((axes[0], "throughput (trajectories/h)"), (axes[1], "p99 duration (s)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrency")
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
            ax.legend()
        paths.append(_save(fig, out / "concurrency.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_sweep(df: pd.DataFrame, out: Path) -> list[Path]:
    """Throughput (knee marked), p99 duration and makespan against concurrency per substrate;
    worker-hours and cost per substrate."""
    from .sweeps import knee

    groups = list(df.groupby(["substrate", *grid_columns(df)], sort=False))
    paths = []
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for key, g in groups:
        g = g.sort_values("concurrency")
        line = axes[0].plot(g.concurrency, g.trajectories_per_hour, marker="o", label=_label(key))[0]
        if len(g) > 1:
            k = knee(g.concurrency, g.trajectories_per_hour)
            y = float(g[g.concurrency == k].trajectories_per_hour.iloc[0])
            axes[0].plot([k], [y], marker="*", ms=16, color=line.get_color())
        axes[1].plot(g.concurrency, g.duration_p99, marker="o", label=_label(key))
        axes[2].plot(g.concurrency, g.makespan_hours, marker="o", label=_label(key))
    for ax, yl in zip(axes, ("throughput (trajectories/h); * = knee", "p99 duration (s)", "makespan (h)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(yl)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    paths.append(_save(fig, out / "sweep_concurrency.png"))

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    best = df.loc[df.groupby("substrate", sort=False).cost_usd.idxmin()]
    for ax, col, yl in ((axes[0], "worker_hours", "worker-hours"), (axes[1], "cost_usd", "cost (USD)")):
        ax.bar(best.substrate, best[col], color="tab:blue")
        ax.set_ylabel(yl)
        ax.set_title(f"{yl} per substrate (cheapest cell of each)")
        ax.tick_params(axis="x", rotation=20)
    paths.append(_save(fig, out / "sweep_substrates.png"))
    return paths


def _label(key) -> str:
    return " ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))


def grid_columns(df: pd.DataFrame) -> list[str]:
    """Columns a sweep added (dotted paths other than the concurrency level)."""
    return [c for c in df.columns if "." in c and c != "cluster.concurrency"]
