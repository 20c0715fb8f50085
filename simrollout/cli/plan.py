"""``simrollout plan SCENARIO``: the cheapest configuration that meets a deadline, throughput or
budget (a training run's steps per day too)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from ..outputs import atomic_file
from .entry import _ticker, app
from .options import NO_CACHE_HELP, _cache, _progress_bar
from .output_mode import FORMAT_HELP, QUIET_HELP, OutputMode, output_mode


@app.command()
def plan(
    scenario: Path = typer.Argument(..., help="Scenario YAML (version: 1)."),
    deadline: str | None = typer.Option(
        None, help="Finish within, e.g. 24h, 90m, 2d (default: no deadline)."
    ),
    throughput: float | None = typer.Option(
        None, help="At least this many trajectories per hour (default: no throughput target)."
    ),
    steps_per_day: float | None = typer.Option(
        None,
        "--steps-per-day",
        help="At least this many training steps per day (a scenario "
        "with training:; default: no such target).",
    ),
    budget: float | None = typer.Option(
        None, help="At most this many US dollars (then: fastest within; default: no budget)."
    ),
    concurrency: str | None = typer.Option(None, help="Levels to search (default 64..16384, powers of 2)."),
    warm_pool: str | None = typer.Option(
        None, "--warm-pool", help="Warm-pool sizes to search, sandboxes (default: the scenario's)."
    ),
    hosts: str | None = typer.Option(
        None, help="Host counts to search, self-managed fleets (default: the scenario's)."
    ),
    engines: str | None = typer.Option(
        None, help="Inference engine counts to search, e.g. 8,16,32 (default: the scenario's)."
    ),
    sample: int = typer.Option(
        20_000, help="Trajectories simulated per configuration (projected to the full run)."
    ),
    max_failed: float = typer.Option(
        0.001, "--max-failed", help="Share of trajectories that may time out or fail (0.001 = 0.1%)."
    ),
    check: int | None = typer.Option(
        None,
        help="Trajectories per replication of the check of the top candidates (default: the "
        "full run, at most 10 x --sample; 0 skips it).",
    ),  # fmt: skip
    sensitivity: float | None = typer.Option(
        None,
        help="Re-plan with the substrates' lifecycle latencies scaled by 1 -/+ this share, e.g. 0.2 "
        "(default: no re-plan).",
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Write the evaluated table (CSV) here (default: not written)."
    ),
    executor: str = typer.Option("local", help="local (processes), serial, or ray."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Local processes (default: all cores)."),
    no_cache: bool = typer.Option(False, "--no-cache", help=NO_CACHE_HELP),
    uncertainty: bool = typer.Option(
        False,
        "--uncertainty",
        help="Also re-simulate the top candidates over the profiles' bootstrap refits and say how "
        "often the recommendation stays the winner.",
    ),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Find the cheapest substrate, concurrency, warm pool and host count that meets a target,
    counting only finished work, and check the winner at a larger size."""
    from ..scenario import load_scenario
    from ..whatif.planner import Goal, parse_duration
    from ..whatif.planner import plan as run_plan

    _cache(no_cache)

    def ints(name, text, least=0):
        if text is None:
            return None
        try:
            vals = [int(v) for v in text.split(",")]
        except ValueError:
            raise InputError(f"--{name}: expected integers like 64,256, got '{text}'.") from None
        if any(v < least for v in vals):
            raise InputError(f"--{name}: expected integers of at least {least}, got '{text}'.")
        return vals

    mode = output_mode(fmt, quiet)
    scn = load_scenario(scenario)
    shown = Shown(mode, f"simrollout plan {scenario}", scn)
    if out is not None:
        from ..outputs import writable_file

        writable_file(out, "--out")
    for name, v in (("throughput", throughput), ("budget", budget)):
        if v is not None and not (v > 0 and v < float("inf")):
            raise InputError(f"plan {scenario}: --{name} must be a positive number, got {v}.")
    if sample < 1:
        raise InputError(f"plan {scenario}: --sample must be at least 1, got {sample}.")
    if not 0 <= max_failed < 1:
        raise InputError(f"plan {scenario}: --max-failed must be a share in [0, 1), got {max_failed}.")
    if sensitivity is not None and not 0 < sensitivity < 1:
        raise InputError(f"plan {scenario}: --sensitivity must be a share in (0, 1), got {sensitivity}.")
    if check is not None and check < 0:
        raise InputError(f"plan {scenario}: --check must be >= 0, got {check}.")
    if steps_per_day is not None and not (0 < steps_per_day < float("inf")):
        raise InputError(f"plan {scenario}: --steps-per-day must be a positive number, got {steps_per_day}.")
    if uncertainty and (scn.training is not None or steps_per_day is not None):
        raise InputError(
            f"plan {scenario}: --uncertainty is not available for a scenario with a training section "
            "yet; run its recommendation with 'simrollout run --uncertainty' for its bands."
        )
    if scn.training is not None or steps_per_day is not None:
        _plan_training(scn, deadline, budget, throughput, steps_per_day, ints("concurrency", concurrency, 1),
                       ints("warm-pool", warm_pool), ints("hosts", hosts, 1), check != 0, max_failed,
                       executor, jobs, out, shown)  # fmt: skip
        return
    target = Goal(parse_duration(deadline) if deadline else None, throughput, budget)
    with _progress_bar(quiet) as bar:
        task = bar.add_task("plan", total=1.0)
        result = run_plan(
            scn,
            target,
            ints("concurrency", concurrency, 1),
            ints("warm-pool", warm_pool),
            ints("hosts", hosts, 1),
            sample=sample,
            executor=executor,
            jobs=jobs,
            progress=_ticker(bar, task),
            max_failed=max_failed,
            check=check,
            sensitivity=sensitivity,
            engines=ints("engines", engines, 1),
        )
    cols = ["substrate", "concurrency", "warm_pool", "hosts", "makespan_s", "cost_usd", "worker_hours",
            "completed", "timeouts", "failed", "binding"]  # fmt: skip
    if engines:
        cols.insert(4, "engines")
    if len(result.table):
        table = result.table[cols].assign(makespan_h=lambda d: d.makespan_s / 3600).drop(columns="makespan_s")
        t = result.table
        table["lost"] = [f"{x:.2%}" + ("" if ok else " (over budget)")
                         for x, ok in zip(t.lost_fraction, t.within_budget)]  # fmt: skip
        for c in ("completed", "timeouts", "failed"):
            table[c] = table[c].round().astype(int)
        shown.table("every configuration evaluated", table)
    if result.skipped is not None and len(result.skipped):
        floors = result.skipped.assign(makespan_floor_h=lambda d: d.makespan_floor_s / 3600)
        floors = floors[["substrate", "concurrency", "warm_pool", "hosts", "makespan_floor_h"]]
        shown.table(
            "not simulated (out of reach: the makespan floor of their trajectories' own work)", floors
        )
    if result.check is not None and len(result.check):
        chk = result.check.assign(
            makespan_h=lambda d: d.makespan_s / 3600, makespan_h_ci95=lambda d: d.makespan_s_ci95 / 3600
        )[["substrate", "concurrency", "warm_pool", "hosts", "makespan_h", "makespan_h_ci95", "cost_usd",
           "cost_usd_ci95", "lost_fraction", "meets"]]  # fmt: skip
        chk = chk.assign(lost=[f"{x:.3%}" for x in chk.lost_fraction]).drop(columns="lost_fraction")
        shown.table(f"check of the top candidates ({int(result.check.checked.iloc[0]):,} trajectories x "
                    f"{int(result.check.replications.iloc[0])} replications, 95% CIs)", chk, 2)  # fmt: skip
    stability = None
    if uncertainty:
        from ..whatif.plan_stability import describe_stability, plan_stability

        stability = describe_stability(plan_stability(scn, result, executor, jobs))
    _conclude_plan(result, out, shown, stability)


class Shown:
    """A plan's tables: printed to fit the screen (``--format table``), and kept for its report."""

    def __init__(self, mode: OutputMode, title: str, scn):
        self.mode, self.title, self.scn, self.sections = mode, title, scn, []

    def table(self, heading: str, df, digits: int = 1) -> None:
        from ..run.html_report import Section
        from ..run.screen import frame_columns, print_fitted, screen_console

        section = Section(heading, frame_columns(df, digits), df, keys=min(2, len(df.columns)))
        self.sections.append(section)
        if self.mode.tables:
            print_fitted(screen_console(), heading, section.columns, df, section.keys)


def _conclude_plan(result, out: Path | None, shown: Shown, extra: str | None = None) -> None:
    """A plan's last words: its description, the table to ``out`` (and its report beside it, with
    .html), the table on stdout with --format json|csv, exit 1 when nothing fits."""
    text = [result.describe(), *([extra] if extra else [])]
    if shown.mode.tables:
        from ..run.screen import screen_console

        screen_console().print("\n".join(text), markup=False)
    frame = result.frame()
    shown.mode.data(frame.to_json(orient="records", indent=2) if shown.mode.format == "json"
                    else frame.to_csv(index=False))  # fmt: skip
    if out is not None:
        from ..run import html_report

        with atomic_file(out) as tmp:
            frame.to_csv(tmp, index=False)
        facts = [("command", shown.title), *html_report.input_facts(shown.scn)]
        report = html_report.Report(shown.title, facts, shown.sections, text)
        with atomic_file(out.with_suffix(".html")) as tmp:
            html_report.write(report, tmp)
        shown.mode.say(f"wrote {out} and its report {out.with_suffix('.html')}")
    if result.best is None:
        raise typer.Exit(1)


def _plan_training(
    scn,
    deadline,
    budget,
    throughput,
    steps_per_day,
    levels,
    pools,
    hosts,
    check,
    max_failed,
    executor,
    jobs,
    out,
    shown,
) -> None:
    """``plan`` for a scenario with a training section: steps per day, a deadline or a budget."""
    from ..whatif.planner import Goal, parse_duration
    from ..whatif.training_plan import plan_training

    given = [x is not None for x in (deadline, budget, throughput, steps_per_day)]
    if sum(given) != 1:
        raise InputError("plan: give exactly one of --steps-per-day, --deadline or --budget.")
    target = None
    if steps_per_day is None:
        target = Goal(parse_duration(deadline) if deadline else None, throughput, budget)
    with _progress_bar(shown.mode.quiet) as bar:
        task = bar.add_task("plan", total=1.0)
        result = plan_training(
            scn, target, steps_per_day, levels, pools, hosts, executor=executor, jobs=jobs,
            progress=_ticker(bar, task),
            max_failed=max_failed, check=check,
        )  # fmt: skip
    t = result.table.assign(
        time_h=lambda d: d.time_s / 3600, masked=lambda d: [f"{x:.2%}" for x in d.masked_fraction]
    )
    t["masked"] = [m + ("" if ok else " (over budget)") for m, ok in zip(t.masked, t.within_budget)]
    cols = ["substrate", "concurrency", "warm_pool", "hosts", "steps_per_day", "time_h", "cost_usd",
            "cost_per_step", "masked", "bound"]  # fmt: skip
    shown.table("every configuration evaluated", t[cols])
    if result.check is not None and len(result.check):
        chk = result.check[["substrate", "concurrency", "warm_pool", "hosts", "steps_per_day",
                            "steps_per_day_ci95", "cost_usd", "cost_usd_ci95", "meets"]]  # fmt: skip
        shown.table(f"check of the top candidates ({int(result.check.replications.iloc[0])} replications, "
                    "95% CIs)", chk)  # fmt: skip
    _conclude_plan(result, out, shown)
