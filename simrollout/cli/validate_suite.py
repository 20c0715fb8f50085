"""``simrollout validate suite``: the interleaved held-out suite (simrollout.validation.suite): its
options checked, its target built, the suite run (or refitted) and its record written."""

from __future__ import annotations

import dataclasses
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import typer

from ..errors import InputError
from .options import _json_option
from .validate import validate_app


def _ints(text: str, option: str) -> list[int]:
    try:
        out = [int(v) for v in text.split(",")]
        assert out and all(v > 0 for v in out)
    except (ValueError, AssertionError):
        raise InputError(f"{option}: expected positive integers like 8,16,32 (got '{text}').") from None
    return out


def _pick(known: tuple, names: str | None, option: str) -> list:
    if names is None:
        return list(known)
    by_name = {w.name: w for w in known}
    out = []
    for n in names.split(","):
        if n not in by_name:
            raise InputError(f"{option}: unknown workload '{n}'; expected one of {sorted(by_name)}.")
        out.append(by_name[n])
    return out


def run_suite_command(
    record: Path,
    engine: str | None,
    model: str,
    extra: dict,
    levels: str | None,
    workloads: str | None,
    repeats: int,
    max_repeats: int,
    bootstrap: int | None,
    seed: int,
    image: str,
    budget: float | None = None,
    refit: bool = False,
    echo: Callable[[str], None] = print,
) -> None:
    from ..validation import suite_report
    from ..validation.suite import DEFAULT_BOOTSTRAP, HeldOutCell, SuitePlan, rows_table, run_suite

    if repeats < 3:
        raise InputError(
            f"--repeats: expected at least 3 real repeats per cell (a t-interval over "
            f"fewer says little), got {repeats}."
        )
    if max_repeats < repeats:
        raise InputError(f"--max-repeats: expected at least --repeats ({repeats}), got {max_repeats}.")
    if bootstrap is not None and bootstrap < 0:
        raise InputError(f"--bootstrap: expected a count of refits (0 or more), got {bootstrap}.")
    if budget is not None and not budget > 0:
        raise InputError(f"--budget: expected minutes > 0, got {budget}.")
    if record.exists() and not record.is_dir():
        raise InputError(f"--record {record}: is a file; expected the validation folder.")
    if engine:
        from ..validation.suite_engine import (
            ENGINE_LEVELS,
            ENGINE_WORKLOADS,
            HELD_OUT,
            EngineTarget,
            engine_notes,
        )

        known = ENGINE_WORKLOADS
        chosen, lv = _pick(known, workloads or ",".join(HELD_OUT), "--workloads"), ENGINE_LEVELS
        target = EngineTarget(engine, model, extra, record / "engine", seed)
        notes = engine_notes
    else:
        from ..calibration.backends import get_backend
        from ..validation.suite import DOCKER_HELD_OUT, DOCKER_LEVELS, DOCKER_WORKLOADS
        from ..validation.suite_docker import DockerTarget, docker_notes

        known = DOCKER_WORKLOADS
        chosen, lv = _pick(known, workloads or ",".join(DOCKER_HELD_OUT), "--workloads"), DOCKER_LEVELS
        target = DockerTarget(get_backend("docker"), record / "docker", image, seed)
        notes = docker_notes
    lv = _ints(levels, "--levels") if levels else list(lv)
    if refit:
        if workloads or levels:
            raise InputError("--refit fits every recorded cell again; it takes no --workloads or --levels.")
        return _refit(record, target, known, bootstrap, notes, echo)
    plan = SuitePlan(
        [HeldOutCell(w, v) for w in chosen for v in lv],
        repeats,
        max_repeats,
        seed,
        DEFAULT_BOOTSTRAP if bootstrap is None else bootstrap,
        budget=None if budget is None else 60 * budget,
    )
    t0 = time.time()

    def log(msg: str) -> None:
        echo(f"[{time.time() - t0:6.0f} s] {msg}")

    results = run_suite(target, plan, log)
    rows = rows_table(results)
    command = (
        "simrollout validate suite " + " ".join(shlex.quote(a) for a in sys.argv[3:])
        if len(sys.argv) > 2 and sys.argv[1:3] == ["validate", "suite"]
        else "simrollout validate suite"
    )
    entry = suite_report.suite_entry(
        target.name,
        rows,
        command.strip(),
        target.machine(),
        {k: v for k, v in dataclasses.asdict(plan).items() if k != "cells"},
        [{"name": w.name, "description": w.describe(), **dataclasses.asdict(w)} for w in chosen],
        {r.cell.label: r.schedule for r in results},
        {"cells": {r.cell.label: r.extra for r in results}, "notes": notes(results)},
    )
    suite_report.write(record, entry)
    o = entry["overall"]
    echo(
        f"{o['cells']} cells in {time.time() - t0:.0f} s: {o['pass']} pass, {o['miss']} miss, "
        f"{o['indeterminate']} indeterminate; wrote {record}/REPORT.md, suite.json, history.csv"
    )
    for s in entry["summary"]:
        echo(
            f"  {s['metric']:22s} MAPE {s['mape_pct']:5.1f}% (target {s['target_pct']:g}%)  coverage "
            f"{suite_report.coverage(s)}"
        )


def _refit(record: Path, target, known: list, bootstrap: int | None, notes, echo) -> None:
    """``--refit``: every cell of the target's recorded suite fitted and simulated again from its
    own probe blocks and real runs (nothing real run); the real side, its schedule and its
    command are the record's, the simulated side this checkout's."""
    from ..validation import suite_report
    from ..validation.suite import HeldOutCell, SuitePlan, refit_cell, rows_table

    data = suite_report.read_suite(record / "suite.json")
    old = data["targets"].get(target.name)
    if old is None:
        raise InputError(
            f"--refit: {record}/suite.json has no {target.name} suite to fit again; run the suite first."
        )
    by_name = {w.name: w for w in known}
    cells = []
    for c in old["cells"]:
        if c["workload"] not in by_name:
            raise InputError(
                f"--refit: {record}/suite.json: workload '{c['workload']}' is not one of {sorted(by_name)}."
            )
        cell = HeldOutCell(by_name[c["workload"]], int(c["level"]))
        if cell not in cells:
            cells.append(cell)
    plan = SuitePlan(cells, **{k: v for k, v in old["plan"].items() if k in SuitePlan.__dataclass_fields__})
    if bootstrap is not None:
        plan.bootstrap = bootstrap
    results = []
    for cell in cells:
        echo(f"{cell.label}: fitted again from its recorded blocks")
        results.append(refit_cell(target, cell, plan, old["schedule"].get(cell.label, [])))
    rows = rows_table(results)
    entry = suite_report.suite_entry(
        target.name,
        rows,
        old["command"],
        old["machine"],
        {k: v for k, v in dataclasses.asdict(plan).items() if k != "cells"},
        old["workloads"],
        old["schedule"],
        {"cells": {r.cell.label: r.extra for r in results}, "notes": notes(results)},
    )
    entry["real_runs"] = old.get("real_runs") or {"date": old["date"], "commit": old["commit"]}
    suite_report.write(record, entry)
    o = entry["overall"]
    echo(
        f"{o['cells']} cells fitted again: {o['pass']} pass, {o['miss']} miss, {o['indeterminate']} "
        f"indeterminate; wrote {record}/REPORT.md, suite.json, history.csv"
    )


@validate_app.command("suite")
def validate_suite(
    record: Path = typer.Option(
        Path("validation"),
        "--record",
        help="Folder of REPORT.md, suite.json and "
        "history.csv (each cell's probes, runs and profile go under <record>/<target>/).",
    ),
    engine: str | None = typer.Option(
        None,
        "--engine",
        help="An OpenAI-compatible server's URL (llama.cpp's): "
        "run the engine suite (agent loop) instead of the Docker one (default: none, the Docker suite).",
    ),
    model: str = typer.Option("tiny", help="--engine: the model name."),
    request_extra: str = typer.Option("{}", help="--engine: extra request fields as JSON."),
    levels: str | None = typer.Option(
        None, help="Comma-separated levels in flight (default: Docker 8,16,32,48; engine 1,4,8)."
    ),
    workloads: str | None = typer.Option(
        None,
        help="Comma-separated held-out workloads (default: Docker all; engine the unseen ones).",
    ),
    repeats: int = typer.Option(
        3, help="Real repeats (runs, and as many probe blocks) per cell, at least 3 for a verdict."
    ),
    max_repeats: int = typer.Option(6, help="Repeats (runs) a cell may grow to while it is indeterminate."),
    bootstrap: int | None = typer.Option(
        None, help="Refits of each cell's profile for its band (default: the fit's)."
    ),
    seed: int = typer.Option(0, help="Seed of the blocks' order."),
    image: str = typer.Option("simrollout-busybox:local", help="Docker: the image."),
    budget: float | None = typer.Option(
        None,
        help="Minutes: past them no repeats are added (each cell "
        "keeps its base blocks; a cell left indeterminate says so; default: no limit).",
    ),
    refit: bool = typer.Option(
        False,
        "--refit",
        help="Run nothing real: fit and simulate every recorded "
        "cell again from its own probe blocks and real runs (another fit or model "
        "version on the same sitting).",
    ),
) -> None:
    """Held-out cells (workload x concurrency), each as probe blocks and real blocks in a seeded,
    balanced alternating order; each cell's profile fitted from its own probe blocks; per cell and
    metric the real mean with its 95% CI, the simulated point with its 90% band, the error and a
    verdict. Writes <record>/REPORT.md, suite.json and a row of history.csv."""
    run_suite_command(record, engine, model, _json_option(request_extra, "--request-extra"), levels,
                      workloads, repeats, max_repeats, bootstrap, seed, image, budget, refit,
                      echo=typer.echo)  # fmt: skip
