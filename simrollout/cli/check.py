"""``simrollout check SCENARIO...``: validate scenarios as ``run`` would, without simulating."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from .entry import app
from .options import err


def describe(scn) -> str:
    """One line saying what ``run`` would simulate for ``scn`` and at which fidelity, and why."""
    from ..sim.route import fidelity_choice

    fid, why = fidelity_choice(scn)
    subs = ", ".join(s.name for s in scn.substrates)
    levels = ",".join(str(c) for c in scn.cluster.levels)
    reps = f", {scn.replications} replications" if scn.replications > 1 else ""
    loop = f", training loop {scn.training.mode}" if scn.training is not None else ""
    engines = ""
    inf = scn.cluster.inference
    if inf is not None and scn.workload.tokens is not None:
        engines = f", {inf.engines} serving engines"
    n = len(scn.substrates)
    return (
        f"{scn.name}: {scn.trajectories:,} trajectories x {scn.workload.steps.mean():,.1f} steps (mean) on "
        f"{n} substrate{'s' if n > 1 else ''} ({subs}) at concurrency {levels}{reps}{engines}{loop}; "
        f"fidelity {fid} ({why})"
    )


def check_one(path: Path):
    """The scenario at ``path`` checked as ``run`` checks it before simulating: the schema, every
    file it imports (profiles, engines, workloads, traces) and their contents, and whether its
    workload fits in memory. Returns the scenario; raises InputError."""
    from ..scenario import load_scenario
    from ..sim.workload_draws import check_memory

    scn = load_scenario(path)
    check_memory(scn)
    return scn


@app.command()
def check(
    scenarios: list[Path] = typer.Argument(..., help="Scenario YAML files (version: 1)."),
) -> None:
    """Validate scenarios and every file they import, as 'run' does, without simulating: one line per
    file saying what it would run, or the error (exit code 2)."""
    from rich.markup import escape

    from ..redact import scrub
    from ..sim.route import unbacked

    failed = 0
    for path in scenarios:
        try:
            scn = check_one(path)
        except InputError as exc:
            failed += 1
            err.print(f"[red]error:[/red] {escape(scrub(str(exc)))}", highlight=False, soft_wrap=True)
            continue
        typer.echo(f"OK {path}: {describe(scn)}")
        if unbacked(scn):
            err.print(f"warning: {unbacked(scn)}", highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(2)
