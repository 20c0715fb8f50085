"""The simulator against reality: a real mini-rollout on a backend vs the simulation of the same.

Each real trajectory creates a sandbox, runs ``steps`` commands ``sleep X`` (X drawn from the
scenario's tool-latency distribution, the same draws the simulation uses), and removes it;
trajectories run at each concurrency level. The simulation runs the same scenario with the
substrate profile calibrated from a probe of the same engine.
"""

from __future__ import annotations

import json
import platform
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ..runner import run_scenario
from ..scenario import Scenario, scenario_from_dict
from ..workload import draw_work
from .backends import Backend

METRICS = {
    "makespan": lambda d: d.end.max() - d.start.min(),
    "duration_p50": lambda d: np.percentile(d.end - d.start, 50),
    "duration_p90": lambda d: np.percentile(d.end - d.start, 90),
    "duration_p99": lambda d: np.percentile(d.end - d.start, 99),
    "cold_start_p50": lambda d: np.percentile(d.cold, 50),
    "cold_start_p99": lambda d: np.percentile(d.cold, 99),
}


def mini_rollout_scenario(
    profile: Path, trajectories: int, steps: int, levels: list[int], tool: dict, seed: int
) -> Scenario:
    return scenario_from_dict(
        {
            "version": 1,
            "name": "validate",
            "seed": seed,
            "fidelity": "step",
            "workload": {
                "trajectories": trajectories,
                "steps": steps,
                "llm_time": 0,
                "calls_per_step": 1,
                "tools": {"sleep": {"weight": 1, "latency": tool}},
            },
            "substrates": [{"profile": str(profile)}],
            "cluster": {"concurrency": levels},
        },
        Path.cwd() / "validate.yaml",
    )


def real_rollout(backend: Backend, scn: Scenario, image: str) -> pd.DataFrame:
    """Run the scenario's trajectories for real at every concurrency level."""
    work = draw_work(scn, 0, detail=True)
    rows = []
    for level in scn.cluster.levels:
        t_origin = time.perf_counter()
        tag = f"validate-{uuid.uuid4().hex[:8]}-{level}"

        def one(i: int, tag=tag, level=level, t_origin=t_origin):
            start = time.perf_counter() - t_origin
            box = backend.create(image, tag)
            cold = time.perf_counter() - t_origin - start
            try:
                for x in work.call_tool[work.call_off[i] : work.call_off[i + 1]]:
                    backend.exec(box, f"sleep {x:.4f}")
            finally:
                backend.remove(box)
            return {
                "concurrency": level,
                "trajectory": i,
                "start": start,
                "cold": cold,
                "end": time.perf_counter() - t_origin,
            }

        try:
            with ThreadPoolExecutor(level) as pool:
                rows += list(pool.map(one, range(work.n)))
        finally:
            backend.sweep(tag)  # a create cut short by an error is removed too
    return pd.DataFrame(rows)


def compare(real: pd.DataFrame, scn: Scenario) -> pd.DataFrame:
    res = run_scenario(scn, jobs=1)
    out = []
    for key, rec in res.records.items():
        sim = pd.DataFrame({"start": rec.start, "end": rec.end, "cold": rec.cold})
        r = real[real.concurrency == key.concurrency]
        for m, fn in METRICS.items():
            a, b = float(fn(r)), float(fn(sim))
            out.append(
                {
                    "concurrency": key.concurrency,
                    "metric": m,
                    "real": a,
                    "simulated": b,
                    "diff_pct": 100 * (b - a) / a if a else float("nan"),
                }
            )
    return pd.DataFrame(out)


def record(folder: Path, scn: Scenario, real: pd.DataFrame, table: pd.DataFrame, backend: Backend) -> None:
    """Commit-ready record: inputs, real measurements, comparison and machine."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.yaml").write_text(
        yaml.safe_dump(scn.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False)
    )
    real.to_csv(folder / "real.csv", index=False)
    table.to_csv(folder / "comparison.csv", index=False)
    import os

    machine = {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        **backend.info(),
    }
    (folder / "machine.json").write_text(json.dumps(machine, indent=2))
