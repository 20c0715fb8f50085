"""``simrollout sweep SCENARIO --set path=v1,v2``: a grid of runs, one row per point."""

from __future__ import annotations

from pathlib import Path

import typer

from ..outputs import atomic_folder
from .entry import _ticker, app
from .options import NO_CACHE_HELP, _cache, _out_folder, _progress_bar


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
) -> None:
    """Run a grid over any scenario fields; one row per cell, plots against concurrency."""
    from ..run.plots import plot_sweep
    from ..scenario import load_scenario
    from ..whatif.sweeps import parse_set
    from ..whatif.sweeps import sweep as run_sweep

    _cache(no_cache)
    scn = load_scenario(scenario)
    sets = dict(parse_set(s) for s in set_)
    out = out or Path("results") / f"{scn.name}-sweep"
    _out_folder(out)
    with _progress_bar() as bar:
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
        paths = plot_sweep(df, tmp)
    cols = [
        *sets,
        "substrate",
        "concurrency",
        "training_steps_per_day",
        "staleness_max",
        "trajectories_per_hour",
        "makespan_hours",
        "duration_p99",
        "worker_hours",
        "cost_usd",
    ]
    cols = list(dict.fromkeys(c for c in cols if c in df.columns))
    shown = df[cols].copy()
    if uncertainty:  # the band beside each metric that has one: "point [lo-hi]"
        for c in cols:
            if f"{c}_lo" in df:
                shown[c] = [f"{v:,.2f}" + (f" [{lo:,.2f}-{hi:,.2f}]" if lo == lo and hi == hi else "")
                            for v, lo, hi in zip(df[c], df[f"{c}_lo"], df[f"{c}_hi"])]  # fmt: skip
    typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    if uncertainty:
        bands = "; ".join(f"{k}: {v}" for k, v in dict(zip(df.substrate, df.band)).items())
        typer.echo(f"bands [90%: the profiles' refits and the model's error, in quadrature]: {bands}")
    typer.echo(f"wrote sweep.csv, sweep.parquet and {len(paths)} plots to {out}/")
