"""How far the machine moved during a probe, read from its reference blocks.

A probe repeats a short reference block (a few sandboxes at its first level, one fill of its top
level; ``probe openai``: a few requests at level 1 and at its top level) at its start, in its
middle and at its end; those records carry ``reference: true`` and ``block`` (0 = start, the last
= end). Per phase and level, the median latency of each block against the start block's is the
drift. The fit leaves these records out; the bootstrap (:mod:`.bootstrap`) scales each refit's
phase by a factor drawn from the blocks' spread.

>>> recs = [{"reference": True, "block": b, "phase": "exec", "concurrency": 1, "ok": True,
...          "latency": x} for b, x in [(0, 0.10), (0, 0.10), (1, 0.11), (1, 0.11), (2, 0.12), (2, 0.12)]]
>>> d = reference_drift(recs)["exec"]
>>> d["start"], d["end"], round(d["max_rel"], 3)
(0.1, 0.12, 0.2)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# the validation targets a drift is held against: infrastructure time / exec 10%, cold start 20%
TARGETS = {"create": 0.20, "exec": 0.10, "teardown": 0.10, "ttft": 0.10, "tpot": 0.10}
NOT_MEASURED = "not measured: the probe has no reference blocks (probed without them)"


def split_reference(records: list[dict]) -> tuple[list[dict], list[dict]]:
    """(reference-block records, the others)."""
    ref = [r for r in records if r.get("reference")]
    return ref, [r for r in records if not r.get("reference")]


def _medians(
    records: list[dict], value: str, group: Callable[[dict], object] | None = None, block: str = "block"
) -> dict:
    """``{group: {block: median of value}}`` over successful records (``group``: a record's level
    by default; None leaves a record out; ``block``: the field naming its block)."""
    groups: dict = {}
    for r in records:
        v, g = r.get(value), int(r["concurrency"]) if group is None else group(r)
        if r.get("ok") and v is not None and g is not None and r.get(block) is not None:
            groups.setdefault(g, {}).setdefault(int(r[block]), []).append(float(v))
    return {c: {b: float(np.median(v)) for b, v in sorted(bs.items())} for c, bs in sorted(groups.items())}


def phase_drift(by_level: dict[int, dict[int, float]], target: float | None) -> dict | None:
    """One phase's drift from its block medians per level: the first level's start, middle and
    end medians (s), every level's change against its start block, the largest change, and the
    range of factors (each block's median over its level's geometric mean) the refits draw from."""
    levels = {c: bs for c, bs in by_level.items() if len(bs) >= 2 and all(v > 0 for v in bs.values())}
    if not levels:
        return None
    first = levels[min(levels)]
    blocks = sorted(first)
    rel = {c: {b: round(v / bs[min(bs)] - 1, 4) for b, v in bs.items()} for c, bs in levels.items()}
    max_rel = max(abs(x) for r in rel.values() for x in r.values())
    ratios = [v / np.exp(np.mean(np.log(list(bs.values())))) for bs in levels.values() for v in bs.values()]
    # the factor per position in the probe (0 = start, 1 = end), the levels' geometric mean
    positions = sorted({b for bs in levels.values() for b in bs})
    profile = []
    for b in positions:
        at = [v / np.exp(np.mean(np.log(list(bs.values())))) for bs in levels.values() for bb, v in bs.items()
              if bb == b]  # fmt: skip
        profile.append(round(float(np.exp(np.mean(np.log(at)))), 5))
    out = {
        "start": round(first[blocks[0]], 6),
        "middle": [round(first[b], 6) for b in blocks[1:-1]],
        "end": round(first[blocks[-1]], 6),
        "max_rel": round(float(max_rel), 4),
        "by_level": {_key(c): {int(b): round(v, 6) for b, v in bs.items()} for c, bs in levels.items()},
        "rel_by_level": {_key(c): {int(b): x for b, x in r.items()} for c, r in rel.items()},
        "factor_range": [round(float(min(ratios)), 5), round(float(max(ratios)), 5)],
        "factor_by_block": profile,
    }
    if target is not None:
        out["target"] = target
        out["exceeds_target"] = bool(max_rel > target)
    return out


def _key(group) -> int | str:
    """A group of :func:`phase_drift` as a profile key: a level, or ``"4/512"`` for (4, 512)."""
    return "/".join(str(int(g)) for g in group) if isinstance(group, tuple) else int(group)


def sitting_drift(
    records: list[dict], phases: dict[str, str], group: Callable[[str, dict], object]
) -> dict | None:
    """How far the machine moved over a sitting of repeated probe blocks (the validation suite's:
    each record's ``suite_block``), each block read as a reference block: per phase, the median of
    ``phases[phase]`` per group (``group(phase, record)``: a level, a (level, prompt length), or
    None to leave the record out) and block, then :func:`phase_drift`. None without two blocks."""
    out = {}
    for phase, value in phases.items():
        medians = _medians(records, value, lambda r, phase=phase: group(phase, r), "suite_block")
        d = phase_drift(medians, TARGETS.get(phase))
        if d is not None:
            out[phase] = d
    return out or None


def reference_drift(reference: list[dict], phases: dict[str, str] | None = None) -> dict | None:
    """Per phase, the drift its reference blocks show (:func:`phase_drift`); None without
    reference records. ``phases``: ``{name: record field}`` (default: create, exec, teardown
    latency; the engine probe: ttft and tpot)."""
    if not reference:
        return None
    phases = phases or {"create": "latency", "exec": "latency", "teardown": "latency"}
    out = {}
    for phase, value in phases.items():
        recs = [r for r in reference if r.get("phase") in (phase, "generate")]
        d = phase_drift(_medians(recs, value), TARGETS.get(phase))
        if d is not None:
            out[phase] = d
    return out or None


def drift_factors(drift: dict | None, rng: np.random.Generator) -> dict[str, float]:
    """One refit's factor per phase: a moment of the probe drawn uniformly, each phase's block
    factor (:func:`phase_drift`'s ``factor_by_block``) interpolated there, so the phases move
    together as the machine did. ``{}`` when the drift was not measured."""
    if not isinstance(drift, dict):
        return {}
    u = float(rng.random())
    out = {}
    for phase, d in drift.items():
        f = d["factor_by_block"]
        out[phase] = float(np.interp(u, np.linspace(0.0, 1.0, len(f)), f)) if len(f) > 1 else 1.0
    return out


def describe(drift: dict | None) -> list[str]:
    """Lines for ``calibrate``'s output: per phase, start / middle / end and the largest change;
    a warning mark where it exceeds the validation target."""
    if not isinstance(drift, dict):
        return [f"drift: {NOT_MEASURED}"]
    lines = []
    for phase, d in drift.items():
        mids = "".join(f" -> {m * 1e3:.1f}" for m in d["middle"])
        line = (f"drift {phase:9s} first level {d['start'] * 1e3:.1f}{mids} -> {d['end'] * 1e3:.1f} ms "
                f"(start -> end); largest change over levels and blocks {d['max_rel']:.1%}")  # fmt: skip
        if d.get("exceeds_target"):
            line += f", above the {d['target']:.0%} validation target"
        lines.append(line)
    return lines
