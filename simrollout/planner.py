"""The cheapest configuration that meets a deadline, a throughput or a budget.

For each substrate, every combination of concurrency, warm-pool size and host count is simulated
on a sample of the trajectories (the steady-state throughput of the sample projects the full run:
``makespan(N) = makespan(n) + (N - n) / throughput``; worker-hours and sandbox costs scale with N).
The winner is the cheapest configuration meeting the target (for a budget: the fastest within it).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import InputError
from .executors import run_many
from .scenario import Scenario
from .sweeps import base_dict, set_path

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """'24h', '90m', '3600s', '2d' or '1.5h' -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise InputError(f"--deadline '{text}': expected a positive duration like 24h, 90m or 3600s.")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


@dataclass
class Target:
    deadline_s: float | None = None
    throughput_per_h: float | None = None
    budget_usd: float | None = None

    def __post_init__(self):
        given = [x is not None for x in (self.deadline_s, self.throughput_per_h, self.budget_usd)]
        if sum(given) != 1:
            raise InputError("plan: give exactly one of --deadline, --throughput or --budget.")

    def met(self, row) -> bool:
        if self.deadline_s is not None:
            return row.makespan_s <= self.deadline_s
        if self.throughput_per_h is not None:
            return row.trajectories_per_hour >= self.throughput_per_h
        return row.cost_usd <= self.budget_usd

    def margin(self, row) -> str:
        if self.deadline_s is not None:
            return f"finishes {(self.deadline_s - row.makespan_s) / 3600:,.1f} h before the deadline"
        if self.throughput_per_h is not None:
            return f"{row.trajectories_per_hour / self.throughput_per_h - 1:+.0%} over the target throughput"
        return f"${self.budget_usd - row.cost_usd:,.0f} under budget"


@dataclass
class Plan:
    target: Target
    table: pd.DataFrame  # every evaluated configuration, projected to the full run
    best: pd.Series | None
    binding: str | None

    def describe(self) -> str:
        if self.best is None:
            t = self.target
            closest = self.table.sort_values("makespan_s").iloc[0] if len(self.table) else None
            why = ""
            if closest is not None:
                why = (
                    f" The fastest configuration evaluated ({closest.substrate}, concurrency "
                    f"{closest.concurrency}) needs {closest.makespan_s / 3600:,.1f} h and costs "
                    f"${closest.cost_usd:,.0f}; it is bound by {closest.binding}."
                )
            what = (
                f"the deadline of {t.deadline_s / 3600:,.1f} h"
                if t.deadline_s is not None
                else f"{t.throughput_per_h:,.0f} trajectories/h"
                if t.throughput_per_h is not None
                else f"a budget of ${t.budget_usd:,.0f}"
            )
            return f"No configuration meets {what}.{why}"
        b = self.best
        return (
            f"Cheapest: {b.substrate} at concurrency {b.concurrency}, warm pool {b.warm_pool}, "
            f"{b.hosts} host(s): {b.makespan_s / 3600:,.1f} h, ${b.cost_usd:,.0f} "
            f"({b.worker_hours:,.0f} worker-h); {self.target.margin(b)}. Bound by {self.binding}."
        )


def _binding(row, sub) -> str:
    """What stops this configuration going faster."""
    cap = sub.capacity.total
    if cap is not None and row.peak_sandboxes >= 0.98 * cap:
        return "host capacity" if sub.capacity.quota is None else "the sandbox quota"
    if sub.create_rate and row.create_rate_used >= 0.9 * sub.create_rate:
        return "the create-rate limit"
    if not math.isnan(row.gpu_idle_fraction) and row.gpu_idle_fraction < 0.05:
        return "the inference tier"
    return "concurrency (rollout workers)"


def plan(
    scn: Scenario,
    target: Target,
    concurrency: list[int] | None = None,
    warm_pool: list[int] | None = None,
    hosts: list[int] | None = None,
    sample: int = 20_000,
    executor: str = "local",
    jobs: int | None = None,
    progress=None,
) -> Plan:
    n_full = scn.workload.trajectories
    levels = concurrency or [2**k for k in range(6, 15)]
    pools = warm_pool or [scn.policy.warm_pool]
    base = base_dict(scn)
    configs, scenarios = [], []
    for si, sub in enumerate(scn.substrates):
        host_opts = hosts if (hosts and sub.capacity.quota is None) else [sub.capacity.hosts]
        for c, w, h in itertools.product(levels, pools, host_opts):
            n = min(n_full, max(sample, 10 * c))
            d = set_path(base, "substrates", [base["substrates"][si]])
            d = set_path(d, "substrates.0.capacity.hosts", h)
            d = set_path(d, "workload.trajectories", n)
            d = set_path(d, "cluster.concurrency", c)
            d = set_path(d, "policy.warm_pool", w)
            d = set_path(d, "replications", 1)
            configs.append((sub, c, w, h, n))
            scenarios.append(Scenario.model_validate(d))
    results = run_many(scenarios, executor, jobs, keep_records=True, progress=progress)
    rows = []
    for (sub, c, w, h, n), res in zip(configs, results):
        rows.append(_project(res, sub, c, w, h, n, n_full))
    table = pd.DataFrame(rows)
    table["binding"] = [_binding(r, sub) for r, (sub, *_rest) in zip(table.itertuples(), configs)]
    ok = table[[target.met(r) for r in table.itertuples()]]
    if ok.empty:
        return Plan(target, table, None, None)
    order = ["makespan_s", "cost_usd"] if target.budget_usd is not None else ["cost_usd", "makespan_s"]
    best = ok.sort_values(order).iloc[0]
    return Plan(target, table, best, best.binding)


def _project(res, sub, c, w, h, n, n_full) -> dict:
    s = res.summary.iloc[0]
    rec = next(iter(res.records.values()))
    ends = np.sort(rec.end)
    makespan = float(ends[-1])
    if n < n_full:
        lo, hi = ends[int(0.1 * n)], ends[int(0.9 * n) - 1]
        thr = 0.8 * n / (hi - lo) if hi > lo else n / makespan
        makespan = makespan + (n_full - n) / thr
    scale = n_full / n
    engines = res.scenario.cluster.inference.engines if res.scenario.cluster.inference else 0
    gpu_price = res.scenario.cluster.inference.price_per_hour if engines else 0.0
    sandbox_cost = s.sandbox_cost_usd * scale
    gpu_cost = engines * makespan / 3600 * gpu_price
    return {
        "substrate": sub.name,
        "concurrency": c,
        "warm_pool": w,
        "hosts": h,
        "sampled": n,
        "makespan_s": makespan,
        "trajectories_per_hour": s.completed * scale / makespan * 3600,
        "worker_hours": s.worker_hours * scale,
        "sandbox_cost_usd": sandbox_cost,
        "gpu_cost_usd": gpu_cost,
        "cost_usd": sandbox_cost + gpu_cost,
        "duration_p99": s.duration_p99,
        "gpu_idle_fraction": s.gpu_idle_fraction,
        "peak_sandboxes": s.peak_sandboxes,
        "create_rate_used": (s.trajectories + s.retries) / (s.makespan_hours * 3600),
    }
