"""Bands on a projection: the scenario re-simulated over its profiles' refits.

A substrate whose profile holds refits (``uncertainty.substrates``, written by ``calibrate
--bootstrap``) is simulated once per refit, with common random numbers: the same workload draws
and the same random streams (keyed by the scenario's seed and the substrate's name) in every
refit, so the refits differ by their fitted parameters, not by sampling luck. Per row and metric
the band is the 5th to 95th percentile over the refits, written beside the point as ``<metric>_lo``
and ``<metric>_hi``, with a ``band`` column saying where it came from. A substrate without refits
(public figures, a scenario's own numbers) gets no band, and ``band`` says why.

The band is the projection's input uncertainty (how far the probe's finite sample and the
machine's drift during it leave the fit; Barton & Schruben 2001), not the model's error against a
real rollout and not the simulation's own noise (see ``<metric>_ci95`` over replications).

Scenarios of more than :data:`SUBSAMPLE` trajectories (without a training loop) re-simulate the
refits on a sub-sample of that many (at least ten per rollout worker), with the point fit run
there too; each refit's ratio to that point, applied to the full run's point, gives the band.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd

from .errors import InputError
from .runner import RunResult
from .scenario import Scenario, Substrate, _merge, _resolve, load_profile
from .sweeps import base_dict, set_path

BANDED = ("worker_hours", "makespan_hours", "duration_p50", "duration_p99", "completed_duration_p50",
          "completed_duration_p99", "cold_start_p50", "cost_usd", "training_steps_per_day")  # fmt: skip
LO, HI = 5, 95
SUBSAMPLE = 20_000  # trajectories a refit is re-simulated on when the scenario has more
PUBLIC = "none: public figures"


def banded(columns) -> list[str]:
    """The metrics of :data:`BANDED` (and any ``tax_*``) among ``columns``."""
    return [c for c in columns if c in BANDED or (str(c).startswith("tax_") and not str(c).endswith("_ci95"))]


def _dump(sub: dict, name: str) -> dict:
    return Substrate.model_validate({"name": name, **sub}).model_dump(mode="json", by_alias=True,
                                                                      exclude_none=True)  # fmt: skip


def _diff(merged: dict, point: dict) -> dict:
    """What the scenario set over its profile: the fields of ``merged`` unlike ``point``'s."""
    out = {}
    for k, v in merged.items():
        p = point.get(k)
        group = isinstance(v, dict) and "kind" not in v and all(isinstance(x, str) for x in v)
        if group and isinstance(p, dict):
            d = _diff(v, p)
            if d:
                out[k] = d
        elif v != p:
            out[k] = v
    return out


def refits_of(scn: Scenario) -> list[tuple[str, list[dict] | None]]:
    """Per substrate: (what its band comes from, its refits as full substrate mappings with the
    scenario's own settings kept, or None when it has none)."""
    out = []
    for sub in scn.substrates:
        if sub.profile is None:
            out.append((f"{PUBLIC} (the scenario's own numbers)", None))
            continue
        prof = load_profile(_resolve(sub.profile, _source_path(scn)))
        unc = getattr(prof, "uncertainty", None) or {}
        subs = unc.get("substrates") or []
        if not subs:
            if unc.get("refused"):
                out.append(("none: the probe was too thin to bootstrap", None))
            elif "fits" in (prof.model_extra or {}):
                out.append(("none: the profile has no refits (calibrate it again)", None))
            else:
                out.append((PUBLIC, None))
            continue
        merged = sub.model_dump(mode="json", by_alias=True, exclude_none=True)
        own = _diff(merged, _dump(prof.substrate, sub.name))
        out.append((f"bootstrap B={len(subs)}", [_merge(_dump(s, sub.name), own) for s in subs]))
    return out


def _source_path(scn: Scenario):
    from pathlib import Path

    return Path(scn._source)


def _size(scn: Scenario) -> int | None:
    """Trajectories of the re-simulation, or None for the full run."""
    if scn.training is not None or scn.trajectories <= SUBSAMPLE:
        return None
    return min(scn.trajectories, max(SUBSAMPLE, 10 * max(scn.cluster.levels)))


def resimulations(scn: Scenario) -> list[tuple[int, int | None, Scenario]]:
    """The scenarios to run: ``(substrate index, refit index or None for the point, scenario)``,
    each with that one substrate, fidelity fixed to the full run's and one replication; the
    point appears only where the full run's rows cannot serve as the reference."""
    size = _size(scn)
    base = base_dict(scn)
    base["fidelity"] = scn.resolved_fidelity()
    if size is not None:
        base = set_path(base, "workload.trajectories", size)
    need_point = size is not None or scn.replications > 1
    base = set_path(base, "replications", 1)
    out = []
    for i, (_, subs) in enumerate(refits_of(scn)):
        if subs is None:
            continue
        for k, sub in [(None, base["substrates"][i])] * need_point + list(enumerate(subs)):
            d = copy.deepcopy(base)
            d["substrates"] = [sub]
            s = Scenario.model_validate(d)
            s._source = scn._source
            out.append((i, k, s))
    return out


def attach(scn: Scenario, summary: pd.DataFrame, runs: list[tuple[int, int | None, pd.DataFrame]]):
    """``summary`` with ``<metric>_lo``, ``<metric>_hi`` and ``band`` from the re-simulations'
    summaries (``runs``: substrate index, refit index or None, summary)."""
    out = summary.copy()
    labels = refits_of(scn)
    size = _size(scn)
    metrics = banded(out.columns)
    for m in metrics:
        out[f"{m}_lo"], out[f"{m}_hi"] = np.nan, np.nan
    out["band"] = ""
    for i, (label, subs) in enumerate(labels):
        name = scn.substrates[i].name
        rows = out.index[out.substrate == name]
        if subs is None:
            out.loc[rows, "band"] = label
            continue
        if size is not None:
            label += f", sub-sample n={size:,} (each refit's ratio to the point there, times the full run's)"
        out.loc[rows, "band"] = label
        point = next((s for j, k, s in runs if j == i and k is None), None)
        refit = [s for j, k, s in runs if j == i and k is not None]
        for r in rows:
            c = out.at[r, "concurrency"]
            ref = point if point is not None else summary[summary.substrate == name]
            ref = ref[ref.concurrency == c].iloc[0]
            for m in metrics:
                vals = np.array([float(s[s.concurrency == c].iloc[0][m]) for s in refit if m in s])
                base = float(ref[m])
                if not len(vals) or not np.isfinite(base):
                    continue
                if base == 0:  # nothing to scale: the refits' own values
                    lo, hi = np.percentile(vals, [LO, HI])
                else:
                    lo, hi = float(out.at[r, m]) * np.percentile(vals / base, [LO, HI])
                out.at[r, f"{m}_lo"], out.at[r, f"{m}_hi"] = float(lo), float(hi)
    return _beside(out, metrics)


def _beside(df: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """``df`` with each metric's ``_lo`` and ``_hi`` right after it (and its ``_ci95``)."""
    added = {c for m in metrics for c in (f"{m}_lo", f"{m}_hi")}
    order = []
    for c in df.columns:
        if c in added:
            continue
        order.append(c)
        m = c[: -len("_ci95")] if c.endswith("_ci95") else c
        if m in metrics and (c.endswith("_ci95") or f"{m}_ci95" not in df.columns):
            order += [f"{m}_lo", f"{m}_hi"]
    return df[order]


def with_bands(scn: Scenario, result: RunResult, jobs: int | None = None, executor: str = "local",
               progress=None, address: str | None = None) -> RunResult:  # fmt: skip
    """``result`` (the plain run of ``scn``) with bands on its summary (:func:`attach`)."""
    from .executors import run_many

    todo = resimulations(scn)
    done = run_many([s for *_, s in todo], executor, jobs, False, progress, address) if todo else []
    runs = [(i, k, res.summary) for (i, k, _), res in zip(todo, done)]
    result.summary = attach(scn, result.summary, runs)
    return result


def run_with_bands(scn: Scenario, jobs: int | None = None, executor: str = "local", progress=None,
                   address: str | None = None, **run_kw) -> RunResult:  # fmt: skip
    """Run ``scn`` (as :func:`simrollout.executors.run_scenario`) and its re-simulations over the
    refits: the result's summary carries ``<metric>_lo``, ``<metric>_hi`` and ``band``."""
    from .executors import run_scenario

    if executor not in ("local", "serial", "ray"):
        raise InputError(f"--executor: expected one of ['local', 'serial', 'ray'], got '{executor}'.")
    result = run_scenario(scn, jobs=jobs, executor=executor, progress=progress, address=address, **run_kw)
    return with_bands(scn, result, jobs, executor, None, address)


def band_text(row, m: str, fmt: str) -> str:
    """``point [lo-hi]`` for the table (the point alone without a band)."""
    point = fmt.format(row[m])
    lo, hi = row.get(f"{m}_lo"), row.get(f"{m}_hi")
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return point
    return f"{point} [{fmt.format(lo)}-{fmt.format(hi)}]"
