"""How a phase's latency changes with the operations in flight: the load each record met, the
weights of other phases' operations in it, the contention curve read from them, and whether the
probe covered the load range well enough to read it.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import stats
from scipy.optimize import isotonic_regression

from ..scenario import PHASES
from .probe import PROBE_LEVELS


def in_flight(records: list[dict], phase: str | None = None, over_life: bool = False) -> np.ndarray:
    """Operations in flight (of ``phase``, or any phase; same run and level) at each record's
    start, the record itself included when it counts; ``over_life``: averaged over the record's
    own life instead (what an operation that shares its host felt)."""
    out = np.zeros(len(records))
    groups: dict[tuple, list[int]] = {}
    for k, r in enumerate(records):
        groups.setdefault((r["run_id"], r["concurrency"]), []).append(k)
    for idx in groups.values():
        s = np.array([records[k]["start"] for k in idx])
        e = s + np.array([records[k]["latency"] for k in idx])
        mine = np.array([phase is None or records[k]["phase"] == phase for k in idx])
        s_mine, e_mine = np.sort(s[mine]), np.sort(e[mine])
        at = np.searchsorted(s_mine, s, side="right") - np.searchsorted(e_mine, s, side="right") + 0.0
        if over_life:
            for lo in range(0, len(idx), 512):  # overlap of each record with each counted one
                a, b = s[lo : lo + 512, None], e[lo : lo + 512, None]
                shared = np.clip(np.minimum(b, e[mine]) - np.maximum(a, s[mine]), 0.0, None).sum(axis=1)
                life = (b - a)[:, 0]
                part = at[lo : lo + 512]
                felt = np.where(life > 0, shared / np.where(life > 0, life, 1.0), part)
                at[lo : lo + 512] = np.round(felt, 6)  # equal loads compare equal despite rounding
        out[idx] = at
    return out


SHARED = ("create", "teardown")  # phases that share their host in a profile with contention.shared


WEIGHT_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)  # candidate weights of another phase


WEIGHTS_P = 0.001  # weights by phase only when they predict held-out operations better at this level


def _held_out_errors(own: np.ndarray, others: list[np.ndarray], w: tuple, y: np.ndarray) -> np.ndarray:
    """Each operation's squared error under a monotone curve of log latency ``y`` on the weighted
    count in flight, the curve fitted on the other half of the operations (two folds)."""
    n = own + sum(wq * c for wq, c in zip(w, others))
    err = np.empty(len(y))
    for fold in (0, 1):
        train = np.arange(len(y)) % 2 == fold
        xs, at = np.unique(n[train], return_inverse=True)  # operations at one count: one point
        size = np.bincount(at)
        fit = isotonic_regression(np.bincount(at, weights=y[train]) / size, weights=size).x
        err[~train] = (y[~train] - np.interp(n[~train], xs, fit)) ** 2
    return err


def operation_weights(
    phase: str, latency: np.ndarray, counts: dict[str, np.ndarray]
) -> dict[str, float] | None:
    """How much one operation of each other phase in flight slows ``phase``, relative to one of
    its own: the weights (from :data:`WEIGHT_GRID`) whose weighted count gives the monotone curve
    of log latency that best predicts held-out operations (two folds). A phase never seen in
    flight alongside keeps weight 1 (left out). None (every operation counts one) unless the
    weights' held-out errors are smaller than counting every operation as one's (paired t-test,
    one-sided, at :data:`WEIGHTS_P`)."""
    cols = [q for q in PHASES if q != phase and np.ptp(counts[q]) > 0]
    if not cols or np.ptp(counts[phase]) == 0 or len(latency) < 40:
        return None
    y = np.log(np.maximum(latency, 1e-9))
    own, others = counts[phase], [counts[q] for q in cols]
    errs = {w: _held_out_errors(own, others, w, y) for w in itertools.product(WEIGHT_GRID, repeat=len(cols))}
    best = min(errs, key=lambda w: errs[w].mean())
    ones = errs[(1.0,) * len(cols)]
    if best == (1.0,) * len(cols) or stats.ttest_rel(errs[best], ones, alternative="less").pvalue > WEIGHTS_P:
        return None
    return dict(zip(cols, map(float, best)))


def curve_by_load(samples: list[tuple[float, float]], m0: float, per_bin: int = 12) -> dict[float, float]:
    """``{operations in flight: median latency / m0}`` from each operation's own load at its start.

    Operations are grouped by the count in flight when they started (itself included), adjacent
    counts merged until a group has ``per_bin`` samples; each group gives a point at its mean
    count. The model applies the multiplier of the count at an operation's start, so this recovers
    it; a point per concurrency level (its mean count against its median latency) does not where
    the multiplier is steep, since the count varies within a level.
    """
    above = sorted((n, lat) for n, lat in samples if n > 1)
    curve: dict[float, float] = {}
    group: list[tuple[float, float]] = []
    for k, (n, lat) in enumerate(above):
        group.append((n, lat))
        last = k + 1 == len(above) or above[k + 1][0] != n
        if last and len(group) >= per_bin:
            ns, lats = zip(*group)
            curve[round(float(np.mean(ns)), 3)] = round(float(np.median(lats)) / m0, 4)
            group = []
    if group and len(group) >= per_bin // 2:  # the highest loads: a last, smaller group
        ns, lats = zip(*group)
        curve[round(float(np.mean(ns)), 3)] = round(float(np.median(lats)) / m0, 4)
    return curve


def curve_per_level(per_level: dict[int, dict], m0: float) -> dict[float, float]:
    """The older reading: ``{a level's mean count in flight: its median / m0}``, per level above
    the first."""
    first, *rest = sorted(per_level)
    return {
        per_level[c]["in_flight"]: round(per_level[c]["median"] / m0, 4)
        for c in rest
        if per_level[c]["median"] and per_level[c]["in_flight"] > max(1.0, per_level[first]["in_flight"])
    }


def slope(loads: list[float], ratios: list[float]) -> float:
    """Least-squares slope of multiplier - 1 against operations in flight - 1, through the origin."""
    dx, dy = np.array(loads) - 1.0, np.array(ratios) - 1.0
    if dx.size == 0 or not np.any(dx > 0):
        return 0.0
    return max(0.0, float((dx * dy).sum() / (dx * dx).sum()))


MIN_LEVELS = 4  # load levels above 1 that a contention curve needs


MIN_PER_LEVEL = 30  # successful samples per level


def coverage(per_level: dict[int, dict], paced: bool = False) -> dict:
    """Is a phase's contention curve under-sampled, and what to probe next. ``paced``: the probe
    spaced each sandbox's commands by a think time, so a level is not meant to fill (its curve is
    read per operation, at the count each one met)."""
    loaded = {c: lv for c, lv in per_level.items() if lv["in_flight"] > 1.0}
    advice = []
    if len(loaded) < MIN_LEVELS:
        advice.append(f"only {len(loaded)} load level(s) above 1 in flight (need {MIN_LEVELS}): "
                      f"probe --concurrency {PROBE_LEVELS}")  # fmt: skip
    thin = [c for c, lv in per_level.items() if lv["n"] - lv["failures"] < MIN_PER_LEVEL]
    if thin:
        advice.append(f"fewer than {MIN_PER_LEVEL} samples at concurrency {thin}: probe more sandboxes "
                      "or commands per level")  # fmt: skip
    short = [] if paced else [c for c, lv in loaded.items() if lv["in_flight"] < 0.5 * c]
    if short:
        advice.append(f"concurrency {short} never filled (mean in flight under half the level): "
                      "use more sandboxes per level or --mode burst")  # fmt: skip
    levels = sorted(loaded)
    gaps = [(a, b) for a, b in zip([1] + levels, levels) if b > 4 * a]
    if gaps:
        advice.append(f"gaps in the load range {gaps}: add levels between them")
    top = max((lv["in_flight"] for lv in per_level.values()), default=1.0)
    return {
        "load_levels": len(loaded),
        "min_samples": min((lv["n"] - lv["failures"] for lv in per_level.values()), default=0),
        "max_in_flight": round(float(top), 3),
        "under_sampled": bool(advice),
        "advice": advice,
    }
