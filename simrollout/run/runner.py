"""Run scenarios: every (substrate, concurrency, replication) cell, on an executor.

>>> from simrollout.scenario import load_scenario          # doctest: +SKIP
>>> from simrollout.run.executors import run_scenario          # doctest: +SKIP
>>> result = run_scenario(load_scenario("scenarios/small.yaml"))  # doctest: +SKIP
>>> result.summary[["substrate", "worker_hours"]]           # doctest: +SKIP

Cells are independent and seeded by name, so serial, local-process and Ray runs give exactly the
same numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..scenario import Scenario
from ..sim.engines.run import run_engine
from ..sim.metrics import aggregate
from ..sim.pilot_run import run_pilot, slice_scenario
from ..sim.records import Records
from ..sim.route import fidelity_choice, resolved_engine, resolved_fidelity, unbacked
from ..sim.serving_pilot import Pilot
from ..sim.workload_draws import Work, draw_work, tool_sums_at_once
from . import pilot_cache


@dataclass(frozen=True)
class CellKey:
    substrate: int
    concurrency: int
    replication: int


@dataclass
class CellResult:
    """One cell's outcome, as :func:`run_cell` hands it to :func:`assemble` (from another
    process too)."""

    summary: dict  # its metrics: its row of cells.csv
    records: Records | None  # its per-trajectory records, when kept
    cdf: np.ndarray  # duration at CDF_LEVELS
    cold_cdf: np.ndarray  # cold start at CDF_LEVELS
    steps: list[dict] = field(default_factory=list)  # the training loop's step table
    compile_seconds: float = 0.0  # the compiled loop's compile (or cache load), in its process
    pilot: tuple[str, Pilot] | None = None  # the serving pilot it ran or reused, and its key


@dataclass
class RunResult:
    scenario: Scenario
    fidelity: str
    cells: pd.DataFrame  # one row per (substrate, concurrency, replication)
    summary: pd.DataFrame  # mean (and ci95) over replications
    records: dict[CellKey, Records] = field(default_factory=dict)
    cdf: dict[CellKey, np.ndarray] = field(default_factory=dict)  # duration at CDF_LEVELS
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)  # training loop: one row per step
    cold_cdf: dict[CellKey, np.ndarray] = field(default_factory=dict)  # cold start at CDF_LEVELS
    compile_seconds: float = 0.0  # the compiled engine's compile (or cache load), when it ran

    @property
    def fidelity_reason(self) -> str:
        return fidelity_choice(self.scenario)[1]

    @property
    def fidelity_warning(self) -> str | None:
        """Set when the scenario forces a fidelity the fidelity matrix does not back."""
        return unbacked(self.scenario)


# Workloads and substrate draws, cached per process: a cell reuses what an earlier cell of the
# same workload drew (common random numbers; forked workers inherit what the parent drew).
_WORK: dict[tuple, Work] = {}
CDF_LEVELS = np.linspace(0.0, 1.0, 401)


def _work_key(scn: Scenario, rep: int, detail: bool, sub=None) -> tuple:
    """What determines a workload's draws, in the scenario's own order (its tools are drawn in
    their order: sorted, two orders of the same tools would share one's draws)."""
    return (
        json.dumps(scn.workload.model_dump(mode="json", by_alias=True)),
        scn.seed,
        scn.trajectories,
        scn.policy.timeout,  # which bodies keep their per-step detail
        rep,
        detail,
        None if sub is None else tuple(sorted(sub.tool_speed.items())),  # tool latencies differ by substrate
    )


def work_for(
    scn: Scenario, rep: int, detail: bool, jobs: int = 1, sub=None, pool=None, background: bool = False
) -> Work:
    """The workload of replication ``rep``; with a substrate that has ``tool_speed`` factors,
    its own (the same draws, its tool latencies scaled). ``pool``: draw its chunks there (in the
    ``background``: see :func:`draw_work`)."""
    sub = sub if sub is not None and sub.tool_speed else None
    summed = tool_sums_at_once(scn, detail)
    key = (*_work_key(scn, rep, detail, sub), summed)
    if key not in _WORK or _WORK[key].spent:  # (a spent one: a streamed cell handed its pages back)
        _WORK.pop(key, None)
        work = draw_work(scn, rep, detail, jobs, sub, summed, pool, background)
        # the latest four, and more while they fit in _WORK_BYTES (the oldest leaves first)
        while len(_WORK) >= 4 and sum(map(_nbytes, _WORK.values())) + _nbytes(work) > _WORK_BYTES:
            _WORK.pop(next(iter(_WORK)))
        _WORK[key] = work
    return _WORK[key]


_WORK_BYTES = 2**30  # workloads kept for the cells still to run (a plan's samples: a few MB each)


def _nbytes(work: Work) -> int:
    return sum(getattr(v, "nbytes", 0) for v in vars(work).values())


def run_cell(
    scn: Scenario,
    key: CellKey,
    keep: bool = True,
    progress: Callable[[int], None] | None = None,
    sink: Callable[[Records, int], None] | None = None,
) -> CellResult:
    """Simulate one cell: its summary, its duration and cold-start CDFs and, if ``keep``, its
    per-trajectory records. ``sink(records, first_index)`` sees every chunk."""
    engine = resolved_engine(scn)
    sub = scn.substrates[key.substrate]
    work = work_for(scn, key.replication, engine.draws_steps(scn), sub=sub)
    pilot = pilot_key = None
    if needs_pilot(scn):  # the engines' load, from a pilot
        pilot_key, pilot = pilot_for(scn, key)
    c, rep = key.concurrency, key.replication
    cell, rec = run_engine(engine, scn, sub, c, rep, work, progress, sink, keep, pilot)
    summary = cell.metrics.summary(cell.gpu_busy_seconds())  # the records' and each part's
    return CellResult(
        summary,
        rec,
        cdf=cell.acc.sketch["duration"].quantile(CDF_LEVELS),
        cold_cdf=cell.acc.sketch["cold_start"].quantile(CDF_LEVELS),
        steps=cell.loop.step_table() if cell.loop is not None else [],
        compile_seconds=getattr(cell, "compile_seconds", 0.0),
        pilot=(pilot_key, pilot) if pilot is not None else None,
    )


# pilots run in this process or in its workers (handed back with their cells' summaries), by
# what determines them (:func:`pilot_key`): a cell run again (a plan's check of its sample's
# candidates) or another configuration with the same sliced cluster reuses its pilot, the same
# numbers for less; between runs they are kept on disk (:mod:`.pilot_cache`)
PILOTS: dict[str, Pilot] = {}


def needs_pilot(scn: Scenario) -> bool:
    """Whether the scenario's cells take the engines' load from a serving pilot."""
    return resolved_engine(scn).pilots(scn)


def pilot_for(scn: Scenario, key: CellKey) -> tuple[str, Pilot]:
    """The serving pilot of a cell, and its key: the one run before (:data:`PILOTS`, then the
    disk cache), or run now (and stored)."""
    sub = scn.substrates[key.substrate]
    k = pilot_key(scn, key)
    pilot = PILOTS.get(k) or pilot_cache.load(k)
    if pilot is None:
        pilot = run_pilot(scn, sub, key.concurrency, key.replication)
        pilot_cache.store(k, pilot)
    return k, pilot


def pilot_key(scn: Scenario, key: CellKey) -> str:
    """What determines a cell's pilot, hashed: its sliced scenario, replication and engine count."""
    pscn, _ = slice_scenario(scn, scn.substrates[key.substrate], key.concurrency)
    return pilot_cache.key_of(pscn, scn.cluster.inference.engines, key.replication)


def remember(pilot: tuple[str, Pilot] | None) -> None:
    """Keep a pilot run elsewhere (a worker) for the cells that run it again."""
    if pilot is None:
        return
    if len(PILOTS) >= 256:
        PILOTS.pop(next(iter(PILOTS)))
    PILOTS[pilot[0]] = pilot[1]


def cell_keys(scn: Scenario) -> list[CellKey]:
    return [
        CellKey(s, c, r)
        for r in range(scn.replications)
        for s in range(len(scn.substrates))
        for c in scn.cluster.levels
    ]


def assemble(scn: Scenario, results: list[tuple[CellKey, CellResult]]) -> RunResult:
    rows, cdf, cold, steps, compile_s = [], {}, {}, [], 0.0
    for k, res in results:
        compile_s = max(compile_s, res.compile_seconds)
        remember(res.pilot)
        cdf[k] = res.cdf
        cold[k] = res.cold_cdf
        for row in res.steps:
            steps.append({"substrate": scn.substrates[k.substrate].name, "concurrency": k.concurrency,
                          "replication": k.replication, **row})  # fmt: skip
        rows.append(
            {
                "substrate": scn.substrates[k.substrate].name,
                "concurrency": k.concurrency,
                "replication": k.replication,
                **res.summary,
            }
        )
    cells = pd.DataFrame(rows)
    records = {k: res.records for k, res in results if res.records is not None}
    return RunResult(
        scn,
        resolved_fidelity(scn),
        cells,
        aggregate(cells),
        records,
        cdf,
        pd.DataFrame(steps),
        cold,
        compile_s,
    )
