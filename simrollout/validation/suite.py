"""One validation suite, interleaved: held-out cells (workload x concurrency), each measured as
probe blocks and real-rollout blocks in a seeded, balanced alternating order, so the machine's
drift falls on both sides (Kalibera & Jones 2013).

Per cell: probe and real blocks strictly alternating, beginning and ending with the same kind
(drawn by the seed), so both kinds sit at the same mean time and a linear drift moves the
fitted profile and the real mean alike; the cells run in a seeded random order. While a metric's
real 95% half-width is above its target, two more blocks continue the alternation, up to
``max_repeats`` real blocks. The cell's
profile is then fitted from its own probe blocks, and the simulation of the cell gives the
point and its 90% band (:func:`simulate_band`, the one place the band comes from). Each real
repeat is also held to the simulation of the probe blocks beside it alone (:func:`paired_points`):
the machine's drift moves both alike, so the spread of these paired errors, not the real runs'
own spread, says how well the cell knows its error.

A target (:class:`SuiteTarget`: Docker, the llama.cpp engine, or the synthetic substrate of the
tests) says how to run a probe block and a real block and how to simulate a cell from the probe
records. The suite's rows and summary are computed in :mod:`.suite_stats`, written by
:mod:`.suite_report`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd

from ..scenario import Scenario
from .suite_stats import cell_rows, needs_repeats

DEFAULT_BOOTSTRAP = 20  # refits of each cell's profile (the band's), when the fit can bootstrap
DRAWS = 10  # substrate draws the simulated point is the mean of (the workload's draws are the real's)


@dataclass(frozen=True)
class HeldOutWorkload:
    """A held-out rollout workload: ``steps`` commands per trajectory, each a ``sleep`` drawn from
    ``tool`` after an LLM wait drawn from ``llm`` (0: none), ``2 x level`` trajectories per cell
    (at least ``min_trajectories``), arriving together or at ``arrival_rate`` a second."""

    name: str
    steps: int
    tool: dict
    llm: dict | float = 0
    arrival_rate: float | None = None
    min_trajectories: int = 16

    def trajectories(self, level: int) -> int:
        return max(self.min_trajectories, 2 * level)

    def describe(self) -> str:
        llm = "no LLM wait" if not self.llm else f"LLM wait {_dist(self.llm)}"
        arrive = f"Poisson {self.arrival_rate:g}/s" if self.arrival_rate else "arriving together"
        return f"{self.steps} commands, tool {_dist(self.tool)}, {llm}, {arrive}"


def _dist(d: dict | float) -> str:
    if isinstance(d, dict) and d.get("kind") == "lognormal":
        return f"lognormal {d['median']:g} / {d['p99']:g} s (median / p99)"
    return str(d)


# The suite's held-out Docker workloads: committed before their first real run, never used in
# fitting or choosing the model (every earlier held-out workload had Poisson arrivals and an LLM
# wait of at least 0.3 s median; these differ from all of them)
DOCKER_WORKLOADS = (
    HeldOutWorkload(
        "agent-batch",
        10,
        {"kind": "lognormal", "median": 0.4, "p99": 2.5},
        {"kind": "lognormal", "median": 0.7, "p99": 2.0},
    ),
    HeldOutWorkload("exec-burst", 10, {"kind": "lognormal", "median": 0.15, "p99": 1.0}),
    # committed before their first run (2026-12-05), after the model-error bands: the first test of
    # those bands on cells that played no part in them. short-burst: few short commands after a
    # burst of creates (the cold start's share of a trajectory is large); trickle: arrivals spread
    # over time (Poisson) with a short LLM wait and a heavier-tailed tool, so creates and execs
    # interleave instead of arriving in waves
    HeldOutWorkload("short-burst", 4, {"kind": "lognormal", "median": 0.08, "p99": 0.6}),
    HeldOutWorkload(
        "trickle",
        12,
        {"kind": "lognormal", "median": 0.3, "p99": 4.0},
        {"kind": "lognormal", "median": 0.15, "p99": 0.8},
        arrival_rate=3.0,
    ),
)
DOCKER_LEVELS = (8, 16, 32, 48)
DOCKER_HELD_OUT = ("short-burst", "trickle")  # the workloads no model choice has seen yet


@dataclass(frozen=True)
class HeldOutCell:
    workload: HeldOutWorkload
    level: int

    @property
    def key(self) -> dict:
        return {"workload": self.workload.name, "level": self.level}

    @property
    def label(self) -> str:
        return f"{self.workload.name}@{self.level}"


@dataclass
class SuitePlan:
    cells: list[HeldOutCell]
    repeats: int = 3  # real repeats (and probe blocks) per cell, at least
    max_repeats: int = 6  # the bound on repeats added while a cell is indeterminate
    seed: int = 0  # of the blocks' order (the workloads' draws are seeded per cell)
    bootstrap: int = DEFAULT_BOOTSTRAP
    interleave: bool = True  # False: every probe block first, then every real block (biased by drift)
    draws: int = DRAWS
    budget: float | None = None  # seconds: past it, no repeats are added (every cell keeps its base blocks)


class SuiteTarget(Protocol):
    """Where a suite runs: its name, metrics with targets (% of the real mean), and how to run
    one probe block, one real block and the simulation of a cell."""

    name: str
    targets: dict[str, float]

    def probe(self, cell: HeldOutCell, block: int) -> list[dict]: ...

    def real(self, cell: HeldOutCell, repeat: int) -> dict[str, float]: ...

    def simulate(self, cell: HeldOutCell, records: list[dict], plan: SuitePlan) -> dict[str, dict]: ...

    def point(
        self, cell: HeldOutCell, near: list[dict], records: list[dict], plan: SuitePlan
    ) -> dict[str, float]:
        """The cell's simulated metrics at the machine state of the probe records ``near`` (of all
        the cell's ``records``): no refits, no files kept."""
        ...

    def machine(self) -> dict: ...


def block_order(repeats: int, rng: np.random.Generator, interleave: bool = True) -> list[str]:
    """The blocks of a cell in order: probe and real blocks strictly alternating, beginning and
    ending with the same kind (drawn): ``repeats`` real blocks between ``repeats + 1`` probe
    blocks, or ``repeats + 1`` real blocks around ``repeats`` probe blocks. Either way both
    kinds sit at the same mean time, so a linear drift moves the fitted profile and the real mean
    alike. Without ``interleave``: every probe block, then every real block.

    >>> block_order(2, np.random.default_rng(0))
    ['real', 'probe', 'real', 'probe', 'real']
    """
    if not interleave:
        return ["probe"] * repeats + ["real"] * repeats
    first, other = ("probe", "real") if rng.random() < 0.5 else ("real", "probe")
    return [first if k % 2 == 0 else other for k in range(2 * repeats + 1)]


def next_pair(order: list[str]) -> list[str]:
    """The two blocks to add, continuing the alternation (the order stays symmetric)."""
    last = order[-1]
    nxt = "real" if last == "probe" else "probe"
    return [nxt, last]


@dataclass
class CellResult:
    cell: HeldOutCell
    rows: list[dict]
    schedule: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # a target's diagnostics (exec and create by load)


def run_cell(
    target: SuiteTarget,
    cell: HeldOutCell,
    plan: SuitePlan,
    rng: np.random.Generator,
    log: Callable[[str], None] = lambda s: None,
    started: float | None = None,
) -> CellResult:
    """One cell's blocks in the suite's order, repeats added while it is indeterminate, then its
    rows (:func:`suite_stats.cell_rows`)."""
    records: list[dict] = []
    real: dict[str, list[float]] = {}
    schedule: list[dict] = []
    counts = {"probe": 0, "real": 0}

    def run(kind: str) -> None:
        k = counts[kind]
        t0 = time.time()
        if kind == "probe":
            records.extend(dict(r, suite_block=k) for r in target.probe(cell, k))
        else:
            for m, v in target.real(cell, k).items():
                real.setdefault(m, []).append(float(v))
        counts[kind] += 1
        schedule.append({"block": kind, "index": k, "start": t0, "seconds": round(time.time() - t0, 2)})
        log(f"{cell.label}: {kind} block {k + 1} ({schedule[-1]['seconds']:.0f} s)")

    order = block_order(plan.repeats, rng, plan.interleave)
    for kind in order:
        run(kind)
    started = time.time() if started is None else started

    def in_budget() -> bool:
        return plan.budget is None or time.time() - started < plan.budget

    cache: dict = {}
    while (
        counts["real"] < plan.max_repeats
        and needs_repeats(real, target.targets, paired_points(target, cell, records, schedule, plan, cache))
        and in_budget()
    ):
        pair = next_pair(order)
        order += pair
        for kind in pair:
            run(kind)
    return _result(target, cell, records, real, plan, schedule, cache)


def _result(
    target, cell: HeldOutCell, records, real, plan: SuitePlan, schedule: list[dict], cache: dict | None = None
) -> CellResult:
    """The cell simulated from its probe ``records`` and held to its ``real`` runs, each real run
    also to the probe blocks beside it (:func:`paired_points`)."""
    paired = paired_points(target, cell, records, schedule, plan, {} if cache is None else cache)
    sim = target.simulate(cell, in_blocks(records, schedule), plan)
    extra = sim.pop("_extra", {}) if isinstance(sim.get("_extra"), dict) else {}
    rows = cell_rows(cell.key, real, sim, target.targets, paired)
    for row in rows:
        row["band_source"] = sim[row["metric"]].get("source", "")
    return CellResult(cell, rows, schedule, extra)


def probe_blocks(records: list[dict], schedule: list[dict]) -> dict[int, list[dict]]:
    """The probe records by probe block: by the ``suite_block`` the suite gives them, or (a
    recorded cell's file) by which block's time span in ``schedule`` holds a record's start."""
    out: dict[int, list[dict]] = {}
    if records and all("suite_block" in r for r in records):
        for r in records:
            out.setdefault(int(r["suite_block"]), []).append(r)
        return out
    probes = [b for b in schedule if b["block"] == "probe"]
    spans = [(b["start"], b["start"] + b["seconds"] + 1.0, b["index"]) for b in probes]
    for r in records:
        t = r.get("start")
        k = next((k for lo, hi, k in spans if t is not None and lo - 1.0 <= t <= hi), None)
        if k is not None:
            out.setdefault(int(k), []).append(r)
    return out


def in_blocks(records: list[dict], schedule: list[dict]) -> list[dict]:
    """``records``, each with the ``suite_block`` of its probe block (:func:`probe_blocks`), so a
    target can read how the machine moved over the sitting (:func:`.drift.sitting_drift`)."""
    block = {id(r): k for k, recs in probe_blocks(records, schedule).items() for r in recs}
    return [dict(r, suite_block=block.get(id(r))) for r in records]


def noted_drift(out: dict[str, dict], uncertainty: dict | None) -> dict[str, dict]:
    """``out`` (a cell's simulated metrics) with each refits' band saying it carries the drift
    over the sitting, where the profile's refits do (``uncertainty.drift_applied``)."""
    if (uncertainty or {}).get("drift_applied"):
        for v in out.values():
            if "bootstrap B=" in v.get("source", ""):
                v["source"] += " with the sitting's drift"
    return out


def neighbours(schedule: list[dict]) -> list[tuple[int, ...]]:
    """For each real block in order, the probe blocks run right before and right after it; none
    for a real block at either end of the sitting (one side alone would carry half a block of
    drift into the pair)."""
    out = []
    for i, b in enumerate(schedule):
        if b["block"] == "real":
            side = [j for j in (i - 1, i + 1) if 0 <= j < len(schedule) and schedule[j]["block"] == "probe"]
            out.append(tuple(int(schedule[j]["index"]) for j in side) if len(side) == 2 else ())
    return out


def paired_points(
    target, cell: HeldOutCell, records: list[dict], schedule: list[dict], plan: SuitePlan, cache: dict
) -> dict[str, list[float]]:
    """Per metric, one simulated point per real repeat: the cell simulated (``target.point``) at
    the machine state of the two probe blocks beside that repeat (``nan`` where the target cannot,
    or the blocks are too thin). ``cache`` keeps the points by blocks."""
    if not hasattr(target, "point"):
        return {}
    from ..errors import InputError

    blocks = probe_blocks(records, schedule)
    points: list[dict[str, float]] = []
    for near in neighbours(schedule):
        if not near:
            points.append({})
            continue
        if near not in cache:
            recs = [r for k in near for r in blocks.get(k, [])]
            try:
                cache[near] = target.point(cell, recs, records, plan) if recs else {}
            except InputError:
                cache[near] = {}
        points.append(cache[near])
    return {m: [p.get(m, float("nan")) for p in points] for m in target.targets}


def drift_factors(near: list[dict], records: list[dict]) -> dict[str, float]:
    """Per phase, how much slower the machine ran in the records ``near`` than over all
    ``records``: per level the ratio of their median latencies, the geometric mean over levels
    (successful records only; a phase or level missing from ``near`` is left out)."""

    def medians(recs: list[dict]) -> dict[tuple[str, int], float]:
        groups: dict[tuple[str, int], list[float]] = {}
        for r in recs:
            if r.get("ok") and r.get("latency") is not None:
                groups.setdefault((r["phase"], int(r["concurrency"])), []).append(float(r["latency"]))
        return {k: float(np.median(v)) for k, v in groups.items()}

    mine, every = medians(near), medians(records)
    logs: dict[str, list[float]] = {}
    for (phase, level), m in mine.items():
        if every.get((phase, level), 0) > 0 and m > 0:
            logs.setdefault(phase, []).append(np.log(m / every[(phase, level)]))
    return {phase: float(np.exp(np.mean(v))) for phase, v in logs.items()}


def simulated_points(scn: Scenario, measure: Callable, level: int, draws: int = DRAWS) -> dict[str, float]:
    """The cell's metrics at ``level``: the mean of ``measure`` over ``draws`` runs of ``scn``
    with other substrate draws (the point of :func:`simulate_band`, without its band)."""
    table = _per_draw(scn, measure, draws)
    return table[table.concurrency == level].drop(columns=["concurrency", "draw"]).mean().to_dict()


def refit_cell(target, cell: HeldOutCell, plan: SuitePlan, schedule: list[dict]) -> CellResult:
    """A recorded cell fitted and simulated again from its own probe blocks and real runs
    (``target.recorded(cell)``), nothing real run: the same sitting under another version of the
    fit or the model."""
    records, real = target.recorded(cell)
    return _result(target, cell, records, real, plan, schedule)


def run_suite(
    target: SuiteTarget, plan: SuitePlan, log: Callable[[str], None] = lambda s: None
) -> list[CellResult]:
    """Every cell of ``plan`` on ``target``, in the plan's order, its blocks as :func:`run_cell`."""
    rng = np.random.default_rng(plan.seed)
    order = rng.permutation(len(plan.cells)) if plan.interleave else range(len(plan.cells))
    t0 = time.time()
    done = {int(k): run_cell(target, plan.cells[k], plan, rng, log, t0) for k in order}
    return [done[k] for k in range(len(plan.cells))]


def rows_table(results: list[CellResult]) -> pd.DataFrame:
    return pd.DataFrame([r for res in results for r in res.rows])


# --- the simulated point and its band: the one place it comes from -------------------------


def _renamed(scn: Scenario, k: int) -> Scenario:
    """``scn`` with its substrates' random streams moved (a substrate's streams are keyed by its
    name; the workload's are not: the same commands and LLM waits, other cold starts)."""
    subs = [s.model_copy(update={"name": f"{s.name}~{k}"}) for s in scn.substrates]
    return scn.model_copy(update={"substrates": subs})


def _per_draw(scn: Scenario, measure: Callable, draws: int) -> pd.DataFrame:
    """``measure`` of ``draws`` runs of ``scn``, each with other substrate draws (``draw``: which)."""
    from ..run.executors import run_many

    runs = run_many([_renamed(scn, k) for k in range(draws)], "serial", keep_records=True)
    return pd.concat([measure(r).assign(draw=k) for k, r in enumerate(runs)], ignore_index=True)


def simulate_band(
    scn: Scenario, measure: Callable, draws: int = DRAWS
) -> tuple[pd.DataFrame, pd.DataFrame | None, str]:
    """The simulated side of a cell: ``measure(result)`` (a table of metrics by ``concurrency``)
    of ``draws`` runs of the scenario's profile, each with other substrate draws (the workload's
    are the real's), one row per draw and level; the refits' summary by level (``<column>_lo``
    and ``_hi``: the 5th and 95th percentile over the profile's bootstrap refits, common random
    numbers, :func:`simrollout.whatif.uncertainty.run_with_bands`), or None when the profile has no
    refits; and where the band comes from. The point is the draws' mean; without refits the band
    is the draws' 5-95% range (one cell's sampling noise, not the fit's)."""
    per_draw = _per_draw(scn, measure, draws)
    bands = _bootstrap_bands(scn)
    if bands is None:
        return per_draw, None, f"substrate draws n={draws} (no refits)"
    return per_draw, bands[0], bands[1]


def _bootstrap_bands(scn: Scenario) -> tuple[pd.DataFrame, str] | None:
    """The refits' band (by level: the summary with ``<metric>_lo`` / ``_hi``) when the profile
    carries refits."""
    try:
        from ..whatif.uncertainty import run_with_bands
    except ImportError:
        return None
    # the refits' band alone: the suite measures the model's own error against it
    summary = run_with_bands(scn, jobs=1, executor="serial", model_error=False).summary
    if "band" not in summary or "bootstrap B=" not in str(summary["band"].iloc[0]):
        return None
    return summary.set_index("concurrency"), str(summary["band"].iloc[0])


def point_and_band(
    per_draw: pd.DataFrame,
    refits: pd.DataFrame | None,
    level: int,
    metric: str,
    column: str | None = None,
    convert: Callable = float,
    source: str = "",
) -> dict:
    """A metric's simulated point at ``level`` (the draws' mean) and its 90% band: the refits'
    5-95% range of summary ``column`` (``convert``-ed to the metric, then scaled by the draws'
    mean over the summary's own point, so a percentile's definition does not shift the band),
    or without refits the draws' 5-95% range."""
    x = per_draw.loc[per_draw.concurrency == level, metric].to_numpy(dtype=float)
    point = float(np.mean(x))
    if refits is None or column is None or f"{column}_lo" not in refits:
        lo, hi = np.percentile(x, [5, 95])
        return {"point": point, "lo": float(lo), "hi": float(hi), "source": source}
    row = refits.loc[level]
    own = convert(row[column])
    scale = point / own if own else 1.0
    return {
        "point": point,
        "lo": float(convert(row[f"{column}_lo"]) * scale),
        "hi": float(convert(row[f"{column}_hi"]) * scale),
        "source": source,
    }
