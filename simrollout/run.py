"""Run a scenario: every (substrate, concurrency, replication) cell, in parallel processes.

>>> from simrollout.scenario import load_scenario          # doctest: +SKIP
>>> result = run_scenario(load_scenario("scenarios/small.yaml"))  # doctest: +SKIP
>>> result.summary[["substrate", "worker_hours"]]           # doctest: +SKIP

Cells are independent and seeded by name, so a parallel run gives exactly the serial numbers.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache

import pandas as pd

from .metrics import aggregate, summarize
from .scenario import Scenario
from .sim.model import Cell
from .sim.records import Records
from .workload import Work, draw_substrate, draw_work


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


# State shared with forked workers (set before the pool starts; read-only afterwards).
_STATE: dict = {}


@lru_cache(maxsize=4)
def _draws(sub_index: int, rep: int):
    scn, fid = _STATE["scenario"], _STATE["fidelity"]
    return draw_substrate(scn, scn.substrates[sub_index], rep, _work(rep), detail=fid == "step")


def _work(rep: int) -> Work:
    works = _STATE["works"]
    if rep not in works:
        works[rep] = draw_work(_STATE["scenario"], rep, detail=_STATE["fidelity"] == "step")
    return works[rep]


def _run_cell(key: CellKey, keep: bool) -> tuple[CellKey, dict, Records | None]:
    scn, fid = _STATE["scenario"], _STATE["fidelity"]
    sub = scn.substrates[key.substrate]
    q = _STATE.get("progress")
    cell = Cell(
        scn,
        sub,
        key.concurrency,
        key.replication,
        _work(key.replication),
        _draws(key.substrate, key.replication),
        fid,
        progress=(lambda k: q.put(k)) if q is not None else None,
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
    if q is not None:
        q.put(cell.work.n % 4096)
    return key, summary, rec if keep else None


def cell_keys(scn: Scenario) -> list[CellKey]:
    return [
        CellKey(s, c, r)
        for r in range(scn.replications)
        for s in range(len(scn.substrates))
        for c in scn.cluster.levels
    ]


def run_scenario(
    scn: Scenario,
    jobs: int | None = None,
    keep_records: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Simulate every cell of ``scn``; ``jobs`` processes (default: all cores).

    ``progress(done, total)`` is called with trajectories simulated so far.
    """
    fid = scn.resolved_fidelity()
    keys = cell_keys(scn)
    total = len(keys) * scn.workload.trajectories
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(keys)))
    _STATE.clear()
    _STATE.update(scenario=scn, fidelity=fid, works={})
    _draws.cache_clear()
    results = []
    done = 0
    if jobs == 1:
        if progress is not None:
            _STATE["progress"] = _Inline(lambda k: progress(k, total))
        results = [_run_cell(k, keep_records) for k in keys]
    else:
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        _STATE["progress"] = q
        # draw the shared workload once, before forking, so every cell reuses it
        for r in range(scn.replications):
            _work(r)
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            futures = [pool.submit(_run_cell, k, keep_records) for k in keys]
            while not all(f.done() for f in futures):
                try:
                    done += q.get(timeout=0.2)
                    if progress is not None:
                        progress(done, total)
                except queue.Empty:
                    pass
            results = [f.result() for f in futures]
    _STATE.clear()
    rows = []
    for key, summary, _ in results:
        rows.append(
            {
                "substrate": scn.substrates[key.substrate].name,
                "concurrency": key.concurrency,
                "replication": key.replication,
                **summary,
            }
        )
    cells = pd.DataFrame(rows)
    records = {key: rec for key, _, rec in results if rec is not None}
    return RunResult(scn, fid, cells, aggregate(cells), records)


class _Inline:
    def __init__(self, fn):
        self.put = fn
