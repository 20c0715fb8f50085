"""Refits of a substrate profile from resamples of its probe: the profile's input uncertainty.

Each refit fits the same way the point fit did (every candidate distribution, the KS screen, the
contention curves and weights) on a resample of the probe's records taken by block: within each
run and concurrency level, that level's sandboxes are drawn with replacement, each with all its
records (create, execs, teardown), so a level keeps its size and every record keeps the load it
met in the probe (Barton & Schruben 2001, resampling of input data; the block keeps what one
sandbox's operations share). Where the probe has reference blocks (:mod:`.drift`), each refit's
create, exec and teardown latencies are then scaled by a drift factor from the blocks' spread, at
one moment of the probe drawn per refit. The refits' substrates, re-simulated with common random
numbers (:mod:`simrollout.whatif.uncertainty`), give a projection's band.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from ..distributions import parse_dist
from ..errors import InputError
from .drift import NOT_MEASURED, drift_factors

# refits of a plain ``calibrate``: one refit takes about as long as the point fit (0.3-0.5 s on a
# 7,000-record Docker probe), so 50 add half a minute or less; the 5th and 95th percentiles of 50
# lie between the 2nd and 3rd smallest and largest refits
DEFAULT_BOOTSTRAP = 50
MIN_SANDBOXES = 12  # sandboxes at the first level a block resample needs (the fit needs 10 creates)
METHOD = "block bootstrap by level: whole sandboxes resampled within each run and level"
FIELDS = {"create": "cold_start", "exec": "exec_overhead", "teardown": "teardown"}


def sandbox_blocks(records: list[dict]) -> dict[tuple, list[list[dict]]]:
    """Per (run, level), the records of each sandbox (pulls, one at a time, a block each)."""
    blocks: dict[tuple, dict[tuple, list[dict]]] = {}
    for r in records:
        level = (r["run_id"], r["concurrency"])
        box = (r["sandbox"], r["phase"] == "pull")
        blocks.setdefault(level, {}).setdefault(box, []).append(r)
    return {level: list(boxes.values()) for level, boxes in blocks.items()}


def resample(blocks: dict[tuple, list[list[dict]]], rng: np.random.Generator) -> list[dict]:
    """One resample: at each (run, level), as many sandboxes as it had, drawn with replacement."""
    out: list[dict] = []
    for boxes in blocks.values():
        for k in rng.integers(0, len(boxes), len(boxes)):
            out.extend(boxes[k])
    return out


def thin(records: list[dict]) -> tuple[str | None, str | None]:
    """(why a probe is too thin to resample, or None; a note on what its bands leave out, or None)."""
    levels = sorted({r["concurrency"] for r in records if r["phase"] in FIELDS})
    blocks = sandbox_blocks([r for r in records if r["phase"] in FIELDS])
    at_first = sum(len(b) for (_, c), b in blocks.items() if c == levels[0])
    files = ", ".join(sorted({str(r.get("_file", "the records")) for r in records}))
    reason = None
    if at_first < MIN_SANDBOXES:
        reason = (f"{files}: {at_first} sandboxes at concurrency {levels[0]}, at least {MIN_SANDBOXES} are "
                  "needed to resample them (a resample of fewer would often leave the fit under its "
                  "10 samples); probe more sandboxes (--sandboxes)")  # fmt: skip
    note = None
    if len(levels) == 1:
        note = (f"{files}: one concurrency level ({levels[0]}): the refits carry no uncertainty of a "
                "contention curve, which the probe did not measure; probe several levels")  # fmt: skip
    return reason, note


def with_drift(substrate: dict, factors: dict[str, float]) -> dict:
    """``substrate`` with each phase's latency distribution times its drift factor."""
    out = dict(substrate)
    for phase, f in factors.items():
        field = FIELDS.get(phase)
        if field in out and abs(f - 1.0) > 1e-9:
            out[field] = {"kind": "scaled", "factor": round(f, 6), "dist": out[field]}
    return out


def refit(blocks, rng, point: dict, fit_args: dict, choices: dict) -> dict:
    """One refit's substrate (InputError when the resample cannot be fitted), with the point
    fit's ``choices`` (its distribution family per phase and contention weights) kept."""
    from .fit import by_phase_of, fit_substrate

    by_phase = by_phase_of(resample(blocks, rng))
    by_phase.pop("pull", None)
    by_phase.pop("tool", None)  # tool speed is a ratio of the host, not a latency fit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sub, _, _ = fit_substrate(by_phase, **fit_args, choices=choices)
    for key in ("image_cache", "tool_speed"):  # not refitted: kept as the point fit has it
        if key in point:
            sub[key] = point[key]
    if "scope" in point.get("contention", {}):
        sub["contention"]["scope"] = point["contention"]["scope"]
    return sub


def spread(point: dict, substrates: list[dict]) -> dict[str, dict[str, float]]:
    """Per phase, the refits' medians (p50 of the latency distribution) at their 5th and 95th
    percentile, relative to the point fit's."""
    out = {}
    for phase, field in FIELDS.items():
        if field not in point:
            continue
        p = parse_dist(point[field]).ppf(0.5)
        meds = np.array([parse_dist(s[field]).ppf(0.5) for s in substrates])
        if p > 0 and len(meds):
            lo, hi = np.quantile(meds, [0.05, 0.95]) / p - 1
            out[phase] = {"p50_lo": round(float(lo), 4), "p50_hi": round(float(hi), 4)}
    return out


def uncertainty(
    annotated: list[dict],
    point: dict,
    drift: dict | None,
    refits: int,
    seed: int,
    fit_args: dict,
    strict: bool = True,
    name: str = "",
    choices: dict | None = None,
) -> dict:
    """The profile's ``uncertainty`` mapping: ``refits`` refits (:func:`refit`) with their drift.
    A probe too thin to resample (:func:`thin`) is refused (InputError) when ``strict`` (refits
    asked for), else warned about and given no refits."""
    from ..scenario import Substrate

    out = {"method": METHOD, "refits": 0, "seed": seed,
           "drift": drift if drift is not None else NOT_MEASURED,
           "drift_applied": drift is not None}  # fmt: skip
    reason, note = thin(annotated)
    if note:
        warnings.warn(note, stacklevel=3)
        out["note"] = note
    if reason:
        if strict:
            raise InputError(f"--bootstrap {refits}: {reason}; or calibrate with --bootstrap 0.")
        warnings.warn(f"no refits (no bands from this profile): {reason}", stacklevel=3)
        out["refused"] = reason
        out["substrates"] = []
        return out
    blocks = sandbox_blocks(annotated)

    def one(rng: np.random.Generator) -> dict:
        sub = with_drift(refit(blocks, rng, point, fit_args, choices or {}), drift_factors(drift, rng))
        Substrate.model_validate({"name": name or "refit", **sub})
        return sub

    substrates, failed, gave_up = redraw(one, refits, seed)
    if gave_up:  # resamples left a phase under its minimum of samples too often
        raise InputError(f"profile {name}: {gave_up}; the probe is too thin to bootstrap: probe more")
    out["refits"] = len(substrates)
    if failed:
        out["redrawn"] = failed
    out["spread"] = spread(point, substrates)
    out["substrates"] = substrates
    return out


def redraw(refit_one: Callable[[np.random.Generator], dict], refits: int, seed: int) -> tuple[list, int, str]:
    """``refits`` results of ``refit_one(rng)``, the ``k``-th try on its own stream ``[seed, k]``;
    a try whose resample cannot be fitted (InputError) is drawn again, up to ``max(5, refits // 5)``
    times. Returns (the results, the tries drawn again, why it gave up: "" unless it did)."""
    out: list = []
    failed = k = 0
    while len(out) < refits:
        rng = np.random.default_rng([seed, k])
        k += 1
        try:
            out.append(refit_one(rng))
        except InputError as exc:
            failed += 1
            if failed > max(5, refits // 5):
                return out, failed, f"{failed} of {k} resamples could not be fitted ({exc})"
    return out, failed, ""
