"""A plan's recommendation across the profiles' refits (``plan --uncertainty``): how often it
stays the winner, meets the target, and its cost and makespan band."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..scenario import Scenario
from .sweeps import base_dict, set_path
from .uncertainty import HI, LO, _with_refit, joint_refits

PLAN_REFITS = 20  # refits a plan's candidates are re-simulated over (the first of each profile's)


def plan_stability(scn: Scenario, result, executor: str = "local", jobs: int | None = None, top: int = 3,
                   refits: int = PLAN_REFITS) -> dict | None:  # fmt: skip
    """How often a plan's recommendation stays the winner across the profiles' refits: its top
    ``top`` candidates (those meeting the target, in the plan's order) re-simulated at the
    plan's sample size over the first ``refits`` refits of each substrate's profile (common random
    numbers; a substrate without refits keeps its figures), the winner of each refit the first
    candidate meeting the target. None when the plan has no recommendation."""
    from ..run.executors import run_many
    from .planner import _name, _project

    if result.best is None:
        return None
    t, target = result.table, result.target
    order = ["makespan_s", "cost_usd"] if target.budget_usd is not None else ["cost_usd", "makespan_s"]
    met = t[[target.met(r) for r in t.itertuples()]].sort_values(order)
    cands = met[[_name(r) != _name(result.best) for _, r in met.iterrows()]].head(top - 1)
    cands = pd.concat([result.best.to_frame().T, cands])
    sources = dict(zip((s.name for s in scn.substrates), joint_refits(scn)))
    if not any(sources[r.substrate][1] for _, r in cands.iterrows()):
        return {"band": sources[result.best.substrate][0], "refits": 0}
    n_refits = min(refits, max(len(sources[r.substrate][1] or []) for _, r in cands.iterrows()))
    base = base_dict(scn)
    names = [s.name for s in scn.substrates]
    todo = []
    for k in range(n_refits):
        for idx, r in cands.iterrows():
            subs = sources[r.substrate][1]
            if not subs:
                continue
            sub, engine = subs[k % len(subs)]
            i = names.index(r.substrate)
            d = _with_refit(base, i, sub, engine)
            d = set_path(d, "substrates", [d["substrates"][i]])
            d = set_path(d, "substrates.0.capacity.hosts", int(r.hosts))
            d = set_path(d, "cluster.concurrency", int(r.concurrency))
            d = set_path(d, "policy.warm_pool", int(r.warm_pool))
            if r.engines and scn.cluster.inference is not None:
                d = set_path(d, "cluster.inference.engines", int(r.engines))
            d = set_path(set_path(d, "replications", 1), "workload.trajectories", int(r.sampled))
            todo.append((k, idx, Scenario.model_validate(d)))
    done = run_many([s for *_, s in todo], executor, jobs, keep_records=True)
    figures = {}
    for (k, idx, _), res in zip(todo, done):
        r = cands.loc[idx]
        sub = scn.substrates[names.index(r.substrate)]
        c, w, h, n = int(r.concurrency), int(r.warm_pool), int(r.hosts), int(r.sampled)
        row = _project(res.summary.iloc[0], res, sub, c, w, h, n, scn.trajectories, result.max_failed)
        figures[(k, idx)] = pd.Series(row)
    wins = meets = 0
    best_idx = cands.index[0]
    cost, makespan = [], []
    for k in range(n_refits):
        rows = {idx: figures.get((k, idx), cands.loc[idx]) for idx in cands.index}
        ok = [idx for idx, row in rows.items() if target.met(row)]
        winner = min(ok, key=lambda i: tuple(rows[i][o] for o in order)) if ok else None
        wins += winner == best_idx
        meets += best_idx in ok
        cost.append(float(rows[best_idx].cost_usd))
        makespan.append(float(rows[best_idx].makespan_s))
    return {"band": sources[result.best.substrate][0], "refits": n_refits, "candidates": len(cands),
            "banded": bool(sources[result.best.substrate][1]),
            "wins": int(wins), "meets": int(meets),
            "cost_usd": [float(x) for x in np.percentile(cost, [LO, HI])],
            "makespan_s": [float(x) for x in np.percentile(makespan, [LO, HI])]}  # fmt: skip


def describe_stability(s: dict | None) -> str:
    """One line on :func:`plan_stability`'s result."""
    if s is None:
        return "Across the refits: no recommendation to hold."
    if not s["refits"]:
        return f"Across the refits: no band ({s['band']})."
    n = s["refits"]
    (c0, c1), (m0, m1) = s["cost_usd"], s["makespan_s"]
    figures = (f"its cost ${c0:,.0f}-${c1:,.0f}, makespan {m0 / 3600:,.1f}-{m1 / 3600:,.1f} h (5th-95th "
               "percentile)" if s["banded"] else f"its own figures have no band ({s['band']})")  # fmt: skip
    return (f"Across {n} refits of the profiles (common random numbers, the top {s['candidates']} "
            f"candidates): the recommendation stays the winner in {s['wins']} of {n} ({s['wins'] / n:.0%}) "
            f"and meets the target in {s['meets']} of {n}; {figures}.")  # fmt: skip
