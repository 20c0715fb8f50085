"""Plans for a training run: the cheapest substrate, concurrency, warm pool and host count that
reaches a number of training steps per day, finishes ``training.steps`` by a deadline, or stays
within a budget.

Each configuration runs a sample of the training steps; its steady step rate (steps after the
first, which fills the pipeline) projects the whole run: ``time = first step + (steps - 1) / rate``;
sandbox dollars scale per step and GPU dollars (engines, and trainer GPUs when disaggregated) with
the time. A configuration whose masked samples (failed or timed-out trajectories trained as zero
advantage) exceed the failure budget is infeasible. The top candidates are run again with three
replications and the verdict follows that check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError
from ..run.executors import run_many
from ..scenario import Scenario
from ..scenario.overrides import base_dict, set_path
from .planner import Goal, _ci95, configurations


@dataclass
class TrainingPlan:
    target: Goal
    steps_per_day: float | None
    table: pd.DataFrame  # every configuration, projected to the full run
    best: pd.Series | None
    check: pd.DataFrame | None = None
    max_failed: float = 0.001

    def frame(self) -> pd.DataFrame:
        """Every configuration (each is simulated)."""
        return self.table

    def describe(self) -> str:
        if self.best is None:
            fastest = self.table.sort_values("steps_per_day", ascending=False).iloc[0]
            over = int((~self.table.within_budget).sum())
            text = (
                f"No configuration meets {self._what()}. The fastest evaluated ({_name(fastest)}) "
                f"reaches {fastest.steps_per_day:,.1f} steps/day for ${fastest.cost_usd:,.0f}; its "
                f"step is {fastest.bound}."
            )
            if over:
                text += (f" {over} of {len(self.table)} configurations mask more than "
                         f"{self.max_failed:.2%} of their samples (failed or timed out).")  # fmt: skip
            return text
        b = self.best
        text = (
            f"Cheapest: {_name(b)}: {b.steps_per_day:,.1f} steps/day, all {int(b.steps):,} steps in "
            f"{b.time_s / 3600:,.1f} h for ${b.cost_usd:,.0f} (${b.cost_per_step:,.2f} per step, "
            f"{b.masked_fraction:.2%} of samples masked); its step is {b.bound}."
        )
        if self.check is not None and len(self.check):
            c = self.check[self.check.name == _name(b)].iloc[0]
            text += (
                f"\nChecked with {int(c.replications)} replications: {c.steps_per_day:,.1f} ± "
                f"{c.steps_per_day_ci95:,.1f} steps/day, ${c.cost_usd:,.0f} ± {c.cost_usd_ci95:,.0f} "
                "(95% CIs)."
            )
        return text

    def _what(self) -> str:
        t = self.target
        if self.steps_per_day is not None:
            return f"{self.steps_per_day:,.1f} training steps/day"
        if t.deadline_s is not None:
            return f"the deadline of {t.deadline_s / 3600:,.1f} h"
        return f"a budget of ${t.budget_usd:,.0f}"


def _name(row) -> str:
    return f"{row.substrate} at concurrency {row.concurrency}, warm pool {row.warm_pool}, {row.hosts} host(s)"


def _meets(row, target: Goal | None, steps_per_day: float | None) -> bool:
    if not row.within_budget:
        return False
    if steps_per_day is not None:
        return row.steps_per_day >= steps_per_day
    if target.deadline_s is not None:
        return row.time_s <= target.deadline_s
    return row.cost_usd <= target.budget_usd


def _project(scn: Scenario, summary: pd.Series, steps: pd.DataFrame, max_failed: float) -> dict:
    """One configuration's sampled steps projected to ``training.steps``."""
    tr, inf = scn.training, scn.cluster.inference
    ends = steps.end_s.to_numpy()
    done = len(ends)
    if done == 0:
        rate = 0.0
    elif done > 1:
        rate = (done - 1) / (ends[-1] - ends[0])
    else:
        rate = 1.0 / ends[0]
    full = tr.steps
    first = float(ends[0]) if done else math.inf
    time_s = first + (full - 1) / rate if rate > 0 else math.inf
    gpu_per_s = ((inf.engines * inf.price_per_hour) if inf else 0.0) / 3600
    if tr.placement == "disaggregated":
        gpu_per_s += tr.trainer.gpus * tr.trainer.price_per_hour / 3600
    sandbox_per_step = summary.sandbox_cost_usd / done if done else math.inf
    cost = sandbox_per_step * full + gpu_per_s * time_s
    parts = {"generation": steps.generation_s.mean(), "waiting for the last group": steps.last_group_s.mean(),
             "training": steps.train_s.mean(), "weight sync": steps.sync_s.mean()}  # fmt: skip
    masked = summary.masked_samples / summary.trained_samples if summary.trained_samples else 1.0
    return {
        "steps": full,
        "sampled_steps": done,
        "steps_per_day": rate * 86400,
        "time_s": time_s,
        "cost_usd": cost,
        "cost_per_step": cost / full,
        "masked_fraction": masked,
        "within_budget": masked <= max_failed and done == summary.training_steps,
        "bound": "mostly " + max(parts, key=lambda k: parts[k] if not math.isnan(parts[k]) else -1),
    }


def plan_training(
    scn: Scenario,
    target: Goal | None,
    steps_per_day: float | None = None,
    concurrency: list[int] | None = None,
    warm_pool: list[int] | None = None,
    hosts: list[int] | None = None,
    sample_steps: int = 12,
    executor: str = "local",
    jobs: int | None = None,
    progress=None,
    max_failed: float = 0.001,
    check: bool = True,
    top: int = 3,
) -> TrainingPlan:
    """Search the configurations of a scenario with ``training:`` for ``steps_per_day`` or the
    ``target`` (a deadline for all steps, or a budget)."""
    if scn.training is None:
        raise InputError(f"{scn._source}: --steps-per-day needs a scenario with a training section.")
    if (steps_per_day is None) == (target is None):
        raise InputError(
            "plan: give exactly one of --steps-per-day, --deadline or --budget for a training run."
        )
    if target is not None and target.throughput_per_h is not None:
        raise InputError(
            "plan: a training run is planned by --steps-per-day, --deadline or --budget, not --throughput."
        )
    tr = scn.training
    levels = concurrency or sorted(
        {max(8, tr.prompts_per_step * tr.samples_per_prompt // 4) * 2**k for k in range(4)}
    )
    pools = warm_pool or [scn.policy.warm_pool]
    base = set_path(base_dict(scn), "training.steps", min(tr.steps, max(sample_steps, 2)))
    configs, scenarios = [], []
    for sub, c, w, h, d in configurations(scn, base, levels, pools, hosts):
        configs.append({"substrate": sub.name, "concurrency": c, "warm_pool": w, "hosts": h})
        scenarios.append(Scenario.model_validate(d))
    rows = []
    # the projection reads the full run's step count, inference tier and trainer from ``scn``
    for cfg, res in zip(configs, run_many(scenarios, executor, jobs, False, progress)):
        rows.append(cfg | _project(scn, res.summary.iloc[0], res.steps, max_failed))
    table = pd.DataFrame(rows)
    table["name"] = [_name(r) for r in table.itertuples()]
    ok = table[[_meets(r, target, steps_per_day) for r in table.itertuples()]]
    by_time = target is not None and target.budget_usd is not None
    order = ["time_s", "cost_usd"] if by_time else ["cost_usd", "time_s"]
    if ok.empty:
        return TrainingPlan(target, steps_per_day, table, None, max_failed=max_failed)
    ranked = ok.sort_values(order)
    checked = None
    if check:
        checked = _check(
            scn, ranked.head(top), scenarios, table, executor, jobs, max_failed, target, steps_per_day
        )
        checked = checked.sort_values(["meets", *order], ascending=[False, True, True]).reset_index(drop=True)
        if not bool(checked.meets.iloc[0]):
            return TrainingPlan(target, steps_per_day, table, None, checked, max_failed)
        best = ranked[ranked.name == checked.name.iloc[0]].iloc[0]
    else:
        best = ranked.iloc[0]
    return TrainingPlan(target, steps_per_day, table, best, checked, max_failed)


def _check(full, cands, scenarios, table, executor, jobs, max_failed, target, steps_per_day) -> pd.DataFrame:
    runs = [
        Scenario.model_validate(set_path(base_dict(scenarios[i]), "replications", 3)) for i in cands.index
    ]
    out = []
    for idx, res in zip(cands.index, run_many(runs, executor, jobs, False)):
        reps = []
        for r in sorted(res.steps.replication.unique()):
            cell = res.cells[res.cells.replication == r].iloc[0]
            reps.append(_project(full, cell, res.steps[res.steps.replication == r], max_failed))
        df = pd.DataFrame(reps)
        row = table.loc[idx, ["substrate", "concurrency", "warm_pool", "hosts", "name"]].to_dict()
        row["replications"] = len(df)
        for m in ("steps_per_day", "time_s", "cost_usd", "masked_fraction"):
            row[m] = float(df[m].mean())
            ci = _ci95(df[m].to_numpy())
            row[f"{m}_ci95"] = 0.0 if not np.isfinite(ci) else ci
        row["within_budget"] = bool(df.within_budget.all())
        out.append(row)
    checked = pd.DataFrame(out)
    checked["meets"] = [_meets(r, target, steps_per_day) for r in checked.itertuples()]
    return checked
