"""Headline metrics of a cell, and their mean and 95% confidence interval over replications.

Percentiles come from a quantile sketch with 0.1% relative error; sums are exact.

Names follow docs/model.md; ``worker_hours`` is the Rollout Infrastructure Tax paper's
definition: wall time on the substrate excluding model inference, summed, / 3600.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from ..scenario import Scenario, Substrate
from .records import CANCELLED, FAILED, OK, TIMEOUT, Records
from .sketch import LoadBins, QuantileSketch

PERCENTILES = {"p50": 50, "p90": 90, "p99": 99, "p99_9": 99.9}


class Accumulator:
    """Running totals and quantile sketches of one cell, fed a chunk of trajectories at a time."""

    def __init__(self):
        self.n = self.completed = self.failed = self.timeouts = self.retries = self.warm_hits = 0
        self.cancelled = 0
        self.worker = self.sandbox = self.duration_sum = self.end = 0.0
        self.queue_wait_sum = self.acquire_wait_sum = 0.0
        # the phases of worker time (TAX), and retry backoffs in units of policy.retry_backoff
        self.phase = dict.fromkeys(("cold_start", "exec_overhead", "teardown", "retry"), 0.0)
        self.backoffs = 0
        self.steps_completed = self.turns = 0  # steps of completed trajectories; turns begun by all
        kinds = ("duration", "completed_duration", "cold_start", "queue_wait", "acquire_wait")
        self.sketch = {k: QuantileSketch() for k in kinds}
        self.load = LoadBins()  # generating requests over time (GPU estimate, trajectory fidelity)

    def add(self, rec: Records, gen: np.ndarray | None = None) -> None:
        ok = rec.status == OK
        self.n += rec.status.size
        self.completed += int(ok.sum())
        self.failed += int((rec.status == FAILED).sum())
        self.timeouts += int((rec.status == TIMEOUT).sum())
        self.cancelled += int((rec.status == CANCELLED).sum())
        self.retries += int((rec.attempts.astype(np.int64) - 1).sum())
        self.warm_hits += int(rec.warm.sum())
        self.worker += float(rec.worker.sum())
        self.sandbox += float(rec.sandbox.sum())
        self.duration_sum += float(rec.duration.sum())
        self.queue_wait_sum += float(rec.queue_wait.sum())
        self.acquire_wait_sum += float(rec.acquire_wait.sum())
        ph = self.phase
        ph["cold_start"] += float(rec.cold[rec.status != FAILED].sum())  # a failed one's is lost
        ph["exec_overhead"] += float(rec.overhead.sum())
        ph["teardown"] += float(rec.teardown.sum())
        ph["retry"] += float(rec.lost.sum())
        # retry k waited retry_backoff * 2 ** (k - 1) before it (Cell._again)
        self.backoffs += int((2 ** (rec.attempts.astype(np.int64) - 1) - 1).sum())
        self.sketch["completed_duration"].add(rec.duration[ok])
        self.steps_completed += int(rec.steps_done[ok].sum())
        self.turns += int(rec.steps_done.sum()) + int((rec.status != OK).sum())  # + a cut last turn
        self.end = max(self.end, float(rec.end.max()) if rec.end.size else 0.0)
        for key, x in (("duration", rec.duration), ("cold_start", rec.cold), ("queue_wait", rec.queue_wait),
                       ("acquire_wait", rec.acquire_wait)):  # fmt: skip
            self.sketch[key].add(x)
        if gen is not None:
            self.load.add(gen[:, 0], gen[:, 1], gen[:, 2])


class MetricsStore:
    """One cell's metrics in one place: its trajectories' records, folded in a chunk at a time
    (:meth:`add`), and what each part of the cell measured on its own (the fleet, the serving
    engines, the training loop, the steady state). A part is attached with its ``report(store,
    out)``, which adds its metrics to the summary, in the order the parts were attached, and
    optionally its ``totals()``, the figures the records' metrics need of it (the fleet's pool and
    parked sandbox-seconds, its peak). Adding a metric touches the part that measures it, its
    report, and docs/model.md."""

    def __init__(self, scn: Scenario, sub: Substrate):
        self.scn, self.sub = scn, sub
        self.acc = Accumulator()
        self.reports: list[Callable[[MetricsStore, dict], None]] = []
        self.totals: list[Callable[[], dict]] = []
        self.gpu_busy_seconds = 0.0

    def add(self, rec: Records, gen: np.ndarray | None = None) -> None:
        """A chunk's finished trajectories (``gen``: their bodies' generating spans)."""
        self.acc.add(rec, gen)

    def attach(self, report: Callable[[MetricsStore, dict], None] | None = None,
               totals: Callable[[], dict] | None = None) -> None:  # fmt: skip
        if report is not None:
            self.reports.append(report)
        if totals is not None:
            self.totals.append(totals)

    def summary(self, gpu_busy_seconds: float) -> dict:
        """The cell's metrics: the records' (:func:`summarize`), then each part's."""
        self.gpu_busy_seconds = gpu_busy_seconds
        figures: dict = {}
        for totals in self.totals:
            figures.update(totals())
        out = summarize(self.acc, self.scn, self.sub, gpu_busy_seconds, **figures)
        if self.scn.sandboxless:  # no sandbox: the trajectory's wall time holds none
            out.update(sandbox_hours=0.0, sandbox_cost_usd=0.0)
        for report in self.reports:
            report(self, out)
        out.setdefault("one_wait_fraction", 0.0)  # the steady state's share (sim.steady), if it ran
        return out


def summarize(
    acc: Accumulator,
    scn: Scenario,
    sub: Substrate,
    gpu_busy_seconds: float,
    extra_sandbox_seconds: float = 0.0,
    peak_sandboxes: int = 0,
    pool_idle_seconds: float = 0.0,
) -> dict[str, float]:
    n, makespan = acc.n, acc.end
    inf = scn.cluster.inference
    engines = inf.engines if inf else 0
    per_engine = inf.engine.gpus if inf and inf.engine else 1  # GPUs per engine
    gpu_seconds = engines * per_engine * makespan
    sandbox_seconds = acc.sandbox + extra_sandbox_seconds
    sandbox_cost = sandbox_seconds * sub.billing.price_per_second
    gpu_cost = gpu_seconds / 3600 * (inf.price_per_hour if inf else 0.0)
    nan = float("nan")
    out = {
        "trajectories": n,
        "completed": acc.completed,
        "failed": acc.failed,
        "timeouts": acc.timeouts,
        "cancelled": acc.cancelled,
        "retries": acc.retries,
        "worker_hours": acc.worker / 3600,
        "worker_seconds_per_trajectory": acc.worker / n if n else nan,
        "sandbox_hours": sandbox_seconds / 3600,
        "gpu_hours": gpu_seconds / 3600,
        "gpu_idle_fraction": 1.0 - gpu_busy_seconds * per_engine / gpu_seconds if gpu_seconds else nan,
        "makespan_hours": makespan / 3600,
        "trajectories_per_hour": acc.completed / makespan * 3600 if makespan else nan,
        "steps_per_second": acc.steps_completed / makespan if makespan else nan,
        "mean_in_flight": acc.duration_sum / makespan if makespan else nan,
        "queue_wait_mean": acc.queue_wait_sum / n if n else nan,
        "acquire_wait_mean": acc.acquire_wait_sum / n if n else nan,
        "peak_sandboxes": peak_sandboxes,
        "warm_hit_fraction": acc.warm_hits / n if n else nan,
        "warm_pool_idle_hours": pool_idle_seconds / 3600,
        "sandbox_cost_usd": sandbox_cost,
        "gpu_cost_usd": gpu_cost,
        "cost_usd": sandbox_cost + gpu_cost,
    }
    out.update(tax(acc, scn.policy.retry_backoff))
    sketched = {"duration": PERCENTILES, "completed_duration": PERCENTILES, "cold_start": PERCENTILES,
                "queue_wait": PERCENTILES, "acquire_wait": {"p50": 50, "p99": 99}}  # fmt: skip
    for key, levels in sketched.items():
        values = acc.sketch[key].quantile(np.array(list(levels.values())) / 100)
        out.update({f"{key}_{k}": float(v) for k, v in zip(levels, values)})
    return out


# the phases of a trajectory's time outside model inference, in seconds per trajectory
# (docs/model.md, "Where the infrastructure time goes"): all but ``wait`` sum to
# worker_seconds_per_trajectory; all of them to the mean of duration less generation time
TAX = {
    "tax_wait_s": "wait for a sandbox",
    "tax_cold_start_s": "cold start",
    "tax_exec_overhead_s": "exec overhead",
    "tax_teardown_s": "teardown",
    "tax_retry_s": "retries / lost work",
    "tax_tool_s": "tools, setup, reward",
}


def tax(acc: Accumulator, retry_backoff: float) -> dict[str, float]:
    """Per-trajectory means of the phases in :data:`TAX`: waits for quota and create-rate tokens
    and retry backoffs; the cold (or warm) start, exec overhead and teardown of the attempt that
    counts; every failed attempt's worker time; and the rest of worker time (the task's setup,
    tool calls and reward)."""
    n = acc.n
    if not n:
        return dict.fromkeys(TAX, float("nan"))
    ph = acc.phase
    wait = acc.acquire_wait_sum + acc.backoffs * retry_backoff
    return {
        "tax_wait_s": wait / n,
        **{f"tax_{k}_s": v / n for k, v in ph.items()},
        "tax_tool_s": (acc.worker - sum(ph.values())) / n,
    }


KEYS = ["substrate", "concurrency"]


def aggregate(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean over replications per (substrate, concurrency), with ``<metric>_ci95`` half-widths."""
    metrics = [c for c in rows.columns if c not in KEYS + ["replication"]]
    out = []
    for key, g in rows.groupby(KEYS, sort=False):
        row = dict(zip(KEYS, key))
        r = len(g)
        for m in metrics:
            if not pd.api.types.is_numeric_dtype(g[m]):  # a description (e.g. serving_from)
                row[m] = "; ".join(dict.fromkeys(map(str, g[m])))
                continue
            x = g[m].to_numpy(dtype=float)
            row[m] = float(np.mean(x))
            if r > 1:
                from scipy import stats

                half = stats.t.ppf(0.975, r - 1) * np.std(x, ddof=1) / np.sqrt(r)
                row[f"{m}_ci95"] = float(half)
        row["replications"] = r
        out.append(row)
    return pd.DataFrame(out)
