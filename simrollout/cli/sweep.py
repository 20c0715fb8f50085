"""``simrollout sweep SCENARIO --set path=v1,v2``: a grid of runs, one row per point."""

from __future__ import annotations

from pathlib import Path

import typer

from ..outputs import atomic_folder
from .entry import _ticker, app
from .options import NO_CACHE_HELP, _cache, _out_folder, _progress_bar
from .output_mode import FORMAT_HELP, QUIET_HELP, output_mode


@app.command()
def sweep(
    scenario: Path = typer.Argument(..., help="Scenario YAML (version: 1)."),
    set_: list[str] = typer.Option(
        ..., "--set", help="PATH=V1,V2,... (repeatable), e.g. cluster.concurrency=64,256."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Results folder (default: results/<name>-sweep)."
    ),
    executor: str = typer.Option("local", help="local (processes), serial, or ray."),
    address: str | None = typer.Option(
        None, help="Ray cluster address (with --executor ray; default: start a local Ray)."
    ),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Local processes (default: all cores)."),
    no_cache: bool = typer.Option(False, "--no-cache", help=NO_CACHE_HELP),
    uncertainty: bool = typer.Option(
        False,
        "--uncertainty",
        help="Also re-simulate over the profiles' bootstrap refits (common random numbers): "
        "<metric>_lo/_hi (5th/95th percentile) beside the headline metrics.",
    ),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Run a grid over any scenario fields; one row per cell, plots against the swept variable."""
    from ..run import html_report
    from ..run.screen import print_fitted, screen_console
    from ..run.sweep_output import bands_note, sweep_columns, sweep_report
    from ..run.sweep_plots import plot_sweep
    from ..scenario import load_scenario
    from ..whatif.sweeps import parse_set
    from ..whatif.sweeps import sweep as run_sweep

    mode = output_mode(fmt, quiet)
    _cache(no_cache)
    scn = load_scenario(scenario)
    sets = dict(parse_set(s) for s in set_)
    out = out or Path("results") / f"{scn.name}-sweep"
    _out_folder(out)
    with _progress_bar(quiet) as bar:
        task = bar.add_task("sweep", total=1.0)
        df = run_sweep(
            scn,
            sets,
            executor=executor,
            jobs=jobs,
            address=address,
            progress=_ticker(bar, task),
        )
        if uncertainty:
            from ..whatif.uncertainty import sweep_with_bands

            df = sweep_with_bands(scn, sets, df, executor, jobs, address)
    with atomic_folder(out) as tmp:
        df.to_csv(tmp / "sweep.csv", index=False)
        df.to_parquet(tmp / "sweep.parquet", index=False)
        paths = plot_sweep(df, tmp, list(sets))
        html_report.write(sweep_report(df, sets, scn, paths), tmp / "report.html")
    if mode.tables:
        columns, keys = sweep_columns(df, list(sets))
        console = screen_console()
        print_fitted(console, None, columns, df, keys)
        if bands_note(df):
            console.print(bands_note(df))
    mode.data(df.to_json(orient="records", indent=2) if fmt == "json" else df.to_csv(index=False))
    mode.say(f"wrote sweep.csv, sweep.parquet, report.html and {len(paths)} plots to {out}/")
