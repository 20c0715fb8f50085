"""The Python API: load a scenario, override fields, run, sweep and plan, get DataFrames.

>>> import simrollout as sr
>>> scn = sr.load("scenarios/small.yaml")                                   # doctest: +SKIP
>>> scn = sr.override(scn, {"cluster.concurrency": 256, "policy.retries": 1})  # doctest: +SKIP
>>> sr.run(scn).summary[["substrate", "worker_hours", "cost_usd"]]          # doctest: +SKIP
>>> sr.sweep(scn, {"cluster.concurrency": [64, 256, 1024]})                 # doctest: +SKIP
>>> sr.plan(scn, deadline="24h").describe()                                 # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .run.executors import run_scenario
from .run.runner import RunResult
from .scenario import Scenario, load_scenario, scenario_from_dict
from .scenario.overrides import base_dict, set_path
from .whatif.sweeps import sweep as _sweep


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    return load_scenario(path)


def override(scn: Scenario, fields: dict[str, object]) -> Scenario:
    """A copy of ``scn`` with dotted-path fields replaced, validated like a scenario file."""
    data = base_dict(scn)
    for path, value in fields.items():
        data = set_path(data, path, value)
    return scenario_from_dict(data, f"{scn._source} with " + ", ".join(f"{p}={v}" for p, v in fields.items()))


def run(
    scn: Scenario, executor: str = "local", jobs: int | None = None, keep_records: bool = True
) -> RunResult:
    """Simulate ``scn``; ``.summary`` and ``.cells`` are DataFrames, ``.records`` numpy arrays."""
    return run_scenario(scn, jobs=jobs, keep_records=keep_records, executor=executor)


def sweep(
    scn: Scenario, grid: dict[str, list], executor: str = "local", jobs: int | None = None
) -> pd.DataFrame:
    """Every combination of ``grid`` (dotted path -> values); one row per cell."""
    return _sweep(scn, grid, executor=executor, jobs=jobs)


def plan(
    scn: Scenario,
    deadline: str | None = None,
    throughput: float | None = None,
    budget: float | None = None,
    **search,
):
    """The cheapest configuration meeting one target; see :mod:`simrollout.whatif.planner`."""
    from .whatif.planner import Goal, parse_duration
    from .whatif.planner import plan as _plan

    return _plan(scn, Goal(parse_duration(deadline) if deadline else None, throughput, budget), **search)
