"""``simrollout run SCENARIO``: simulate a scenario and write its results folder."""

from __future__ import annotations

from pathlib import Path

import typer

from ..outputs import atomic_folder
from .entry import _ticker, app
from .options import NO_CACHE_HELP, _cache, _out_folder, _progress_bar, err
from .output_mode import FORMAT_HELP, QUIET_HELP, output_mode


@app.command()
def run(
    scenario: Path = typer.Argument(..., help="Scenario YAML (version: 1)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Results folder (default: results/<name>)."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Processes (default: all cores)."),
    no_cache: bool = typer.Option(False, "--no-cache", help=NO_CACHE_HELP),
    seed: int | None = typer.Option(None, help="The seed (default: the scenario's)."),
    fidelity: str | None = typer.Option(
        None, help="Fidelity: step, trajectory, compiled or auto (default: the scenario's, else auto)."
    ),
    no_records: bool = typer.Option(False, "--no-records", help="Skip the per-trajectory Parquet files."),
    executor: str = typer.Option("local", help="local (processes), serial, or ray."),
    address: str | None = typer.Option(
        None, help="Ray cluster address (with --executor ray; default: start a local Ray)."
    ),
    timeline: Path | None = typer.Option(
        None,
        help="Also write a Chrome trace (open in ui.perfetto.dev) of the "
        "first cell to this file (default: none).",
    ),
    explain: bool = typer.Option(False, "--explain", help="Also print what every column of the table means."),
    set_: list[str] = typer.Option(
        [],
        "--set",
        help="PATH=VALUE (repeatable): set a field of the scenario file before it is read, the value as "
        "YAML, e.g. training.mode=async or 'workload={import: profile.yaml}' (default: none).",
    ),
    names: str | None = typer.Option(
        None,
        "--names",
        help="training_steps.csv's columns as a framework logs them: verl, areal, slime, skyrl, "
        "prime-rl (default: the table's own names).",
    ),
    uncertainty: bool = typer.Option(
        False,
        "--uncertainty",
        help="Also re-simulate over the profiles' bootstrap refits (common random numbers), the "
        "engine's and a training profile's: <metric>_lo/_hi (the refits' 5th/95th percentile widened by "
        "the model's own error) beside the headline metrics.",
    ),
    model_error: Path | None = typer.Option(
        None,
        "--model-error",
        help="With --uncertainty: the model-error term to widen the bands by, a JSON file as "
        "simrollout/whatif/model_error.json (default: that shipped term).",
    ),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Simulate a scenario and print worker-hours, cost, throughput and tails per substrate."""

    from ..scenario.overrides import load_with_sets

    mode = output_mode(fmt, quiet)  # a bad --format refused before anything is read
    term = None
    if model_error is not None:
        from ..whatif.model_error_term import read_term

        term = read_term(model_error)
    _cache(no_cache)
    _, scn = load_with_sets(scenario, set_)  # first: bad input refused before the engines load
    from ..api import override
    from ..run import stages
    from ..run.executors import run_scenario
    from ..run.report import print_table, summary_csv, summary_json, write_results
    from ..run.step_names import check

    check(names)
    over = {k: v for k, v in {"seed": seed, "fidelity": fidelity}.items() if v is not None}
    if over:
        scn = override(scn, over)
    out = out or Path("results") / scn.name
    _out_folder(out)
    from ..sim.route import unbacked

    if unbacked(scn) and not quiet:
        err.print(f"warning: {unbacked(scn)}", highlight=False, soft_wrap=True)
    if timeline is not None:
        from ..run.timeline import check

        check(scn)
    with atomic_folder(out) as tmp, _progress_bar(quiet) as bar:
        task = bar.add_task("run", total=1.0)
        result = run_scenario(
            scn,
            jobs=jobs,
            keep_records=False,
            records_dir=None if no_records else tmp / "trajectories",
            progress=_ticker(bar, task),
            executor=executor,
            address=address,
        )
        if uncertainty:
            from ..whatif.uncertainty import with_bands

            bar.update(task, description="bands")
            result = with_bands(scn, result, jobs, executor, None, address, term if term else True)
        stages.enter("outputs")
        paths = write_results(result, tmp, names)
    if mode.tables:
        print_table(result)
    if explain and mode.tables:
        from ..run.report import print_explain

        print_explain()
    mode.data(summary_json(result) if fmt == "json" else summary_csv(result))
    extra = "" if no_records else " and per-trajectory Parquet in trajectories/"
    mode.say(f"wrote {len(paths)} files{extra} to {out}/ (report.html: tables, plots and inputs in one page)")
    if timeline is not None:
        from ..run.timeline import write_timeline

        n = write_timeline(scn, timeline)
        mode.say(f"wrote a timeline of {n:,} events to {timeline} (open it in ui.perfetto.dev)")
