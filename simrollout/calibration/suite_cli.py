"""``simrollout validate suite``: the options checked, the target built, the suite run and written."""

from __future__ import annotations

import dataclasses
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import InputError
from . import suite_report
from .suite import DEFAULT_BOOTSTRAP, Cell, SuitePlan, rows_table, run_suite


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
        from .suite_engine import ENGINE_LEVELS, ENGINE_WORKLOADS, EngineTarget, engine_notes

        chosen, lv = _pick(ENGINE_WORKLOADS, workloads, "--workloads"), ENGINE_LEVELS
        target = EngineTarget(engine, model, extra, record / "engine", seed)
        notes = engine_notes
    else:
        from .backends import get_backend
        from .suite import DOCKER_LEVELS, DOCKER_WORKLOADS
        from .suite_docker import DockerTarget, docker_notes

        chosen, lv = _pick(DOCKER_WORKLOADS, workloads, "--workloads"), DOCKER_LEVELS
        target = DockerTarget(get_backend("docker"), record / "docker", image, seed)
        notes = docker_notes
    lv = _ints(levels, "--levels") if levels else list(lv)
    if refit:
        return _refit(record, target, chosen, bootstrap, notes, echo)
    plan = SuitePlan(
        [Cell(w, v) for w in chosen for v in lv],
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
            f"{s['coverage'] if s['coverage'] == s['coverage'] else float('nan'):.0%}"
        )


def _refit(record: Path, target, known: list, bootstrap: int | None, notes, echo) -> None:
    """``--refit``: every cell of the target's recorded suite fitted and simulated again from its
    own probe blocks and real runs (nothing real run); the real side, its schedule and its
    command are the record's, the simulated side this checkout's."""
    from .suite import refit_cell

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
        cell = Cell(by_name[c["workload"]], int(c["level"]))
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
