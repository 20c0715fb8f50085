"""Results of a run: the terminal table, and the results folder (CSV, JSON, Parquet; the plots
come from ``simrollout.run.plots``)."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import __version__
from . import html_report
from .html_report import Section
from .plots import plot_run
from .runner import RunResult
from .screen import print_fitted, screen_console

TABLE = [  # most important first: a narrow screen shows the rest in a second table
    ("substrate", "substrate", "{}"),
    ("concurrency", "conc.", "{:,d}"),
    ("worker_hours", "worker-h", "{:,.1f}"),
    ("cost_usd", "cost $", "{:,.0f}"),
    ("makespan_hours", "makespan h", "{:,.2f}"),
    ("trajectories_per_hour", "traj/h", "{:,.0f}"),
    ("completed", "done", "{:,d}"),
    ("timeouts", "timed out", "{:,d}"),
    ("failed", "failed", "{:,d}"),
    ("cancelled", "cancelled", "{:,d}"),  # shown when any (the training loop)
    ("retries", "retries", "{:,d}"),  # shown when any
    ("sandbox_hours", "sandbox-h", "{:,.1f}"),
    ("gpu_hours", "GPU-h", "{:,.1f}"),
    ("gpu_idle_fraction", "GPU idle", "{:.0%}"),
    ("completed_duration_p50", "dur p50 s", "{:,.1f}"),
    ("completed_duration_p99", "dur p99 s", "{:,.1f}"),
    ("cold_start_p50", "cold p50 s", "{:.3f}"),
    ("cold_start_p99", "cold p99 s", "{:.3f}"),
    ("sandbox_cost_usd", "sandbox $", "{:,.0f}"),
    ("gpu_cost_usd", "GPU $", "{:,.0f}"),
]


# what a workload without sandboxes leaves out of the tables
SANDBOX_COLUMNS = {"substrate", "worker_hours", "sandbox_hours", "cold_start_p50", "cold_start_p99",
                   "sandbox_cost_usd", "discarded_worker_hours"}  # fmt: skip

TRAINING = [
    ("substrate", "substrate", "{}"),
    ("concurrency", "conc.", "{:,d}"),
    ("training_steps_done", "steps", "{:,d}"),
    ("training_steps_per_day", "steps/day", "{:,.0f}"),
    ("training_hours", "to finish h", "{:,.2f}"),
    ("useful_trajectories_per_hour", "useful traj/h", "{:,.0f}"),
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
]


SERVING = [
    ("substrate", "substrate", "{}"),
    ("concurrency", "conc.", "{:,d}"),
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


def _title(result: RunResult) -> str:
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
    return title


HEADLINE_NOTE = (
    "worker-h: infrastructure worker-hours (the Rollout Infrastructure Tax paper's definition: "
    "time on the substrate, model inference excluded); durations are of completed trajectories "
    "(timed out and failed ones are counted apart); done / timed out / failed / cancelled count "
    "trajectories. Every column: simrollout run --explain; docs/model.md."
)
SERVING_NOTE = (
    "engines busy: time in iterations; KV queued: turns that waited for KV-cache space; prefix "
    "hit: share of a turn's previous context found cached; re-prefilled: context computed "
    "again after an eviction; turn: a request's whole latency (docs/model.md, 'Serving engines')."
)
TRAINING_NOTE = (
    "step s = rollout (the trainer waiting for its groups, the phase frameworks report as gen) "
    "+ train + sync; last group: the part of it from the trained samples' mean end to the last "
    "group; idle: trainer GPUs not training or syncing, engine capacity "
    "unused while they could generate (in tokens: KV cache not held by running requests; in "
    "seconds: no request); discarded: over-sampled, filtered, stale, "
    "failed groups and groups left at the end; stale used: trained samples started under an older "
    "version; partial: trained samples whose generation crossed a weight sync; resumed: of "
    "them, those interrupted at a sync and resumed under the new weights (docs/model.md)."
)


def run_sections(result: RunResult) -> list[Section]:
    """The run's tables: the headline, the serving engines' (with a token workload) and the
    training loop's (with a training section), each with its note."""
    scn, summary = result.scenario, result.summary
    when_any = ("retries", "cancelled")
    cols = [c for c in TABLE if c[0] not in when_any or summary.get(c[0], pd.Series([0])).sum() > 0]
    if scn.sandboxless:  # single-turn RL: no sandbox, so no sandbox columns
        cols = [c for c in cols if c[0] not in SANDBOX_COLUMNS]
    note = HEADLINE_NOTE
    if "band" in summary:  # run --uncertainty: where each substrate's band comes from
        bands = dict(zip(summary.substrate, summary.band))
        note = (
            "bands [90%: the profile's refits, 5th-95th percentile with common random numbers, and the "
            "model's error, in quadrature]: " + "; ".join(f"{k}: {v}" for k, v in bands.items()) + ". " + note
        )
    sections = [Section(_title(result), cols, summary, note)]
    if scn.workload.tokens is not None:
        inf = scn.cluster.inference
        ms = summary.assign(tpot_p50=summary.tpot_p50 * 1e3, tpot_p99=summary.tpot_p99 * 1e3)
        for q in ("tpot_p50", "tpot_p99"):
            for end in ("_lo", "_hi"):
                if q + end in ms:
                    ms[q + end] = ms[q + end] * 1e3
        title = (f"serving engines: {inf.engines} x {inf.engine.gpus} GPU, routing {inf.routing}, "
                 f"prefix cache {'on' if inf.prefix_cache else 'off'}")  # fmt: skip
        if "serving_from" in summary:  # trajectory fidelity: say where these figures come from
            title += "; " + "; ".join(dict.fromkeys(summary.serving_from.astype(str)))
        sections.append(Section(title, SERVING, ms, SERVING_NOTE))
    if scn.training is not None:
        tr = scn.training
        cols = [c for c in TRAINING if not (scn.sandboxless and c[0] in SANDBOX_COLUMNS)]
        if tr.at_sync == "interrupt":
            cols.append(("resumed_samples_trained", "resumed", "{:,d}"))
        if scn.workload.tokens is not None and scn.workload.tokens.max_tokens:
            cols.append(("truncated_samples", "truncated", "{:,d}"))
        short = [
            f"{row.substrate} at {row.concurrency:d}: only {row.training_steps_done:,.0f} of "
            f"{tr.steps:,} steps trained: the trajectory budget ({scn.trajectories:,}) ran out; raise "
            "workload.trajectories or check the failure and filter rates."
            for _, row in summary[summary.training_steps_done < tr.steps].iterrows()
        ]
        sections.append(Section(loop_title(tr), cols, summary, " ".join([*short, TRAINING_NOTE])))
    return sections


def print_table(result: RunResult, console: Console | None = None) -> None:
    """The run's tables, fitted to the console (:mod:`simrollout.run.screen`), each with its note."""
    console = console or screen_console()
    for sec in run_sections(result):
        print_fitted(console, sec.heading, sec.columns, sec.rows)
        short, _, _ = sec.note.rpartition(TRAINING_NOTE)
        if short.strip():  # the steps a training run did not train, in red
            console.print(short.strip(), style="bold red")
        console.print(Text(sec.note if not short.strip() else TRAINING_NOTE, style="dim"))


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


def summary_json(result: RunResult) -> str:
    """``summary.json``: the version, the scenario as run, its fidelity and the summary rows."""
    meta = {
        "simrollout": __version__,
        "scenario": result.scenario.model_dump(mode="json", by_alias=True, exclude_none=True),
        "fidelity": result.fidelity,
        "fidelity_reason": result.fidelity_reason,
        "fidelity_warning": result.fidelity_warning,
        "python": platform.python_version(),
        "summary": json.loads(result.summary.to_json(orient="records")),
    }
    return json.dumps(meta, indent=2)


def summary_csv(result: RunResult) -> str:
    """``summary.csv``: one row per substrate and concurrency level."""
    return result.summary.to_csv(index=False)


def write_results(result: RunResult, out: Path, names: str | None = None) -> list[Path]:
    """Write summary.csv/json, cells.csv, the plots and report.html into ``out`` (per-trajectory
    records are streamed to ``out/trajectories/`` by the run itself); ``names``: training_steps.csv's
    columns as that framework logs them (:mod:`.step_names`)."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "summary.csv", out / "cells.csv", out / "summary.json"]
    written[0].write_text(summary_csv(result))
    result.cells.to_csv(written[1], index=False)
    written[2].write_text(summary_json(result))
    if not result.steps.empty:
        written.append(out / "training_steps.csv")
        from .step_names import renamed

        renamed(result.steps, names).to_csv(written[-1], index=False)
    plots = plot_run(result, out)
    return [*written, *plots, html_report.write(run_report(result, plots), out / "report.html")]


def run_report(result: RunResult, images: list[Path]) -> html_report.Report:
    """The run's report.html: what ran and from which inputs, its tables, its plots."""
    scn = result.scenario
    facts = [
        ("command", f"simrollout run {scn._source}"),
        ("ran", _count(result) + f" on {len(scn.substrates)} substrate(s) at concurrency "
         + ", ".join(f"{c:,d}" for c in scn.cluster.levels)),
        ("fidelity", f"{result.fidelity} ({result.fidelity_reason})"),
        *([("fidelity warning", result.fidelity_warning)] if result.fidelity_warning else []),
        ("replications", str(scn.replications)),
        *html_report.input_facts(scn),
    ]  # fmt: skip
    return html_report.Report(f"simrollout run: {scn.name}", facts, run_sections(result), [], images)


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
