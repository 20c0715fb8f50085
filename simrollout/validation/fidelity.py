"""The fidelity matrix: the trajectory engine against the step engine, mode by mode.

Every row is one scenario run in both fidelities on the same seed; the difference of each headline
metric, in % of the step engine's, is checked against a tolerance that depends on the load:
without inference or host contention the fast engine must be nearly exact, with a saturated tier
or host it must stay within 3%.

>>> rows = matrix(trajectories=1000)                            # doctest: +SKIP
>>> table = pd.DataFrame([compare(r).as_dict() for r in rows])  # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd

from ..scenario import Scenario, scenario_from_dict
from ..sim.engines import STEP, TRAJECTORY
from ..sim.route import OUTSIDE, resolved_fidelity, unbacked  # noqa: F401 (the matrix's verdicts)
from . import fidelity_training
from .fidelity_row import Row
from .fidelity_training import add_training
from .verdicts import TOLERANCE

METRICS = (
    "worker_hours",
    "makespan_hours",
    "duration_p50",
    "duration_p99",
    "cold_start_p50",
    "cold_start_p99",
    "gpu_idle_fraction",
)
LOADS = {
    "none": {},
    "host": {"contention": {"create": 0.1, "exec": 0.1, "teardown": 0.1}},
    "tier": {"inference": {"engines": 8, "slowdown": 0.1}},
    "both": {
        "contention": {"create": 0.1, "exec": 0.1, "teardown": 0.1},
        "inference": {"engines": 8, "slowdown": 0.05},
    },
}


# the serving rows' workload and engine: scenarios/serving_tokens.yaml's (TraceLab tokens, the
# H100 profile of calibration/engines/llama3.1-8b-h100-vllm.yaml)
TOKENS = {
    "prompt": 8000,
    "appended": {"kind": "lognormal", "median": 875, "p99": 92000},
    "output": {"kind": "lognormal", "median": 214, "p99": 4800},
    "max_context": 131072,
}
ENGINE = {
    "iteration": {
        "base": 0.00644,
        "per_decode": 3.67e-5,
        "per_context_token": 3.9e-8,
        "per_prefill_token": 3.25e-5,
    },
    "kv_capacity_tokens": 400000,
    "overhead": 0.002,
}


def base(trajectories: int, steps: int, concurrency: int) -> dict:
    """The tool mix of scenarios/small.yaml on one Docker fleet of 2 hosts x 128 slots."""
    return {
        "version": 1,
        "name": "fidelity",
        "seed": 5,
        "workload": {
            "trajectories": trajectories,
            "steps": steps,
            "llm_time": {"kind": "lognormal", "median": 5.7, "p99": 84},
            "calls_per_step": {
                "kind": "discrete",
                "values": [1, 2, 3, 4],
                "weights": [0.85, 0.1, 0.04, 0.01],
            },
            "tools": {
                "shell": {"weight": 0.76, "latency": {"kind": "lognormal", "median": 0.85, "p99": 235}},
                "file_edit": {"weight": 0.12, "latency": {"kind": "lognormal", "median": 0.073, "p99": 55}},
                "file_read": {"weight": 0.12, "latency": {"kind": "lognormal", "median": 0.043, "p99": 7}},
            },
        },
        "substrates": [
            {
                "name": "docker",
                "cold_start": {"kind": "lognormal", "median": 0.155, "p99": 0.6},
                "exec_overhead": {"kind": "lognormal", "median": 0.053, "p99": 0.2},
                "teardown": 0.13,
                "capacity": {"hosts": 2, "sandboxes_per_host": 128},
            }
        ],
        "cluster": {"concurrency": concurrency, "inference": {"engines": 512, "slowdown": 0.0}},
        "policy": {"mode": "async"},
    }


def on_engines(d: dict, engines: int) -> None:
    """Turn scenario ``d``'s LLM turns into requests in tokens to ``engines`` serving engines."""
    wl = d["workload"]
    del wl["llm_time"]
    wl["tokens"] = TOKENS
    d["cluster"]["inference"] = {"engines": engines, "engine": ENGINE, "price_per_hour": 2.0}


def build(row: Row, trajectories: int, steps: int, concurrency: int) -> dict:
    d = base(trajectories, steps, concurrency)
    sub, pol = d["substrates"][0], d["policy"]
    load = LOADS[row.load]
    if "contention" in load:
        sub["contention"] = load["contention"]
    if "inference" in load:
        d["cluster"]["inference"] = {**load["inference"], "price_per_hour": 2.0}
    if row.policy == "sync":
        pol.update(mode="sync", batch_size=concurrency)
    elif row.policy == "poisson":
        # arrivals at ~90% of what the cluster sustains unloaded (a step takes ~26 s on average)
        d["arrivals"] = {"kind": "poisson", "rate": round(0.9 * concurrency / (steps * 26.0), 4)}
    if row.extra == "warm_pool":
        pol["warm_pool"] = concurrency // 4
        sub["create_rate"] = 50
        sub["warm_start"] = {"kind": "lognormal", "median": 0.05, "p99": 0.3}
    elif row.extra == "clients":  # contention per rollout client (8 of them), not per host
        sub.setdefault("contention", {})["scope"] = "client"
        d["cluster"]["clients"] = 8
    elif row.extra in ("images", "reuse", "prefetch"):
        # SWE-bench-like task images (8 samples per task) pulled into small per-host caches
        d["workload"]["images"] = {"count": 64, "samples": 8,
                                   "size_gb": {"kind": "lognormal", "median": 0.4, "p99": 2.0}}  # fmt: skip
        sub["image_cache"] = {"pull_mb_s": 62.5, "cache_gb": 4.0}
        if row.extra == "prefetch":  # a warm pool with task images creates later trajectories' sandboxes
            pol["warm_pool"] = concurrency // 4
        if row.extra == "reuse":  # tasks with more samples than slots: finished sandboxes are reused
            d["workload"]["images"]["samples"] = 2 * concurrency
            sub["reset"] = {"kind": "lognormal", "median": 0.2, "p99": 1.0}
            pol["reuse"] = True
    elif row.extra == "tokens":  # serving engines: one trajectory per engine, or 16 (KV-bound)
        engines = concurrency if row.load in ("none", "host") else max(concurrency // 16, 1)
        on_engines(d, engines)
    elif row.extra == "weights":  # operations weighed by phase: in a create's load an exec counts 0.25
        weights = {"create": {"exec": 0.25, "teardown": 0.5}, "exec": {"create": 2.0}}
        sub["contention"] = {**sub["contention"], "weights": weights}
    elif row.extra == "shared":  # creates and teardowns share the host (contention.shared)
        sub["contention"] = {**sub["contention"], "shared": True}
    elif row.extra == "in_order":  # ... and the creates are served in arrival order
        sub["contention"] = {**sub["contention"], "shared": True, "creates": "in_order"}
    elif row.extra == "failures":
        sub["failures"] = {"create": 0.05, "exec": 0.002, "teardown": 0.01}
        pol.update(retries=2, retry_backoff=1.0)
    elif row.extra == "timeouts":
        pol["timeout"] = steps * 40.0  # about a tenth of the trajectories time out
    elif row.extra.startswith(
        "train"
    ):  # a GRPO loop in one of its modes (simrollout.validation.fidelity_training)
        add_training(d, row, row.trajectories or fidelity_training.STEPS)
        if row.extra == "train_tokens":  # on 16 engines, KV-bound; async and one_step_off interrupt
            on_engines(d, 16)
            if row.policy != "sync":
                d["training"]["at_sync"] = "interrupt"
    d.update(row.scenario)
    return d


STEADY = 12_000  # trajectories of the rows whose steady state runs one wait per trajectory


def matrix() -> list[Row]:
    """Every policy under every load, and warm pool, failures, timeouts, task images (with and
    without a prefetching pool), sandbox reuse and client-scoped contention under both extremes;
    serving engines; host contention with operations weighed by phase, and with creates and
    teardowns sharing the host (their creates together, or in arrival order); async runs long
    enough for a steady state of one wait per trajectory, under every load."""
    rows = [Row(p, ld) for p in ("async", "sync", "poisson") for ld in LOADS]
    extras = ("warm_pool", "failures", "timeouts", "images", "prefetch", "reuse", "clients")
    rows += [Row(p, ld, x) for x in extras for p in ("async", "sync") for ld in ("none", "both")]
    rows += [Row(p, ld, "tokens") for p in ("async", "sync", "poisson") for ld in ("none", "tier", "both")]
    rows += [Row(p, "host", "weights") for p in ("async", "sync", "poisson")]
    rows += [
        Row(p, ld, x)
        for x in ("shared", "in_order")
        for p in ("async", "sync", "poisson")
        for ld in ("host", "both")
    ]
    # long enough for a steady state waited one trajectory at a time (simrollout.sim.steady)
    long = [("host", ""), ("tier", ""), ("both", ""), ("both", "failures"), ("both", "timeouts"),
            ("both", "clients"), ("host", "weights"), ("tier", "tokens"), ("both", "tokens")]  # fmt: skip
    rows += [Row("async", ld, x, trajectories=STEADY) for ld, x in long]
    return rows


def training_rows() -> list[Row]:
    """The training rows (:mod:`simrollout.validation.fidelity_training`): every mode without load and under
    each load; the variants without load, on a loaded host and under both loads."""
    out = [Row(m, ld, "train") for m in ("sync", "one_step_off", "async") for ld in LOADS]
    loads = ("none", "host", "both")
    out += [Row("sync", ld, x) for x in ("train_disagg", "train_over", "train_dynamic") for ld in loads]
    out += [Row("async", ld, "train_whole") for ld in loads]
    # the frameworks' knobs: the trainer with physics, the stream pipeline, the fraction bound
    out += [Row("sync", ld, x) for x in ("train_physics", "train_stream") for ld in loads]
    out += [Row("async", ld, "train_fraction") for ld in loads]
    return out


def interrupt_rows() -> list[Row]:
    """The training rows of ``at_sync: interrupt``, which the compiled engine runs beside the step
    engine (the trajectory engine's bodies run a turn to its end): async and one_step_off."""
    return [Row(m, ld, "train_interrupt") for m in ("async", "one_step_off") for ld in ("none", "host")]


def token_rows() -> list[Row]:
    """The training rows on serving engines in tokens (``train_tokens``: 16 engines, KV-bound),
    which only the compiled engine runs beside the step engine: every mode, without load and on a
    loaded host; async and one_step_off with ``at_sync: interrupt``, sync colocated."""
    return [Row(m, ld, "train_tokens") for m in ("async", "one_step_off", "sync") for ld in ("none", "host")]


def compiled_rows() -> list[Row]:
    """The matrix's rows the compiled engine covers (``Scenario.compiled_gaps``), the training
    rows among them: compared with the step engine by ``compare(row, fast=COMPILED.name)``."""
    out = []
    for row in matrix() + training_rows() + interrupt_rows() + token_rows():
        d = build(row, row.trajectories or 1000, 20, 256)
        if scenario_from_dict(d).compiled_gaps() is None:
            out.append(row)
    return out


@dataclass
class Comparison:
    row: Row
    step: pd.Series
    fast: pd.Series
    step_seconds: float
    fast_seconds: float
    fidelity: str  # what ``fidelity: auto`` runs for this row at a million trajectories

    def diff(self, metric: str) -> float:
        """Fast minus step, in % of step (0 when both are 0)."""
        s, f = float(self.step[metric]), float(self.fast[metric])
        if s == 0:
            return 0.0 if f == 0 else float("inf")
        return 100.0 * (f - s) / abs(s)

    def misses(self) -> dict[str, float]:
        """Metrics outside their tolerance, with their difference in %."""
        tol = TOLERANCE[self.row.regime]
        return {m: self.diff(m) for m, t in tol.items() if not abs(self.diff(m)) <= t}

    def as_dict(self) -> dict:
        out = {"row": self.row.name, "regime": self.row.regime, "auto": self.fidelity}
        metrics = fidelity_training.METRICS if self.row.regime == "training" else METRICS
        out.update({m: round(self.diff(m), 2) for m in metrics})
        out["speedup"] = round(self.step_seconds / self.fast_seconds, 1) if self.fast_seconds else None
        out["within"] = not self.misses()
        return out


def compare(row: Row, trajectories: int = 1000, steps: int = 20, concurrency: int = 256,
            fast: str = TRAJECTORY.name, per_call: bool = True) -> Comparison:  # fmt: skip
    """Run ``row`` in step fidelity and in ``fast`` fidelity (``trajectory`` or ``auto``).
    ``per_call``: the fast engine draws exec overhead and tool latency call by call, on the step
    engine's numbers (else each trajectory's sums at once, as a run does: the same laws, other
    numbers)."""
    from ..run.executors import run_scenario

    d = build(row, row.trajectories or trajectories, steps, concurrency)  # training rows: their own size
    res, secs = {}, {}
    for fid in (STEP.name, fast):
        scn: Scenario = scenario_from_dict({**d, "fidelity": fid})
        scn._overhead_per_call = scn._tools_per_call = per_call  # the same draws in both engines
        t0 = time.perf_counter()
        res[fid] = run_scenario(scn, jobs=1, keep_records=False)
        secs[fid] = time.perf_counter() - t0
    step, quick = res[STEP.name], res[fast]
    if "training" in d:  # a long run of the loop: 1,000 steps
        big = scenario_from_dict({**d, "training": {**d["training"], "steps": 1000}})
    else:
        big = scenario_from_dict({**d, "workload": {**d["workload"], "trajectories": 1_000_000}})
    return Comparison(
        row, step.summary.iloc[0], quick.summary.iloc[0], secs[STEP.name], secs[fast], resolved_fidelity(big)
    )
