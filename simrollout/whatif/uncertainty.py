"""Bands on a projection: the scenario re-simulated over its profiles' refits.

A substrate whose profile holds refits (``uncertainty.substrates``, written by ``calibrate
--bootstrap``) is simulated once per refit, with common random numbers: the same workload draws
and the same random streams (keyed by the scenario's seed and the substrate's name) in every
refit, so the refits differ by their fitted parameters, not by sampling luck. Per row and metric
the band is the 5th to 95th percentile over the refits, written beside the point as ``<metric>_lo``
and ``<metric>_hi``, with a ``band`` column saying where it came from. A substrate without refits
(public figures, a scenario's own numbers) gets no band, and ``band`` says why.

The refits give the projection's input uncertainty (how far the probe's finite sample and the
machine's drift during it leave the fit; Barton & Schruben 2001), kept as ``<metric>_input_lo`` /
``_input_hi``; the band itself also holds the model's own error against real rollouts
(:mod:`.model_band`, from the validation suites' held-out residuals), not the simulation's own
noise (see ``<metric>_ci95`` over replications).

Scenarios of more than :data:`SUBSAMPLE` trajectories (without a training loop) re-simulate the
refits on a sub-sample of that many (at least ten per rollout worker), with the point fit run
there too; each refit's ratio to that point, applied to the full run's point, gives the band.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd

from ..run.runner import RunResult
from ..scenario import Scenario, Substrate, load_profile
from ..scenario.base import merge
from ..scenario.files import _resolve
from ..sim.route import resolved_fidelity
from .model_band import TRAINING_METRICS, source_path, widen
from .sweeps import base_dict, set_path

BANDED = ("worker_hours", "makespan_hours", "duration_p50", "duration_p99", "completed_duration_p50",
          "completed_duration_p99", "cold_start_p50", "cost_usd", "llm_request_p50", "llm_request_p99",
          *TRAINING_METRICS)  # fmt: skip
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
        prof = load_profile(_resolve(sub.profile, source_path(scn)))
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
        out.append((f"bootstrap B={len(subs)}", [merge(_dump(s, sub.name), own) for s in subs]))
    return out


def _dump_engine(engine) -> dict:
    from ..scenario import Engine

    return Engine.model_validate(engine).model_dump(mode="json", exclude_none=True)


def engine_refits(scn: Scenario) -> tuple[str, list[dict] | None]:
    """The inference engine's (what its band comes from, its refits as engine mappings with the
    scenario's own settings kept, or None): refits where its profile holds them
    (``uncertainty.engines``, ``calibrate --bootstrap`` on ``probe openai`` records)."""
    from ..scenario import load_engine_profile

    inf = scn.cluster.inference
    if inf is None or inf.engine is None:
        return "", None
    if inf.profile is None:
        return "engine: none (the scenario's own numbers)", None
    where = "cluster.inference.profile"
    prof = load_engine_profile(_resolve(inf.profile, source_path(scn), "engine", where))
    unc = getattr(prof, "uncertainty", None) or {}
    engines = unc.get("engines") or []
    if not engines:
        if unc.get("refused"):
            return "engine: none (the probe was too thin to bootstrap)", None
        if "fit" in (prof.model_extra or {}):
            return "engine: none (the profile has no refits; calibrate it again)", None
        return "engine: none (public figures)", None
    own = _diff(_dump_engine(inf.engine), _dump_engine(prof.engine))
    return f"engine bootstrap B={len(engines)}", [merge(_dump_engine(e), own) for e in engines]


def training_refits(scn: Scenario) -> tuple[str, list[dict] | None]:
    """The training section's (what its band comes from, its refits as whole sections with the
    scenario's own fields kept, or None): ``training: {import: PROFILE}`` whose profile holds
    refits (``uncertainty.training``, ``calibrate --training``)."""
    from ..errors import load_yaml
    from ..scenario import Training

    imported = scn.training._import if scn.training is not None else None
    if imported is None:
        return "", None
    path, own = imported
    data, _ = load_yaml(path)
    refits = (data.get("uncertainty") or {}).get("training") or []
    if not refits:
        return "training: none (the profile has no refits)", None

    def full(fragment: dict) -> dict:
        return Training.model_validate(merge(fragment, own)).model_dump(mode="json", by_alias=True,
                                                                        exclude_none=True)  # fmt: skip

    now = scn.training.model_dump(mode="json", by_alias=True, exclude_none=True)
    later = _diff(now, full(data["training"]))  # what was set since (--set), kept in every refit
    return f"training bootstrap B={len(refits)}", [merge(full(merge(data["training"], r)), later)
                                                   for r in refits]  # fmt: skip


def other_refits(scn: Scenario) -> tuple[str, list[dict] | None]:
    """The engine's and the training section's refits, paired by index (the shorter list taken
    round again): each ``{"engine": mapping or None, "training": mapping or None}``."""
    (elabel, engines), (tlabel, trains) = engine_refits(scn), training_refits(scn)
    label = "; ".join(x for x in (elabel, tlabel) if x)
    if engines is None and trains is None:
        return label, None
    n = max(len(engines or []), len(trains or []))
    pick = lambda xs, k: xs[k % len(xs)] if xs else None  # noqa: E731
    return label, [{"engine": pick(engines, k), "training": pick(trains, k)} for k in range(n)]


Pairs = list[tuple[dict | None, dict | None]]


def joint_refits(scn: Scenario, sources=None) -> list[tuple[str, Pairs | None]]:
    """Per substrate: (what its band comes from, its joint refits, or None): refit ``k`` pairs the
    substrate's refit ``k`` with the engine's and the training section's refit ``k`` (the probes
    and logs were resampled independently, so a pair is one draw of every input), the shorter list
    taken round again; None in a pair keeps that input's point fit. ``sources``:
    :func:`refits_of` if already read."""
    sources = refits_of(scn) if sources is None else sources
    label, engines = other_refits(scn)
    out = []
    for sub_label, subs in sources:
        if engines is None:
            joined = f"{sub_label}; {label}" if label else sub_label
            out.append((joined, [(s, None) for s in subs] if subs else None))
            continue
        n = max(len(subs or []), len(engines))
        pairs = [(subs[k % len(subs)] if subs else None, engines[k % len(engines)]) for k in range(n)]
        out.append((f"{sub_label}; {label}", pairs))
    return out


def _with_refit(d: dict, i: int, sub: dict | None, other: dict | None) -> dict:
    """Scenario mapping ``d`` with substrate ``i``, the engine and the training section replaced
    where given (``other``: :func:`other_refits`' pair)."""
    d = copy.deepcopy(d)
    if sub is not None:
        d["substrates"][i] = sub
    if other is not None and other["engine"] is not None:
        d["cluster"]["inference"]["engine"] = other["engine"]
    if other is not None and other["training"] is not None:
        d["training"] = other["training"]
    return d


def _size(scn: Scenario, refits: int) -> int | None:
    """Trajectories of the re-simulation, or None for the full run: above :data:`SUBSAMPLE`
    (without a training loop), a sub-sample of ten per rollout worker or more, and small enough
    that the refits together simulate at most 1.5 x the full run."""
    n_full = scn.trajectories
    if scn.training is not None or n_full <= SUBSAMPLE:
        return None
    n = min(n_full, max(SUBSAMPLE, 10 * max(scn.cluster.levels)), int(1.5 * n_full / max(refits, 1)))
    return max(n, min(n_full, SUBSAMPLE // 4))


def variants(scn: Scenario, sources=None) -> list[tuple[int, int | None, dict]]:
    """The re-simulations: ``(substrate index, refit index or None for the point, scenario
    mapping)``, each mapping the whole scenario with that substrate's refit in its place (the
    others as they are), fidelity fixed to the full run's and one replication; sub-sampled per
    :func:`_size`. The point appears only where the full run's rows cannot serve as the reference
    (a sub-sample, or several replications). ``sources``: :func:`refits_of` if already read."""
    joint = joint_refits(scn, sources)
    most = max((len(subs) for _, subs in joint if subs), default=0)
    size = _size(scn, most)
    base = base_dict(scn)
    base["fidelity"] = resolved_fidelity(scn)
    if size is not None:
        base = set_path(base, "workload.trajectories", size)
    need_point = size is not None or scn.replications > 1
    base = set_path(base, "replications", 1)
    out = []
    for i, (_, pairs) in enumerate(joint):
        if pairs is None:
            continue
        if need_point:
            out.append((i, None, copy.deepcopy(base)))
        for k, (sub, engine) in enumerate(pairs):
            out.append((i, k, _with_refit(base, i, sub, engine)))
    return out


def only(data: dict, i: int) -> Scenario:
    """The scenario of ``data`` with substrate ``i`` alone (its random streams are keyed by its
    name, so its cells draw the same numbers as in the whole scenario)."""
    d = copy.deepcopy(data)
    d["substrates"] = [d["substrates"][i]]
    return Scenario.model_validate(d)


Term = bool | dict  # the model's error: the shipped term (True), none (False), or a term table


def attach(scn: Scenario, summary: pd.DataFrame, runs: list[tuple[int, int | None, pd.DataFrame]],
           keys: tuple[str, ...] = ("concurrency",), sources=None, model_error: Term = True):  # fmt: skip
    """``summary`` with ``<metric>_lo``, ``<metric>_hi`` and ``band`` from the re-simulations'
    summaries (``runs``: substrate index, refit index or None, summary); rows are matched on the
    substrate and ``keys``. ``model_error``: widened by the model's own error (:mod:`.model_band`;
    a dict: that term table in place of the shipped one); False (the validation suites, which
    measure that error): the refits' band alone."""
    out = summary.copy()
    labels = joint_refits(scn, sources)
    size = _size(scn, max((len(s) for _, s in labels if s), default=0))
    metrics = banded(out.columns)
    for m in metrics:
        out[f"{m}_lo"], out[f"{m}_hi"] = np.nan, np.nan
    out["band"] = ""

    def match(df: pd.DataFrame, row) -> pd.Series | None:
        hit = df[np.logical_and.reduce([df[k].astype(str) == str(row[k]) for k in keys])] if keys else df
        return hit.iloc[0] if len(hit) else None

    for i, (label, subs) in enumerate(labels):
        name = scn.substrates[i].name
        rows = out.index[out.substrate == name]
        if subs is None:
            out.loc[rows, "band"] = label
            continue
        if size is not None:
            label += f", sub-sample n={size:,} (each refit's ratio to the point there, times the full run's)"
        out.loc[rows, "band"] = label
        mine = [(k, s) for j, k, s in runs if j == i]
        points = [s for k, s in mine if k is None]
        point = pd.concat(points) if points else summary[summary.substrate == name]
        refit = [
            pd.concat([s for kk, s in mine if kk == k])
            for k in dict.fromkeys(k for k, _ in mine)
            if k is not None
        ]
        for r in rows:
            ref = match(point, out.loc[r])
            at = [match(s, out.loc[r]) for s in refit]
            if ref is None:
                continue
            for m in metrics:
                vals = np.array([float(a[m]) for a in at if a is not None and m in a])
                base = float(ref[m])
                if not len(vals) or not np.isfinite(base):
                    continue
                if base == 0:  # nothing to scale: the refits' own values
                    lo, hi = np.percentile(vals, [LO, HI])
                else:
                    lo, hi = float(out.at[r, m]) * np.percentile(vals / base, [LO, HI])
                out.at[r, f"{m}_lo"], out.at[r, f"{m}_hi"] = float(lo), float(hi)
    if model_error is not False:
        out = widen(scn, out, metrics, model_error if isinstance(model_error, dict) else None)
    return _beside(out, metrics)


def _beside(df: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """``df`` with each metric's ``_lo`` and ``_hi`` (and its input band's) right after it (and its
    ``_ci95``)."""
    parts = ("_lo", "_hi", "_input_lo", "_input_hi")
    added = {f"{m}{p}" for m in metrics for p in parts if f"{m}{p}" in df.columns}
    order = []
    for c in df.columns:
        if c in added:
            continue
        order.append(c)
        m = c[: -len("_ci95")] if c.endswith("_ci95") else c
        if m in metrics and (c.endswith("_ci95") or f"{m}_ci95" not in df.columns):
            order += [f"{m}{p}" for p in parts if f"{m}{p}" in df.columns]
    return df[order]


def with_bands(scn: Scenario, result: RunResult, jobs: int | None = None, executor: str = "local",
               progress=None, address: str | None = None, model_error: Term = True) -> RunResult:  # fmt: skip
    """``result`` (the plain run of ``scn``) with bands on its summary (:func:`attach`)."""
    from ..run.executors import run_many

    todo = variants(scn)
    done = (
        run_many([only(d, i) for i, _, d in todo], executor, jobs, False, progress, address) if todo else []
    )
    runs = [(i, k, res.summary) for (i, k, _), res in zip(todo, done)]
    result.summary = attach(scn, result.summary, runs, model_error=model_error)
    return result


def run_with_bands(scn: Scenario, jobs: int | None = None, executor: str = "local", progress=None,
                   address: str | None = None, model_error: Term = True, **run_kw) -> RunResult:  # fmt: skip
    """Run ``scn`` (as :func:`simrollout.run.executors.run_scenario`) and its re-simulations over the
    refits: the result's summary carries ``<metric>_lo``, ``<metric>_hi`` and ``band``."""
    from ..run.executors import run_scenario

    result = run_scenario(scn, jobs=jobs, executor=executor, progress=progress, address=address, **run_kw)
    return with_bands(scn, result, jobs, executor, None, address, model_error)


def sweep_with_bands(scn: Scenario, sets: dict[str, list], df: pd.DataFrame, executor: str = "local",
                     jobs: int | None = None, address: str | None = None, progress=None):  # fmt: skip
    """A sweep's table (``df``, from :func:`simrollout.whatif.sweeps.sweep`) with bands: every grid point
    re-simulated over the refits, the ``--set`` values applied over each refit."""
    import itertools

    from ..run.executors import run_many

    paths = list(sets)
    sources = refits_of(scn)
    todo = []
    for i, k, d in variants(scn, sources):
        for combo in itertools.product(*(sets[p] for p in paths)):
            data = d
            for path, v in zip(paths, combo):
                data = set_path(data, path, v)
            todo.append((i, k, combo, only(data, i)))
    done = run_many([s for *_, s in todo], executor, jobs, False, progress, address) if todo else []
    runs = []
    for (i, k, combo, _), res in zip(todo, done):
        frame = res.summary.copy()
        for path, v in zip(paths, combo):
            frame[path] = v if not isinstance(v, list) else str(v)
        runs.append((i, k, frame))
    return attach(scn, df, runs, keys=(*paths, "concurrency"), sources=sources)
