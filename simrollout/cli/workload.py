"""``simrollout workload FORMAT PATH...``: characterise a trace, fit a workload section, plot."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer

from ..traces.formats import spoken
from .entry import app

# Below this many trajectories a fit is a sketch: steps per trajectory is an exact histogram of
# that many values, so its p90 rests on the longest two or three; and the KS test at 5% accepts
# any family within 0.24 of the sample's CDF (1.36 / sqrt(30)), so "kept" says little.
MIN_TRAJECTORIES = 30


def small_sample(n: int) -> str | None:
    """The warning for a fit from ``n`` trajectories, fewer than :data:`MIN_TRAJECTORIES`; else None."""
    if n >= MIN_TRAJECTORIES:
        return None
    return (
        f"warning: fitted from {n} trajector{'y' if n == 1 else 'ies'}, fewer than {MIN_TRAJECTORIES}: "
        f"steps per trajectory is a histogram of {n} values and the tails of every fit rest on a "
        "handful of points; use the section as a sketch, or give more traces"
    )


def _fit_line(name: str, r: dict) -> str:
    if r.get("form") == "histogram":
        fam = r.get("family") or {}
        extra = f"; best family {fam['family']} (KS {fam['ks']:.3f})" if fam.get("family") else ""
        return f"  {name:22s} exact histogram of {r['n']:,} values{extra}"
    if r.get("form") == "constant":
        return f"  {name:22s} constant ({r['n']:,} equal values)"
    err = ", ".join(f"{k} {v:+.1%}" for k, v in r["family_rel_error"].items())
    chosen = "kept" if r["form"] == "family" else "quantile curve kept instead"
    return f"  {name:22s} {r['family']:20s} KS {r['ks']:.3f} (p {r['ks_pvalue']:.2g}); {err}: {chosen}"


@app.command()
def workload(
    fmt: str = typer.Argument(..., metavar="FORMAT", help=f"{spoken()}."),
    paths: list[Path] = typer.Argument(
        ..., metavar="PATH...", help="Trace files (JSONL, JSON; .gz read as such)."
    ),
    out: Path = typer.Option(Path("workload.yaml"), "--out", "-o", help="Workload section to write."),
    on_bad: str = typer.Option(
        "refuse", help="refuse: stop at the first bad row; skip: skip it and count it."
    ),
    tool_map: str = typer.Option(
        "",
        help="Tool name -> category overrides: name=category,... (shell, read, "
        "edit, search, test, web, other; default: none, TraceLab's tool sets decide).",
    ),
    overlap: str = typer.Option(
        "trace", help="A step's overlapping tool calls: trace (as it shows), max or sum."
    ),
    human: str = typer.Option("exclude", help="Human-paced gaps: exclude (reported apart) or include."),
    tool_latency: float | None = typer.Option(
        None,
        help="Seconds each tool call takes where the trace records none (SWE-agent before 0.7; "
        "verifiers' per-rollout times, which hold model and tool time together). Default: none "
        "(SWE-agent before 0.7 refused; verifiers' calls 0 s).",
    ),
    plot: Path | None = typer.Option(None, help="Plot file (PNG); default beside -o."),
) -> None:
    """Characterise agent traces in TraceLab's terms, fit a workload section (each quantity by
    the calibration's fitting, with how well it fits) and plot them; a scenario uses the section
    as ``workload: {import: PATH}``."""
    import yaml

    from ..errors import InputError
    from ..outputs import atomic_file
    from ..traces import read_trace
    from ..traces.categories import parse_map
    from ..traces.characterise import characterise, summary_lines
    from ..traces.characterise import plot as draw
    from ..traces.fit import fit_workload

    if overlap not in ("trace", "max", "sum"):
        raise InputError(f"--overlap: expected trace, max or sum, got '{overlap}'.")
    if out.is_dir():
        raise InputError(f"-o {out}: is a directory; expected the workload YAML file to write.")
    ts = read_trace(fmt, paths, on_bad, parse_map(tool_map), human, tool_latency)
    ch = characterise(ts, overlap)
    section, fits = fit_workload(ts, overlap)
    doc = {
        "version": 1,
        "name": out.stem,
        "provenance": {
            "format": fmt,
            "files": [p.name for p in paths],
            "trajectories": len(ts.trajectories),
            "steps": ts.steps,
            "tool_calls": ch["tool_calls"],
            "dates": ts.dates(),
            "skipped": ts.problems.as_dict(),
            "overlap": overlap,
            "human_gaps": human,
            "tool_latency": tool_latency,
            "tool_map": parse_map(tool_map),
            "notes": ts.notes,
            "written": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
        },
        **section,
        "fits": fits,
        "characterisation": ch,
    }
    with atomic_file(out) as tmp:
        tmp.write_text(yaml.safe_dump(doc, sort_keys=False, width=100))
    png = draw(ts, plot or out.with_suffix(".png"), overlap)
    for line in summary_lines(ch):
        typer.echo(line)
    if ts.problems.skipped:
        typer.echo("skipped: " + ", ".join(f"{c} {n}" for c, n in sorted(ts.problems.skipped.items())))
        for c, ex in sorted(ts.problems.examples.items()):
            typer.echo(f"  first {c}: {ex}")
    for note in ts.notes:
        typer.echo(f"note: {note}")
    typer.echo("fits:")
    for name, r in fits.items():
        typer.echo(_fit_line(name, r))
    typer.echo(f"wrote {out} and {png}")
    warning = small_sample(len(ts.trajectories))
    if warning:
        from .options import err

        err.print(warning, highlight=False, soft_wrap=True)
