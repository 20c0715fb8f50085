"""Probe records -> a substrate's fitted phases: the records checked, each one's load annotated,
each phase's family (:mod:`.families`) and contention curve (:mod:`.load_curves`) fitted, and the
substrate mapping with its diagnostics. :mod:`.calibrate` turns that into a profile.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..distributions import dump_dist
from ..distributions.contention import Curve
from ..distributions.families import MIN_SAMPLES, fit_phase
from ..errors import InputError
from ..scenario import PHASES
from .load_curves import (
    SHARED,
    coverage,
    curve_by_load,
    curve_per_level,
    in_flight,
    operation_weights,
    slope,
)

LOCAL = ("docker", "process", "synthetic")  # backends probed on the host they measure: scope host
PHASE_FIELD = {"create": "cold_start", "exec": "exec_overhead", "teardown": "teardown"}


def record_files(records: list[dict]) -> str:
    """The files ``records`` were read from (``read_records`` notes each one's), for messages."""
    return ", ".join(sorted({str(r.get("_file", "<records>")) for r in records})) or "<no records>"


def check_records(records: list[dict]) -> dict[str, dict]:
    """Group by phase; refuse NaN/negative latencies, too few samples and failure-only phases."""
    if not records:
        raise InputError("no probe records; probe first ('simrollout probe').")
    files = record_files(records)
    by_phase: dict[str, list[dict]] = {}
    for r in records:
        by_phase.setdefault(r["phase"], []).append(r)
    for phase, rs in by_phase.items():
        lat = np.array([r["latency"] if r["latency"] is not None else np.nan for r in rs], dtype=float)
        bad = ~np.isfinite(lat) | (lat < 0)
        if bad.any():
            first = rs[int(np.flatnonzero(bad)[0])]
            raise InputError(
                f"{first['_file']}: line {first['_line']}: field 'latency' is {first['latency']!r} "
                f"(phase '{phase}' has {int(bad.sum())} NaN, infinite or negative latencies); "
                "expected seconds >= 0."
            )
    for phase in PHASE_FIELD:
        rs = by_phase.get(phase, [])
        ok = sum(r["ok"] for r in rs)
        if rs and ok == 0:
            raise InputError(
                f"{files}: phase '{phase}': all {len(rs)} records are failures; nothing to fit. Check "
                "the backend and image, then probe again."
            )
        if ok < MIN_SAMPLES:
            raise InputError(
                f"{files}: phase '{phase}': {ok} successful samples, at least {MIN_SAMPLES} are needed "
                "for a fit; probe more sandboxes or commands."
            )
    return by_phase


def answered_levels(records: list[dict]) -> tuple[list[dict], list[str]]:
    """Leave out the levels where the engine stopped answering: half or more of a level's
    operations timed out on the client (an error named ``...Timeout...``). Their timeouts are not
    a failure rate and their latencies are the client's limit. Occasional timeouts stay failures."""
    levels: dict[tuple, list[dict]] = {}
    for r in records:
        levels.setdefault((r["run_id"], r["concurrency"]), []).append(r)
    gone, notes = set(), []
    for (run, c), rs in levels.items():
        timeouts = sum(not r["ok"] and "timeout" in str(r.get("error") or "").lower() for r in rs)
        if timeouts >= 0.5 * len(rs):
            gone.add((run, c))
            notes.append(f"run {run}, concurrency {c}: {timeouts} of {len(rs)} operations timed out on the "
                         "client (the engine stopped answering); the level is left out")  # fmt: skip
    kept = [r for r in records if (r["run_id"], r["concurrency"]) not in gone] if gone else records
    for note in notes:
        warnings.warn(note + ". Probe that level again on a healthy engine.", stacklevel=3)
    if notes and not kept:
        raise InputError(f"{record_files(records)}: every level's operations timed out on the client: "
                         f"{'; '.join(notes)}. "
                         "Nothing to fit: restart the engine and probe again.")  # fmt: skip
    return kept, notes


def think_times(records: list[dict]) -> list[float] | dict[str, float]:
    """The probe's think times: the few fixed ones, or how the drawn ones spread."""
    t = np.array([r["think"] for r in records if r["phase"] == "exec" and r.get("think") is not None])
    if len(np.unique(t)) <= 4:
        return sorted(set(t[t > 0].tolist()))
    return {"drawn_mean": round(float(t.mean()), 4), "p50": round(float(np.median(t)), 4),
            "p99": round(float(np.quantile(t, 0.99)), 4)}  # fmt: skip


def pull_rate(pulls: list[dict]) -> float | None:
    """MB/s of task image loads: the median of archive bytes over load time, successful ones."""
    rates = [
        r["bytes"] / r["latency"] / 2**20 for r in pulls if r["ok"] and r.get("bytes") and r["latency"] > 0
    ]
    return round(float(np.median(rates)), 2) if rates else None


def annotate(records: list[dict], shared: bool, weights: bool) -> list[dict]:
    """Copies of ``records`` with what the fit reads of each record's neighbours, computed once on
    the probe as measured (a resample of whole sandboxes keeps each record's own load):
    ``_load`` (operations in flight at its start), ``_life`` (averaged over its life, with
    ``shared``), ``_count`` (per phase in flight at its start, with ``weights``) and ``_drain``
    (it ended after its level's last create started, with ``shared``)."""
    load = in_flight(records)
    life = in_flight(records, over_life=True) if shared else load
    counts = {ph: in_flight(records, ph) for ph in PHASES} if weights else {}
    refilled: dict[tuple, float] = {}  # per run and level: the last create's start (then it drains)
    for r in records if shared else ():
        if r["phase"] == "create":
            key = (r["run_id"], r["concurrency"])
            refilled[key] = max(refilled.get(key, -np.inf), r["start"])
    out = []
    for k, r in enumerate(records):
        a = dict(r, _load=float(load[k]), _life=float(life[k]))
        if weights:
            a["_count"] = {ph: float(counts[ph][k]) for ph in PHASES}
        if shared:
            a["_drain"] = r["start"] + r["latency"] > refilled.get((r["run_id"], r["concurrency"]), np.inf)
        out.append(a)
    return out


def fit_substrate(
    by_phase: dict[str, list[dict]],
    criterion: str = "aic",
    points: str = "per-operation",
    weights: bool = True,
    shared: bool = True,
    paced: bool = False,
    choices: dict | None = None,
) -> tuple[dict, dict, dict]:
    """Annotated records (:func:`annotate`) by phase -> (substrate mapping, per-phase fits, plots).
    Pull records are not read here; ``weights`` and ``shared`` as resolved by :func:`calibrate`.
    ``choices`` (a bootstrap refit): ``{"families": {phase: name}, "weights": {phase: weights}}``
    of the point fit, kept instead of chosen again; the per-phase fits then carry no diagnostics."""
    families = (choices or {}).get("families", {})
    fitted_weights: dict[str, dict[str, float]] = {}
    substrate: dict = {"failures": {}, "contention": {}}
    fits_out, plots = {}, {}
    for phase, rs in by_phase.items():
        # a shared phase's curve is read on the load it felt over its life, as the model applies it
        sharing = shared and phase in SHARED
        felt = "_life" if sharing else "_load"
        levels = sorted({r["concurrency"] for r in rs})
        base = np.array([r["latency"] for r in rs if r["ok"] and r["concurrency"] == levels[0]])
        if len(base) < MIN_SAMPLES:
            if phase in PHASE_FIELD:
                raise InputError(
                    f"{record_files(rs)}: phase '{phase}': {len(base)} successful samples at "
                    f"concurrency {levels[0]}, "
                    f"at least {MIN_SAMPLES} are needed for a fit."
                )
            warnings.warn(f"phase '{phase}': only {len(base)} samples; not fitted", stacklevel=2)
            continue
        fit = fit_phase(base, criterion, families.get(phase))
        per_level, curve = {}, {}
        for c in levels:
            at = [r for r in rs if r["concurrency"] == c]
            lat = np.array([r["latency"] for r in at if r["ok"]])
            per_level[int(c)] = {
                "n": len(at),
                "failures": len(at) - len(lat),
                "in_flight": round(float(np.mean([r[felt] for r in at])), 3),
                "median": float(np.median(lat)) if len(lat) else None,
                "p99": float(np.quantile(lat, 0.99)) if len(lat) else None,
            }
        m0 = per_level[levels[0]]["median"]
        if points == "per-level":
            curve = curve_per_level(per_level, m0)
        elif len(levels) > 1:
            ok = [r for r in rs if r["ok"]]
            if sharing:  # left out: a level's drain, where an operation still in flight is a long one
                ok = [r for r in ok if not r["_drain"]]
            n = np.array([r[felt] for r in ok])
            w = None
            # weights only at the start: on the load over an operation's life they fit a known
            # unweighted model's noise (tests/calibration/test_fit.py)
            if weights and phase in PHASES and not sharing:
                counts = {q: np.array([r["_count"][q] for r in ok]) for q in PHASES}
                if choices is not None:
                    w = (choices.get("weights") or {}).get(phase)
                else:
                    w = operation_weights(phase, np.array([r["latency"] for r in ok]), counts)
            if w:  # each operation in flight at its weight
                fitted_weights[phase] = w
                n = sum(w.get(q, 1.0) * counts[q] for q in PHASES)
            curve = curve_by_load(list(zip(n.tolist(), (r["latency"] for r in ok))), m0)
        if choices is not None:  # a refit: its substrate only
            fits_out[phase] = {"selected": fit["selected"]}
        else:
            fits_out[phase] = _diagnostics(fit, per_level, curve, fitted_weights.get(phase), phase, paced)
        plots[phase] = (base, fit["dist"], fit["selected"])
        if phase == "reset":
            substrate["reset"] = dump_dist(fit["dist"])
        if phase in PHASE_FIELD:
            substrate[PHASE_FIELD[phase]] = dump_dist(fit["dist"])
            total = sum(p["n"] for p in per_level.values())
            fails = sum(p["failures"] for p in per_level.values())
            substrate["failures"][phase] = fails / total if total else 0.0
            if fails and len(levels) > 1:  # how failures grow with operations in flight
                substrate["failures"][phase] = {
                    max(1.0, lv["in_flight"]): round(lv["failures"] / lv["n"], 5) for lv in per_level.values()
                }
            substrate["contention"][phase] = curve or 0.0
    if fitted_weights:
        substrate["contention"]["weights"] = {ph: dict(w) for ph, w in fitted_weights.items()}
    if shared and any(isinstance(substrate["contention"].get(ph), dict) for ph in SHARED):
        substrate["contention"]["shared"] = True
    return substrate, fits_out, plots


def _diagnostics(
    fit: dict, per_level: dict, curve: dict, weights: dict | None, phase: str, paced: bool
) -> dict:
    """A phase's entry under the profile's ``fits``."""
    return {k: v for k, v in fit.items() if k != "dist"} | {
        "by_concurrency": per_level,
        "contention_slope": slope(list(curve), list(curve.values())),
        "contention_law": Curve(curve).describe() if curve else None,
        "contention_weights": weights,
        "coverage": coverage(per_level, paced) if phase in PHASE_FIELD else None,
    }


def by_phase_of(records: list[dict]) -> dict[str, list[dict]]:
    """Records grouped by phase, in the order the phases first appear."""
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["phase"], []).append(r)
    return out
