"""``simrollout cleanup BACKEND``: remove sandboxes that earlier probes left behind;
``simrollout cleanup --results DIR``: remove the partial output of runs that were killed."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError, SubstrateError
from .entry import app


@app.command()
def cleanup(
    backend: str | None = typer.Argument(
        None, help="process, docker, kubernetes, daytona, e2b, modal or ec2 (default: none, with --results)."
    ),
    results: Path | None = typer.Option(
        None,
        "--results",
        help="Remove the partial output (.NAME.partial-PID) of killed runs in this folder and every "
        "folder under it; a running command's is kept (default: none).",
    ),
    older_than: str = typer.Option(
        "6h", help="Remove sandboxes older than this whose owner cannot be checked."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="List only."),
) -> None:
    """List the project's sandboxes left by probes and remove the stale ones (owner gone, or old);
    with --results, the partial output that killed runs left in a results folder."""
    if results is not None:
        _results(results, dry_run)
    if backend is None:
        if results is None:
            raise InputError("cleanup: name a BACKEND (sandboxes) or --results DIR (partial run output).")
        return
    from ..calibration.backends import get_backend
    from ..calibration.cleanup import sweep_stale
    from ..whatif.planner import parse_duration

    try:
        max_age = parse_duration(older_than)
    except InputError:
        raise InputError(
            f"--older-than: expected a duration like 6h, 30m or 3600s, got '{older_than}'."
        ) from None
    be = get_backend(backend)
    try:
        found, stale = sweep_stale(be, max_age, dry_run)
    except Exception as exc:  # the engine stopped answering mid-way
        raise SubstrateError(
            f"cleanup {backend}: the engine did not answer ({type(exc).__name__}: {exc}); what was "
            "removed before it stopped is gone, the rest is left. Run the cleanup again once it answers."
        ) from None
    gone = {s.id for s in stale}
    for s in found:
        alive = s.owner_alive()
        state = "owner running" if alive else "owner gone" if alive is False else "owner unknown"
        verb = ("would remove" if dry_run else "removed") if s.id in gone else "kept"
        typer.echo(f"{verb:12s} {s.id[:24]:24s} run {s.run:12s} age {s.age() / 60:8.1f} min  {state}")
    typer.echo(f"{len(found)} labelled, {len(stale)} stale {'(dry run)' if dry_run else 'removed'}")


def _results(root: Path, dry_run: bool) -> None:
    from ..outputs import sweep_tree

    if not root.is_dir():
        raise InputError(f"--results {root}: not a folder; expected a results folder, e.g. results.")
    found = sweep_tree(root, dry_run)
    for p in found:
        typer.echo(f"{'would remove' if dry_run else 'removed':12s} {p}")
    typer.echo(f"{len(found)} partial outputs of killed runs {'(dry run)' if dry_run else 'removed'}")
