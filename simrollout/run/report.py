"""Results of a run: the terminal table, and the results folder (CSV, JSON, Parquet; the plots
come from ``simrollout.run.plots``)."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from .. import __version__
from .plots import plot_run
from .runner import RunResult

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


# what a workload without sandboxes leaves out of the tables
SANDBOX_COLUMNS = {"substrate", "worker_hours", "sandbox_hours", "cold_start_p50", "cold_start_p99",
                   "sandbox_cost_usd", "discarded_worker_hours"}  # fmt: skip

TRAINING = [
    ("substrate", "substrate", "{}"),
    ("concurrency", "conc.", "{:d}"),
    ("training_steps_done", "steps", "{:,d}"),
    ("training_steps_per_day", "steps/day", "{:,.0f}"),
    ("training_hours", "to finish h", "{:,.2f}"),
    ("step_seconds_mean", "step s", "{:,.1f}"),
    ("step_rollout_seconds", "rollout s", "{:,.1f}"),
    ("step_last_group_seconds", "last group s", "{:,.1f}"),
    ("step_train_seconds", "train s", "{:,.1f}"),
    ("step_sync_seconds", "sync s", "{:,.1f}"),
    ("trainer_idle_fraction", "trainer idle", "{:.0%}"),
    ("inference_idle_fraction", "rollouter idle", "{:.0%}"),
    ("staleness_p99", "stale p99", "{:.0f}"),
    ("staleness_max", "stale max", "{:.0f}"),
    ("stale_samples_trained", "stale used", "{:,d}"),
    ("partial_samples_trained", "partial", "{:,d}"),
    ("masked_samples", "masked", "{:,d}"),
    ("discarded_samples", "discarded", "{:,d}"),
    ("discarded_worker_hours", "discarded worker-h", "{:,.2f}"),
    ("length_bias_turns", "kept/started turns", "{:.2f}"),
    ("length_bias_body_seconds", "kept/started s", "{:.2f}"),
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
        + (f"; compiled in {result.compile_seconds:.1f} s" if result.compile_seconds >= 0.05 else "")
        + (f", mean of {scn.replications} replications" if scn.replications > 1 else "")
        + (f"; WARNING: {result.fidelity_warning}" if result.fidelity_warning else "")
    )
    one_wait = result.summary.get("one_wait_fraction", pd.Series([0.0]))
    if one_wait.max() > 0:  # the steady state's one-wait trajectories (docs/model.md, "Two fidelities")
        lo, hi = f"{one_wait.min():.0%}", f"{one_wait.max():.0%}"
        title += f"; {lo if lo == hi else f'{lo}-{hi}'} of trajectories waited at once in the steady state"
    when_any = ("retries", "cancelled")
    cols = [c for c in TABLE if c[0] not in when_any or result.summary.get(c[0], pd.Series([0])).sum() > 0]
    if scn.sandboxless:  # single-turn RL: no sandbox, so no sandbox columns
        cols = [c for c in cols if c[0] not in SANDBOX_COLUMNS]
    t = _table(title, cols, result.summary)
    console.print(t)
    if "band" in result.summary:  # run --uncertainty: where each substrate's band comes from
        bands = dict(zip(result.summary.substrate, result.summary.band))
        console.print(
            "bands [90%: the profile's refits, 5th-95th percentile with common random numbers, and the "
            "model's error, in quadrature]: " + "; ".join(f"{k}: {v}" for k, v in bands.items()),
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
        title = loop_title(tr)
        cols = [c for c in TRAINING if not (scn.sandboxless and c[0] in SANDBOX_COLUMNS)]
        if tr.at_sync == "interrupt":
            cols.append(("resumed_samples_trained", "resumed", "{:,d}"))
        if scn.workload.tokens is not None and scn.workload.tokens.max_tokens:
            cols.append(("truncated_samples", "truncated", "{:,d}"))
        console.print(_table(title, cols, result.summary))
        short = result.summary[result.summary.training_steps_done < tr.steps]
        for _, row in short.iterrows():
            console.print(
                f"{row.substrate} at {row.concurrency:d}: only {row.training_steps_done:,.0f} of "
                f"{tr.steps:,} steps trained: the trajectory budget ({scn.trajectories:,}) ran out; raise "
                "workload.trajectories or check the failure and filter rates.",
                style="bold red",
            )
        console.print(
            "step s = rollout (the trainer waiting for its groups, the phase frameworks report as gen) "
            "+ train + sync; last group: the part of it from the trained samples' mean end to the last "
            "group; idle: trainer GPUs not training or syncing, engine capacity "
            "unused while they could generate (in tokens: KV cache not held by running requests; in "
            "seconds: no request); discarded: over-sampled, filtered, stale, "
            "failed groups and groups left at the end; stale used: trained samples started under an older "
            "version; partial: trained samples whose generation crossed a weight sync; resumed: of "
            "them, those interrupted at a sync and resumed under the new weights (docs/model.md).",
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


def write_results(result: RunResult, out: Path, names: str | None = None) -> list[Path]:
    """Write summary.csv/json, cells.csv and plots into ``out`` (per-trajectory records are
    streamed to ``out/trajectories/`` by the run itself); ``names``: training_steps.csv's columns
    as that framework logs them (:mod:`.step_names`)."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "summary.csv", out / "cells.csv", out / "summary.json"]
    result.summary.to_csv(written[0], index=False)
    result.cells.to_csv(written[1], index=False)
    meta = {
        "simrollout": __version__,
        "scenario": result.scenario.model_dump(mode="json", by_alias=True, exclude_none=True),
        "fidelity": result.fidelity,
        "fidelity_reason": result.fidelity_reason,
        "fidelity_warning": result.fidelity_warning,
        "python": platform.python_version(),
        "summary": json.loads(result.summary.to_json(orient="records")),
    }
    written[2].write_text(json.dumps(meta, indent=2))
    if not result.steps.empty:
        written.append(out / "training_steps.csv")
        from .step_names import renamed

        renamed(result.steps, names).to_csv(written[-1], index=False)
    return written + plot_run(result, out)


def loop_title(tr) -> str:
    """The training table's title: the loop's mode, batch, steps, placement, staleness bound (in
    versions or as a fraction, as given) and partial rollouts when they are interrupted."""
    bound = ""
    if tr.mode == "async":
        f = tr.staleness_fraction
        bound = f", staleness fraction {f:g}" if f is not None else f", max staleness {tr.max_staleness}"
    return (
        f"training loop: {tr.mode}, {tr.prompts_per_step} prompts x {tr.samples_per_prompt} samples, "
        f"{tr.steps:,} steps, {tr.placement}{bound}"
        + (", requests interrupted at a sync" if tr.at_sync == "interrupt" else "")
    )
