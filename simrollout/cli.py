"""The ``simrollout`` command: one verb per pipeline stage."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from .errors import InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Simulate coding-agent RL rollouts: probe -> calibrate -> run -> sweep/plan -> validate.",
)
err = Console(stderr=True)


@app.callback()
def _root() -> None:
    """Simulate coding-agent RL rollouts: probe -> calibrate -> run -> sweep/plan -> validate."""


@app.command()
def run(
    scenario: Path = typer.Argument(..., help="Scenario YAML (version: 1)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Results folder (default: results/<name>)."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Processes (default: all cores)."),
    seed: int | None = typer.Option(None, help="Override the scenario's seed."),
    fidelity: str | None = typer.Option(None, help="Override fidelity: step, trajectory or auto."),
    no_records: bool = typer.Option(False, "--no-records", help="Skip per-trajectory Parquet and plots."),
) -> None:
    """Simulate a scenario and print worker-hours, cost, throughput and tails per substrate."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .report import print_table, write_results
    from .run import run_scenario
    from .scenario import load_scenario, scenario_from_dict

    scn = load_scenario(scenario)
    over = {k: v for k, v in {"seed": seed, "fidelity": fidelity}.items() if v is not None}
    if over:
        scn = scenario_from_dict({**scn.model_dump(by_alias=True, exclude_none=True), **over}, scenario)
    out = out or Path("results") / scn.name
    with Progress(
        TextColumn("[bold]simulating"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as bar:
        task = bar.add_task("run", total=1.0)
        result = run_scenario(
            scn,
            jobs=jobs,
            keep_records=not no_records,
            progress=lambda done, total: bar.update(task, completed=done / total),
        )
    print_table(result)
    paths = write_results(result, out)
    typer.echo(f"wrote {len(paths)} files to {out}/")


def main() -> None:
    """Entry point: input errors become one paragraph on stderr and exit code 2."""
    try:
        app()
    except InputError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
