"""Headline metrics of a cell, and their mean and 95% confidence interval over replications.

Names follow docs/metrics.md; ``worker_hours`` is the Rollout Infrastructure Tax paper's
definition: wall time on the substrate excluding model inference, summed, / 3600.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from .scenario import Scenario, Substrate
from .sim.records import FAILED, OK, TIMEOUT, Records

PERCENTILES = {"p50": 50, "p90": 90, "p99": 99, "p99_9": 99.9}


def _pct(x: np.ndarray, prefix: str, which=PERCENTILES) -> dict[str, float]:
    if x.size == 0:
        return {f"{prefix}_{k}": float("nan") for k in which}
    vals = np.percentile(x, list(which.values()))
    return {f"{prefix}_{k}": float(v) for k, v in zip(which, vals)}


def summarize(
    rec: Records,
    scn: Scenario,
    sub: Substrate,
    gpu_busy_seconds: float,
    extra_sandbox_seconds: float = 0.0,
    peak_sandboxes: int = 0,
) -> dict[str, float]:
    n = rec.status.size
    ok = rec.status == OK
    makespan = float(rec.end.max()) if n else 0.0
    inf = scn.cluster.inference
    engines = inf.engines if inf else 0
    gpu_seconds = engines * makespan
    sandbox_seconds = float(rec.sandbox.sum()) + extra_sandbox_seconds
    sandbox_cost = sandbox_seconds * sub.billing.price_per_second
    gpu_cost = gpu_seconds / 3600 * (inf.price_per_hour if inf else 0.0)
    out = {
        "trajectories": n,
        "completed": int(ok.sum()),
        "failed": int((rec.status == FAILED).sum()),
        "timeouts": int((rec.status == TIMEOUT).sum()),
        "retries": int((rec.attempts.astype(np.int64) - 1).sum()),
        "worker_hours": float(rec.worker.sum()) / 3600,
        "worker_seconds_per_trajectory": float(rec.worker.mean()) if n else float("nan"),
        "sandbox_hours": sandbox_seconds / 3600,
        "gpu_hours": gpu_seconds / 3600,
        "gpu_idle_fraction": 1.0 - gpu_busy_seconds / gpu_seconds if gpu_seconds else float("nan"),
        "makespan_hours": makespan / 3600,
        "trajectories_per_hour": ok.sum() / makespan * 3600 if makespan else float("nan"),
        "steps_per_second": float(rec.steps_done[ok].sum()) / makespan if makespan else float("nan"),
        "mean_in_flight": float(rec.duration.sum()) / makespan if makespan else float("nan"),
        "peak_sandboxes": peak_sandboxes,
        "warm_hit_fraction": float(rec.warm.mean()) if n else float("nan"),
        "sandbox_cost_usd": sandbox_cost,
        "gpu_cost_usd": gpu_cost,
        "cost_usd": sandbox_cost + gpu_cost,
    }
    out.update(_pct(rec.duration, "duration"))
    out.update(_pct(rec.cold, "cold_start"))
    out.update(_pct(rec.queue_wait, "queue_wait"))
    out.update(_pct(rec.acquire_wait, "acquire_wait", {"p50": 50, "p99": 99}))
    return out


KEYS = ["substrate", "concurrency"]


def aggregate(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean over replications per (substrate, concurrency), with ``<metric>_ci95`` half-widths."""
    metrics = [c for c in rows.columns if c not in KEYS + ["replication"]]
    out = []
    for key, g in rows.groupby(KEYS, sort=False):
        row = dict(zip(KEYS, key))
        r = len(g)
        for m in metrics:
            x = g[m].to_numpy(dtype=float)
            row[m] = float(np.mean(x))
            if r > 1:
                half = stats.t.ppf(0.975, r - 1) * np.std(x, ddof=1) / np.sqrt(r)
                row[f"{m}_ci95"] = float(half)
        row["replications"] = r
        out.append(row)
    return pd.DataFrame(out)
