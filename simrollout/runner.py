"""Run scenarios: every (substrate, concurrency, replication) cell, on an executor.

>>> from simrollout.scenario import load_scenario          # doctest: +SKIP
>>> result = run_scenario(load_scenario("scenarios/small.yaml"))  # doctest: +SKIP
>>> result.summary[["substrate", "worker_hours"]]           # doctest: +SKIP

Cells are independent and seeded by name, so serial, local-process and Ray runs give exactly the
same numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from .metrics import aggregate, summarize
from .scenario import Scenario
from .sim.model import Cell
from .sim.records import Records
from .workload import SubstrateDraws, Work, draw_substrate, draw_work


@dataclass(frozen=True)
class CellKey:
    substrate: int
    concurrency: int
    replication: int


@dataclass
class RunResult:
    scenario: Scenario
    fidelity: str
    cells: pd.DataFrame  # one row per (substrate, concurrency, replication)
    summary: pd.DataFrame  # mean (and ci95) over replications
    records: dict[CellKey, Records] = field(default_factory=dict)


# Workloads and substrate draws, cached per process: a cell reuses what an earlier cell of the
# same workload drew (common random numbers; forked workers inherit what the parent drew).
_WORK: dict[tuple, Work] = {}
_DRAWS: dict[tuple, SubstrateDraws] = {}


def _work_key(scn: Scenario, rep: int, detail: bool) -> tuple:
    return (
        json.dumps(scn.workload.model_dump(mode="json", by_alias=True), sort_keys=True),
        scn.seed,
        rep,
        detail,
    )


def work_for(scn: Scenario, rep: int, detail: bool, jobs: int = 1) -> Work:
    key = _work_key(scn, rep, detail)
    if key not in _WORK:
        if len(_WORK) >= 4:
            _WORK.pop(next(iter(_WORK)))
        _WORK[key] = draw_work(scn, rep, detail, jobs)
    return _WORK[key]


def draws_for(scn: Scenario, sub_index: int, rep: int, detail: bool) -> SubstrateDraws:
    sub = scn.substrates[sub_index]
    key = _work_key(scn, rep, detail) + (
        json.dumps(sub.model_dump(mode="json", by_alias=True), sort_keys=True),
    )
    if key not in _DRAWS:
        if len(_DRAWS) >= 2:
            _DRAWS.pop(next(iter(_DRAWS)))
        _DRAWS[key] = draw_substrate(scn, sub, rep, work_for(scn, rep, detail), detail)
    return _DRAWS[key]


def run_cell(
    scn: Scenario, key: CellKey, keep: bool = True, progress: Callable[[int], None] | None = None
) -> tuple[dict, Records | None]:
    """Simulate one cell; returns its summary and (if ``keep``) its per-trajectory records."""
    fid = scn.resolved_fidelity()
    detail = fid == "step"
    sub = scn.substrates[key.substrate]
    cell = Cell(
        scn,
        sub,
        key.concurrency,
        key.replication,
        work_for(scn, key.replication, detail),
        draws_for(scn, key.substrate, key.replication, detail),
        fid,
        progress=progress,
    )
    rec = cell.run()
    summary = summarize(
        rec,
        scn,
        sub,
        cell.gpu_busy_seconds(),
        extra_sandbox_seconds=cell.fleet.pool_sandbox_seconds,
        peak_sandboxes=cell.fleet.peak_sandboxes,
    )
    return summary, rec if keep else None


def cell_keys(scn: Scenario) -> list[CellKey]:
    return [
        CellKey(s, c, r)
        for r in range(scn.replications)
        for s in range(len(scn.substrates))
        for c in scn.cluster.levels
    ]


def assemble(scn: Scenario, results: list[tuple[CellKey, dict, Records | None]]) -> RunResult:
    rows = [
        {
            "substrate": scn.substrates[k.substrate].name,
            "concurrency": k.concurrency,
            "replication": k.replication,
            **summary,
        }
        for k, summary, _ in results
    ]
    cells = pd.DataFrame(rows)
    records = {k: rec for k, _, rec in results if rec is not None}
    return RunResult(scn, scn.resolved_fidelity(), cells, aggregate(cells), records)


def run_scenario(
    scn: Scenario,
    jobs: int | None = None,
    keep_records: bool = True,
    progress: Callable[[int, int], None] | None = None,
    executor: str = "local",
    address: str | None = None,
) -> RunResult:
    """Simulate every cell of ``scn``; see :func:`simrollout.executors.run_many`."""
    from .executors import run_many

    return run_many([scn], executor, jobs, keep_records, progress, address)[0]
