"""The cheapest configuration that meets a deadline, a throughput or a budget — counting only
finished work.

For each substrate, every combination of concurrency, warm-pool size and host count is simulated
on a sample of the trajectories (the steady-state throughput of the sample projects the full run:
``makespan(N) = makespan(n) + (N - n) / throughput``; worker-hours and sandbox costs scale with N).
A configuration whose timed-out and failed trajectories exceed the failure budget is infeasible,
whatever it costs (unfinished work is cheap). Throughput counts completed trajectories; cost is
also given per completed trajectory. The winner is the cheapest feasible configuration meeting
the target (for a budget: the fastest within it); the top candidates are then simulated again at
a larger size with replications, and the plan reports those figures with 95% CIs and says when
the check changes the ranking.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError
from ..run.executors import run_many
from ..run.runner import work_for
from ..scenario import Scenario
from ..scenario.overrides import base_dict, set_path

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# a configuration is simulated unless its makespan floor misses the target by more than this
# factor (the sample's projection and the near-miss check work within a few per cent of it)
REACH = 1.25


def parse_duration(text: str) -> float:
    """'24h', '90m', '3600s', '2d' or '1.5h' -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise InputError(f"--deadline '{text}': expected a positive duration like 24h, 90m or 3600s.")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


@dataclass
class Goal:
    """What a plan must meet: exactly one of a deadline, a throughput or a budget."""

    deadline_s: float | None = None
    throughput_per_h: float | None = None
    budget_usd: float | None = None

    def __post_init__(self):
        given = [x is not None for x in (self.deadline_s, self.throughput_per_h, self.budget_usd)]
        if sum(given) != 1:
            raise InputError("plan: give exactly one of --deadline, --throughput or --budget.")

    def met(self, row) -> bool:
        if not row.within_budget:
            return False
        if self.deadline_s is not None:
            return row.makespan_s <= self.deadline_s
        if self.throughput_per_h is not None:
            return row.trajectories_per_hour >= self.throughput_per_h
        return row.cost_usd <= self.budget_usd

    def near(self, row, tol: float = 0.05) -> bool:
        """Within ``tol`` of meeting the target (worth checking at full size)."""
        if not row.within_budget:
            return False
        if self.deadline_s is not None:
            return row.makespan_s <= self.deadline_s * (1 + tol)
        if self.throughput_per_h is not None:
            return row.trajectories_per_hour >= self.throughput_per_h * (1 - tol)
        return row.cost_usd <= self.budget_usd * (1 + tol)

    def out_of_reach(self, floor_s: float, gpu_per_s: float, n: int) -> bool:
        """Whether a configuration whose makespan cannot be under ``floor_s`` (GPUs billed
        ``gpu_per_s`` dollars a second) misses the target by more than :data:`REACH`."""
        if self.deadline_s is not None:
            return floor_s > self.deadline_s * REACH
        if self.throughput_per_h is not None:
            return n / floor_s * 3600 < self.throughput_per_h / REACH
        return gpu_per_s * floor_s > self.budget_usd * REACH

    def margin(self, row) -> str:
        if self.deadline_s is not None:
            return f"finishes {(self.deadline_s - row.makespan_s) / 3600:,.1f} h before the deadline"
        if self.throughput_per_h is not None:
            return f"{row.trajectories_per_hour / self.throughput_per_h - 1:+.0%} over the target throughput"
        return f"${self.budget_usd - row.cost_usd:,.0f} under budget"


@dataclass
class Plan:
    target: Goal
    table: pd.DataFrame  # every evaluated configuration, projected to the full run
    best: pd.Series | None
    binding: str | None
    check: pd.DataFrame | None = None  # the top candidates again, larger and replicated
    max_failed: float = 0.001
    reranked: str | None = None  # the sample's winner, when the check overturned it
    sensitivity: list[str] | None = None  # per latency scaling, whether the recommendation holds
    # configurations not simulated: their makespan floor misses the target (:func:`makespan_floor`)
    skipped: pd.DataFrame | None = None

    def frame(self) -> pd.DataFrame:
        """Every configuration: the simulated ones, then the skipped ones with their floor."""
        if self.skipped is None or self.skipped.empty:
            return self.table.assign(simulated=True)
        return pd.concat([self.table.assign(simulated=True), self.skipped.assign(simulated=False)],
                         ignore_index=True)  # fmt: skip

    def _skipped_text(self) -> str:
        if self.skipped is None or self.skipped.empty:
            return ""
        k, best = len(self.skipped), self.skipped.makespan_floor_s.min()
        return (f" {k} configuration(s) were not simulated: with every slot busy with its "
                f"trajectories' own work alone (unloaded generation, tools, setup and reward; no "
                f"start, overhead or wait) their makespan would still be at least "
                f"{best / 3600:,.1f} h, beyond the target by more than {REACH - 1:.0%}.")  # fmt: skip

    def describe(self) -> str:
        if self.best is None and self.check is not None and len(self.check):
            c = self.check.iloc[0]
            return (
                f"No configuration meets the target once checked: the sample's best candidate was "
                f"{self.reranked}, but at {int(c.checked):,} trajectories x {int(c.replications)} replicates "
                f"none of the {len(self.check)} best candidates does (closest: {_name(c)}, makespan "
                f"{c.makespan_s / 3600:,.2f} h ± {c.makespan_s_ci95 / 3600:,.2f}, cost ${c.cost_usd:,.0f})."
            )
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
            over = self.table[~self.table.within_budget] if len(self.table) else self.table
            if len(over):
                why += (f" {len(over)} of {len(self.table)} configurations lose more than "
                        f"{self.max_failed:.2%} of their trajectories to timeouts or failures.")  # fmt: skip
            return f"No configuration meets {what}.{why}{self._skipped_text()}"
        b = self.best
        text = (
            f"Cheapest: {_name(b)}: {b.makespan_s / 3600:,.1f} h, ${b.cost_usd:,.0f} "
            f"({b.worker_hours:,.0f} worker-h, ${b.cost_per_completed:.4f} per completed trajectory, "
            f"{b.lost_fraction:.3%} timed out or failed); {self.target.margin(b)}. Bound by {self.binding}."
        ) + self._skipped_text()
        if self.check is not None and len(self.check):
            c = _row_of(self.check, b)
            text += (
                f"\nChecked at {int(c.checked):,} trajectories x {int(c.replications)} replications: "
                f"makespan {c.makespan_s / 3600:,.1f} h ± {c.makespan_s_ci95 / 3600:,.1f}, "
                f"cost ${c.cost_usd:,.0f} ± {c.cost_usd_ci95:,.0f}, "
                f"{c.lost_fraction:.3%} lost (95% CIs); "
                + (self.target.margin(c) if self.target.met(c) else "the check MISSES the target")
                + "."
            )
            if self.reranked:
                text += f" The check changed the ranking (was {self.reranked})."
            elif len(self.check) > 1:
                text += f" The ranking holds against the next {len(self.check) - 1} candidate(s)."
        for line in self.sensitivity or []:
            text += f"\nSensitivity: {line}."
        return text


def _binding(row, sub) -> str:
    """What stops this configuration going faster, from measured signals: time spent waiting for
    a sandbox (quota or slots) or a create-rate token, engine utilisation, else the workers."""
    waits = row.acquire_wait_mean > 0.05 * row.duration_mean
    if waits and sub.create_rate and row.create_rate_used >= 0.9 * sub.create_rate:
        return "the create-rate limit"
    if waits:
        return "host capacity" if sub.capacity.quota is None else "the sandbox quota"
    queued = getattr(row, "kv_queued_fraction", float("nan"))
    if not math.isnan(queued) and queued > 0.05:
        return f"the inference tier (KV cache: {queued:.0%} of requests waited for space)"
    if not math.isnan(row.gpu_idle_fraction) and row.gpu_idle_fraction < 0.1:
        return f"the inference tier (engines busy {1 - row.gpu_idle_fraction:.0%})"
    return "concurrency (rollout workers)"


def configurations(scn: Scenario, base: dict, levels, pools, hosts, engines=None):
    """Every configuration a plan evaluates: ``(substrate, concurrency, warm pool, hosts, data)``,
    ``data`` the scenario mapping with that one substrate and those values (one replication),
    and, when ``engines`` is given, each engine count (``cluster.inference.engines`` of ``data``).
    Host counts are searched only for self-managed fleets (a hosted quota is one host)."""
    engine_opts = engines or [None]
    for si, sub in enumerate(scn.substrates):
        host_opts = hosts if (hosts and sub.capacity.quota is None) else [sub.capacity.hosts]
        for c, w, h, e in itertools.product(levels, pools, host_opts, engine_opts):
            d = set_path(base, "substrates", [base["substrates"][si]])
            d = set_path(d, "substrates.0.capacity.hosts", h)
            d = set_path(d, "cluster.concurrency", c)
            d = set_path(d, "policy.warm_pool", w)
            if e is not None:
                d = set_path(d, "cluster.inference.engines", e)
            yield sub, c, w, h, set_path(d, "replications", 1)


def plan(
    scn: Scenario,
    target: Goal,
    concurrency: list[int] | None = None,
    warm_pool: list[int] | None = None,
    hosts: list[int] | None = None,
    sample: int = 20_000,
    executor: str = "local",
    jobs: int | None = None,
    progress=None,
    max_failed: float = 0.001,
    check: int | None = None,
    top: int = 3,
    sensitivity: float | None = None,
    engines: list[int] | None = None,
) -> Plan:
    """``max_failed``: the share of trajectories that may time out or fail; ``check``: trajectories
    per replication of the full-size check of the ``top`` candidates (default: the full run up to
    ten samples; 0 skips it); ``sensitivity``: re-plan with every substrate's lifecycle latencies
    (cold and warm start, exec overhead, teardown) scaled by 1 - x and 1 + x, and say whether the
    recommendation still holds; ``engines``: inference engine counts to search too."""
    if engines and scn.cluster.inference is None:
        raise InputError(
            f"{scn._source}: --engines needs cluster.inference in the scenario (engines to count)."
        )
    if warm_pool and any(warm_pool) and scn.policy.reuse:
        raise InputError(
            f"{scn._source}: --warm-pool cannot be searched with policy.reuse (a reused sandbox "
            "and a warm one compete for the same start); drop --warm-pool or reuse."
        )
    n_full = scn.trajectories
    levels = concurrency or [2**k for k in range(6, 15)]
    pools = warm_pool or [scn.policy.warm_pool]
    base = base_dict(scn)
    configs, scenarios, skipped = [], [], []
    for sub, c, w, h, d in configurations(scn, base, levels, pools, hosts, engines):
        n = min(n_full, max(sample, 10 * c))
        configs.append((sub, c, w, h, n))
        scenarios.append(Scenario.model_validate(set_path(d, "workload.trajectories", n)))
    run = []  # the configurations within reach of the target, by index
    for k, (s, (sub, c, w, h, _n)) in enumerate(zip(scenarios, configs)):
        floor = makespan_floor(s, c, n_full, jobs)
        inf = s.cluster.inference
        gpu_per_s = inf.engines * inf.price_per_hour / 3600 if inf else 0.0
        if target.out_of_reach(floor, gpu_per_s, n_full):
            skipped.append({"substrate": sub.name, "concurrency": c, "warm_pool": w, "hosts": h,
                            "engines": inf.engines if inf else 0, "makespan_floor_s": floor})  # fmt: skip
        else:
            run.append(k)
    results = run_many([scenarios[k] for k in run], executor, jobs, keep_records=True, progress=progress)
    rows = []
    for k, res in zip(run, results):
        sub, c, w, h, n = configs[k]
        rows.append(_project(res.summary.iloc[0], res, sub, c, w, h, n, n_full, max_failed))
    skipped = pd.DataFrame(skipped)
    if not rows:
        return Plan(target, pd.DataFrame(), None, None, max_failed=max_failed, skipped=skipped)
    table = pd.DataFrame(rows, index=run)  # indexed by configuration
    table["binding"] = [_binding(r, configs[k][0]) for r, k in zip(table.itertuples(), run)]
    ok = table[[target.met(r) for r in table.itertuples()]]
    order = ["makespan_s", "cost_usd"] if target.budget_usd is not None else ["cost_usd", "makespan_s"]
    size = min(n_full, 10 * sample) if check is None else min(check, n_full)
    # near misses are checked too: the sample's projection can be a few % off either way
    near = table[[target.near(r) and not target.met(r) for r in table.itertuples()]]
    if ok.empty and (size == 0 or near.empty):
        return Plan(target, table, None, None, max_failed=max_failed, skipped=skipped)
    ranked = ok.sort_values(order)
    cands = pd.concat([ranked, near.sort_values(order)]).head(top)
    best = ranked.iloc[0] if len(ranked) else cands.iloc[0]
    checked, reranked = None, None
    if size > 0:
        checked = _check(scn, cands, configs, scenarios, table, size, n_full, max_failed,
                         executor, jobs, target, order)  # fmt: skip
        top_row, mine = checked.iloc[0], _row_of(checked, best)
        key = order[0]
        if not bool(top_row.meets):  # the verdict follows the check: nothing it checked holds
            return Plan(target, table, None, None, checked, max_failed, _name(best), skipped=skipped)
        # overturn the sample's winner only when the check separates them beyond their CIs
        better = top_row[key] + top_row[f"{key}_ci95"] < mine[key] - mine[f"{key}_ci95"]
        if not bool(mine.meets) or better:
            reranked = _name(best) if len(ranked) else None
            best = cands[[_name(r) == _name(top_row) for _, r in cands.iterrows()]].iloc[0]
    elif ok.empty:
        return Plan(target, table, None, None, max_failed=max_failed, skipped=skipped)
    result = Plan(target, table, best, best.binding, checked, max_failed, reranked, skipped=skipped)
    if sensitivity:
        result.sensitivity = _sensitivity(scn, target, concurrency, warm_pool, hosts, sample, executor, jobs,
                                          max_failed, sensitivity, best, engines)  # fmt: skip
    return result


def makespan_floor(scn: Scenario, concurrency: int, n_full: int, jobs: int | None = None) -> float:
    """Seconds under which ``n_full`` trajectories of ``scn`` (one substrate) cannot finish: its
    ``concurrency`` slots each busy with one trajectory at a time, each holding its slot at least
    for its own work alone (setup, generation unloaded, tool calls, reward; no start, exec
    overhead, wait or retry), or its timeout. From the sample's own workload draw, which its
    simulation then reuses."""
    from ..sim.route import resolved_engine

    detail = resolved_engine(scn).draws_steps(scn)
    work = work_for(scn, 0, detail, jobs or os.cpu_count() or 1, scn.substrates[0])
    own = work.setup + work.llm + work.tool + work.reward
    if scn.policy.timeout:
        own = np.minimum(own, scn.policy.timeout)
    return n_full * float(own.mean()) / concurrency


LATENCIES = ("cold_start", "warm_start", "exec_overhead", "teardown")


def scaled(scn: Scenario, factor: float) -> Scenario:
    """``scn`` with every substrate's lifecycle latencies times ``factor``."""
    d = base_dict(scn)
    for sub in d["substrates"]:
        for k in LATENCIES:
            if k in sub:
                sub[k] = {"kind": "scaled", "factor": factor, "dist": sub[k]}
    return Scenario.model_validate(d)


def _sensitivity(scn, target, concurrency, warm_pool, hosts, sample, executor, jobs, max_failed, x, best,
                 engines=None):  # fmt: skip
    """One line per scaling: the recommendation there, and whether ours still meets the target."""
    lines = []
    for f in (1 - x, 1 + x):
        p = plan(scaled(scn, f), target, concurrency, warm_pool, hosts, sample, executor, jobs,
                 max_failed=max_failed, check=0, engines=engines)  # fmt: skip
        mine = p.table[[_name(r) == _name(best) for _, r in p.table.iterrows()]]
        holds = bool(len(mine)) and target.met(mine.iloc[0])
        same = p.best is not None and _name(p.best) == _name(best)
        other = _name(p.best) if p.best is not None else None
        if not holds:
            verdict = "MISSES the target" + (f"; {other} meets it" if other else "")
        elif same:
            verdict = "still holds and is still the cheapest"
        else:
            verdict = f"still meets the target, but {other} is cheaper"
        lines.append(f"latencies x{f:.2f}: the recommendation {verdict}")
    return lines


def _name(row) -> str:
    engines = f", {row.engines} engine(s)" if getattr(row, "engines", 0) else ""
    where = f"concurrency {row.concurrency}, warm pool {row.warm_pool}, {row.hosts} host(s){engines}"
    return f"{row.substrate} at {where}"


def _row_of(checked: pd.DataFrame, row) -> pd.Series:
    return checked[[_name(r) == _name(row) for _, r in checked.iterrows()]].iloc[0]


def _check(scn, cands, configs, scenarios, table, size, n_full, max_failed, executor, jobs, target, order):
    """The candidates again at ``size`` trajectories x 3 replications: mean and 95% CI of each
    projected figure; rows that meet the target first, in the target's order."""
    picks, runs = [], []
    for idx in cands.index:
        sub, c, w, h, _n = configs[idx]
        d = set_path(base_dict(scenarios[idx]), "workload.trajectories", size)
        d = set_path(d, "replications", 3)
        picks.append((sub, c, w, h))
        runs.append(Scenario.model_validate(d))
    out = []
    for (sub, c, w, h), res in zip(picks, run_many(runs, executor, jobs, keep_records=True)):
        reps = [_project(row, res, sub, c, w, h, size, n_full, max_failed, rep=int(row.replication))
                for _, row in res.cells.iterrows()]  # fmt: skip
        df = pd.DataFrame(reps)
        row = df.iloc[0].to_dict() | {"checked": size, "replications": len(df)}
        for m in ("makespan_s", "cost_usd", "trajectories_per_hour", "lost_fraction", "cost_per_completed"):
            row[m] = float(df[m].mean())
            row[f"{m}_ci95"] = _ci95(df[m].to_numpy())
        row["within_budget"] = row["lost_fraction"] <= max_failed
        out.append(row)
    for k in ("makespan_s", "cost_usd"):  # replicates that agree exactly have no spread to report
        for r in out:
            r[f"{k}_ci95"] = 0.0 if not np.isfinite(r[f"{k}_ci95"]) else r[f"{k}_ci95"]
    checked = pd.DataFrame(out)
    checked["meets"] = [target.met(r) for r in checked.itertuples()]
    return checked.sort_values(["meets", *order], ascending=[False, True, True]).reset_index(drop=True)


def _ci95(x: np.ndarray) -> float:
    from scipy import stats

    if len(x) < 2:
        return float("nan")
    return float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def _project(s, res, sub, c, w, h, n, n_full, max_failed, rep: int = 0) -> dict:
    """One simulated configuration (summary row ``s``) projected to ``n_full`` trajectories."""
    rec = [r for k, r in res.records.items() if k.replication == rep][0]
    ends = np.sort(rec.end)
    makespan = float(ends[-1])
    if n < n_full:
        lo, hi = ends[int(0.1 * n)], ends[int(0.9 * n) - 1]
        thr = 0.8 * n / (hi - lo) if hi > lo else n / makespan
        makespan = makespan + (n_full - n) / thr
    scale = n_full / n
    inf = res.scenario.cluster.inference
    engines = inf.engines if inf else 0
    gpu_price = inf.price_per_hour if engines else 0.0
    sandbox_cost = s.sandbox_cost_usd * scale
    gpu_cost = engines * makespan / 3600 * gpu_price
    lost = (s.timeouts + s.failed) / s.trajectories
    completed = s.completed * scale
    return {
        "substrate": sub.name,
        "concurrency": c,
        "warm_pool": w,
        "hosts": h,
        "engines": engines,
        "sampled": n,
        "makespan_s": makespan,
        "completed": completed,
        "timeouts": s.timeouts * scale,
        "failed": s.failed * scale,
        "lost_fraction": lost,
        "within_budget": lost <= max_failed,
        "trajectories_per_hour": completed / makespan * 3600,
        "worker_hours": s.worker_hours * scale,
        "sandbox_cost_usd": sandbox_cost,
        "gpu_cost_usd": gpu_cost,
        "cost_usd": sandbox_cost + gpu_cost,
        "cost_per_completed": (sandbox_cost + gpu_cost) / completed if completed else float("inf"),
        "duration_p99": s.duration_p99,
        "gpu_idle_fraction": s.gpu_idle_fraction,
        "kv_queued_fraction": float(s.get("kv_queued_fraction", float("nan"))),
        "peak_sandboxes": s.peak_sandboxes,
        "acquire_wait_mean": float(rec.acquire_wait.mean()),
        "duration_mean": float(rec.duration.mean()),
        "create_rate_used": (s.trajectories + s.retries) / (s.makespan_hours * 3600),
    }
