"""Fit latency distributions to probe records and write a substrate profile.

Per phase: candidate distributions fitted by maximum likelihood with scipy.stats, selected by AIC
(or BIC) among those the KS test does not reject, with the KS statistic and the relative error at
p50/p90/p99 reported and the empirical quantiles kept beside the fit. How each phase's median and
failure rate change with the concurrency level gives the profile's contention curves and failure
probabilities.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import warnings
from pathlib import Path

import numpy as np
import yaml
from scipy import stats
from scipy.optimize import isotonic_regression

from ..contention import Curve
from ..distributions import (
    Component,
    Constant,
    Exponential,
    Gamma,
    LogLogistic,
    Lognormal,
    Mixture,
    Weibull,
    dump_dist,
)
from ..errors import InputError
from ..scenario import PHASES, Substrate
from .probe import PROBE_LEVELS

MIN_SAMPLES = 10
LOCAL = ("docker", "process", "synthetic")  # backends probed on the host they measure: scope host
PHASE_FIELD = {"create": "cold_start", "exec": "exec_overhead", "teardown": "teardown"}
QS = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
KS_ALPHA = 0.05  # a candidate the KS test rejects at this level is chosen only if every one is


def _lognormal_mixture(x: np.ndarray, iters: int = 300):
    """Two-component Gaussian mixture on log x by EM; returns (weights, mus, sigmas, loglik)."""
    y = np.log(x)
    lo, hi = y <= np.median(y), y > np.median(y)
    if hi.sum() < 2:
        hi = ~lo
    w = np.array([lo.mean(), 1 - lo.mean()])
    mu = np.array([y[lo].mean(), y[hi].mean() if hi.any() else y.mean() + 0.1])
    sd = np.maximum([y[lo].std(), y[hi].std() if hi.any() else 0.1], 1e-3)
    for _ in range(iters):
        dens = w * stats.norm.pdf(y[:, None], mu, sd)
        tot = np.maximum(dens.sum(axis=1, keepdims=True), 1e-300)
        r = dens / tot
        nk = np.maximum(r.sum(axis=0), 1e-9)
        w, mu = nk / len(y), (r * y[:, None]).sum(axis=0) / nk
        sd = np.maximum(np.sqrt((r * (y[:, None] - mu) ** 2).sum(axis=0) / nk), 1e-3)
    dens = (w * stats.norm.pdf(y[:, None], mu, sd)).sum(axis=1)
    loglik = float(np.sum(np.log(np.maximum(dens, 1e-300)) - y))  # Jacobian of x = e^y
    return w, mu, sd, loglik


def _candidates(x: np.ndarray, only: str | None = None):
    """Yield (name, our Dist, loglik, number of parameters); ``only``: that candidate alone."""

    def want(name: str) -> bool:
        return only is None or only == name

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if want("lognormal"):
            s, _, scale = stats.lognorm.fit(x, floc=0)
            ll = stats.lognorm.logpdf(x, s, 0, scale).sum()
            yield "lognormal", Lognormal(mu=math.log(scale), sigma=s), ll, 2
        if want("gamma"):
            a, _, scale = stats.gamma.fit(x, floc=0)
            yield "gamma", Gamma(shape=a, scale=scale), stats.gamma.logpdf(x, a, 0, scale).sum(), 2
        if want("weibull"):
            c, _, scale = stats.weibull_min.fit(x, floc=0)
            ll = stats.weibull_min.logpdf(x, c, 0, scale).sum()
            yield "weibull", Weibull(shape=c, scale=scale), ll, 2
        if want("loglogistic"):
            c, _, scale = stats.fisk.fit(x, floc=0)
            if c > 1:  # finite mean only
                yield "loglogistic", LogLogistic(c=c, scale=scale), stats.fisk.logpdf(x, c, 0, scale).sum(), 2
        loc = float(x.min()) * (1 - 1e-9)
        mean = float(x.mean() - loc)
        if mean > 0 and want("shifted_exponential"):
            ll = stats.expon.logpdf(x, loc, mean).sum()
            yield "shifted_exponential", Exponential(mean=mean, loc=loc), ll, 2
        if len(x) >= 2 * MIN_SAMPLES and want("lognormal_mixture"):
            w, mu, sd, ll = _lognormal_mixture(x)
            if np.all(w > 0.02):
                mix = Mixture(
                    components=[
                        Component(weight=float(wk), dist=Lognormal(mu=float(m), sigma=float(s)))
                        for wk, m, s in zip(w, mu, sd)
                    ]
                )
                yield "lognormal_mixture", mix, ll, 5


def fit_phase(x: np.ndarray, criterion: str = "aic", family: str | None = None) -> dict:
    """Fit every candidate to ``x``; return the selected Dist and the diagnostics. ``family``:
    fit that candidate alone (a bootstrap refit keeps the point fit's choice), every candidate
    when it cannot be fitted to ``x``."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    if np.ptp(x) <= 1e-12 * max(abs(float(x.max())), 1e-12):  # every sample the same: a constant
        dist = Constant(value=float(x[0]))
        emp = {k: float(x[0]) for k in QS}
        only = {"constant": {"ks": 0.0, "ks_pvalue": 1.0, "params": dump_dist(dist)}}
        return {"selected": "constant", "criterion_choice": "constant", "dist": dist, "n": n,
                "empirical_quantiles": emp, "quantile_rel_error": {k: 0.0 for k in QS},
                "candidates": only}  # fmt: skip
    if family is not None and family != "constant":
        fitted = fit_phase_only(x, criterion, family)
        if fitted is not None:
            return fitted
    cands = {}
    for name, dist, ll, k in _candidates(x):
        if not np.isfinite(ll):
            continue
        ks = stats.kstest(x, dist.cdf)
        cands[name] = {
            "dist": dist,
            "loglik": float(ll),
            "aic": float(2 * k - 2 * ll),
            "bic": float(k * math.log(n) - 2 * ll),
            "ks": float(ks.statistic),
            "ks_pvalue": float(ks.pvalue),
        }
    # the criterion picks among the candidates the KS test does not reject; when it rejects every
    # one, the least rejected (a likelihood can favour a law that misses the sample's median: a
    # shifted exponential on a few slow outliers)
    preferred = min(cands, key=lambda c: cands[c][criterion])
    fits = [c for c in cands if cands[c]["ks_pvalue"] >= KS_ALPHA]
    if fits:
        best = min(fits, key=lambda c: cands[c][criterion])
    else:
        best = max(cands, key=lambda c: cands[c]["ks_pvalue"])
    dist = cands[best]["dist"]
    emp = {k: float(np.quantile(x, q)) for k, q in QS.items()}
    rel = {k: float(dist.ppf(q) / emp[k] - 1) for k, q in QS.items()}
    return {
        "selected": best,
        "criterion_choice": preferred,  # the criterion's own pick, before the KS screen
        "dist": dist,
        "n": n,
        "empirical_quantiles": emp,
        "quantile_rel_error": rel,
        "candidates": {
            c: {m: round(v, 6) for m, v in d.items() if m != "dist"} | {"params": dump_dist(d["dist"])}
            for c, d in cands.items()
        },
    }


def fit_phase_only(x: np.ndarray, criterion: str, family: str) -> dict | None:
    """:func:`fit_phase` with ``family`` alone (no KS screen, no diagnostics); None when it does
    not fit ``x`` (e.g. a log-logistic of infinite mean)."""
    for name, dist, ll, _ in _candidates(x, family):
        if np.isfinite(ll):
            return {"selected": name, "criterion_choice": name, "dist": dist, "n": len(x)}
    return None


def _check(records: list[dict]) -> dict[str, dict]:
    """Group by phase; refuse NaN/negative latencies, too few samples and failure-only phases."""
    if not records:
        raise InputError("no probe records in the given file(s); probe first ('simrollout probe').")
    files = ", ".join(sorted({str(r["_file"]) for r in records}))
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


def _curve_per_level(per_level: dict[int, dict], m0: float) -> dict[float, float]:
    """The older reading: ``{a level's mean count in flight: its median / m0}``, per level above
    the first."""
    first, *rest = sorted(per_level)
    return {
        per_level[c]["in_flight"]: round(per_level[c]["median"] / m0, 4)
        for c in rest
        if per_level[c]["median"] and per_level[c]["in_flight"] > max(1.0, per_level[first]["in_flight"])
    }


def _slope(loads: list[float], ratios: list[float]) -> float:
    """Least-squares slope of multiplier - 1 against operations in flight - 1, through the origin."""
    dx, dy = np.array(loads) - 1.0, np.array(ratios) - 1.0
    if dx.size == 0 or not np.any(dx > 0):
        return 0.0
    return max(0.0, float((dx * dy).sum() / (dx * dx).sum()))


MIN_LEVELS = 4  # load levels above 1 that a contention curve needs
MIN_PER_LEVEL = 30  # successful samples per level


def _answered(records: list[dict]) -> tuple[list[dict], list[str]]:
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
        raise InputError(f"every level's operations timed out on the client: {'; '.join(notes)}. "
                         "Nothing to fit: restart the engine and probe again.")  # fmt: skip
    return kept, notes


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


def _thinks(records: list[dict]) -> list[float] | dict[str, float]:
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
                    f"phase '{phase}': {len(base)} successful samples at concurrency {levels[0]}, "
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
            curve = _curve_per_level(per_level, m0)
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
        "contention_slope": _slope(list(curve), list(curve.values())),
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


def calibrate(
    records: list[dict],
    name: str,
    criterion: str = "aic",
    image_cache_gb: float = 100.0,
    points: str = "per-operation",
    weights: bool = True,
    shared: bool = True,
    bootstrap: int | None = 0,
    seed: int = 0,
) -> tuple[dict, dict]:
    """Records -> (profile mapping, per-phase fits with their samples, for plots). Pull records
    give ``image_cache.pull_mb_s`` (its ``cache_gb`` is ``image_cache_gb``, not measured); reset
    records give ``reset``. ``points``: contention points per operation (:func:`curve_by_load`)
    or ``per-level`` (a level's mean count against its median: how profiles before it were made).
    ``weights``: with per-operation points, weigh other phases' operations in each phase's load
    (:func:`operation_weights`), else every operation in flight counts one. ``shared``: creates
    and teardowns share their host (``contention.shared``), their curves read on the load averaged
    over each operation's life; else every curve reads the load at the operation's start.

    Reference-block records (``reference: true``, the probe's repeated short blocks) are left out
    of the fit; they give the drift (:mod:`simrollout.calibration.drift`). ``bootstrap``: refits
    from resamples of whole sandboxes per level, stored under ``uncertainty``
    (:mod:`simrollout.calibration.bootstrap`; 0, the default here: none; None, the default of
    ``simrollout calibrate``: :data:`DEFAULT_BOOTSTRAP`, a probe too thin to resample then warned
    about instead of refused); ``seed`` draws the resamples. The point fit is the same whatever
    ``bootstrap`` is."""
    from .bootstrap import DEFAULT_BOOTSTRAP, uncertainty
    from .drift import reference_drift, split_reference

    if points not in ("per-operation", "per-level"):
        raise InputError(f"contention points: expected per-operation or per-level, got '{points}'.")
    if bootstrap is not None and bootstrap < 0:
        raise InputError(f"--bootstrap: expected a count of refits >= 0, got {bootstrap}.")
    records, unanswered = _answered(records)
    reference, records = split_reference(records)
    _check(records)
    paced = any(r.get("think") for r in records)  # ``probe --think``: commands spaced like turns
    shared = shared and points == "per-operation"
    weights = weights and points == "per-operation"
    annotated = annotate(records, shared, weights)
    by_phase = by_phase_of(annotated)
    pulls = by_phase.pop("pull", [])
    substrate, fits_out, plots = fit_substrate(by_phase, criterion, points, weights, shared, paced)
    if records[0]["backend"] not in LOCAL and substrate["contention"]:
        # one probing client measured what its own operations in flight do; across many rollout
        # clients of a hosted service that curve applies per client, not to the whole service
        substrate["contention"]["scope"] = "client"
    rate = pull_rate(pulls)
    if rate:
        substrate["image_cache"] = {"pull_mb_s": rate, "cache_gb": image_cache_gb}
    first = records[0]
    fitted_weights = substrate["contention"].get("weights")
    profile = {
        "version": 1,
        "name": name,
        "provenance": {
            "method": f"probe fit, selected by {criterion.upper()}",
            "contention_points": points,
            "contention_reading": "creates and teardowns share the host (curves on the load over each "
            "operation's life); execs at their start"
            if shared
            else "every operation at its start",
            "contention_weights": "by phase, chosen by two-fold held-out error of the operations"
            if fitted_weights
            else "none: every operation in flight counts one",
            "backend": first["backend"],
            "backend_version": first["backend_version"],
            "engine_version": first["engine_version"],
            "host": first["host"],
            "image": first["image"],
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
            "probe_files": sorted({Path(r["_file"]).name for r in records}),
            "runs": sorted({r["run_id"] for r in records}),
            "samples": {p: len(rs) for p, rs in by_phase.items()} | ({"pull": len(pulls)} if pulls else {}),
            **({"reference_samples": len(reference)} if reference else {}),
            **({"left_out": unanswered} if unanswered else {}),
            **({"think_s": _thinks(records)} if paced else {}),
            **(
                {"image_cache": f"pull_mb_s from {len(pulls)} task image loads; cache_gb given, not measured"}
                if rate
                else {}
            ),
        },
        "substrate": substrate,
        "fits": fits_out,
    }
    Substrate.model_validate({"name": name, **substrate})
    drift = reference_drift(reference)
    refits = DEFAULT_BOOTSTRAP if bootstrap is None else bootstrap
    if refits:
        fit_args = dict(criterion=criterion, points=points, weights=weights, shared=shared, paced=paced)
        choices = {"families": {ph: f["selected"] for ph, f in fits_out.items()},
                   "weights": fitted_weights or {}}  # fmt: skip
        profile["uncertainty"] = uncertainty(
            annotated, substrate, drift, refits, seed, fit_args, strict=bootstrap is not None, name=name,
            choices=choices,
        )  # fmt: skip
    elif drift is not None or reference:
        profile["uncertainty"] = {"method": "none (no refits)", "refits": 0, "seed": seed, "drift": drift}
    return profile, plots


def from_quantiles(spec: dict, path: Path) -> dict:
    """A profile from published percentiles: ``{quantiles: {p: v}}`` become empirical curves."""
    if not isinstance(spec, dict) or "name" not in spec or "substrate" not in spec or "source" not in spec:
        raise InputError(f"{path}: expected fields 'name', 'source' and 'substrate'.")

    def conv(v):
        if isinstance(v, dict) and set(v) == {"quantiles"}:
            return {"kind": "empirical", "quantiles": v["quantiles"]}
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        return v

    substrate = conv(spec["substrate"])
    from pydantic import ValidationError

    from ..errors import explain

    try:
        Substrate.model_validate({"name": spec["name"], **substrate})
    except ValidationError as exc:
        raise explain(exc, path) from None
    return {
        "version": 1,
        "name": spec["name"],
        "provenance": {
            "method": "from published quantiles (no raw probes)",
            "source": spec["source"],
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
            **({"notes": spec["notes"]} if "notes" in spec else {}),
        },
        "substrate": substrate,
    }


def write_profile(profile: dict, path: Path) -> None:
    from ..outputs import atomic_file

    with atomic_file(path) as tmp:  # an existing profile is replaced only when complete
        tmp.write_text(yaml.safe_dump(profile, sort_keys=False, width=100))


def plot_fits(plots: dict, path: Path) -> Path:
    """Empirical vs fitted CDF and a QQ plot, one row per phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(plots), 2, figsize=(10, 3.2 * len(plots)), squeeze=False)
    for row, (phase, (x, dist, name)) in enumerate(plots.items()):
        xs = np.sort(x)
        ecdf = np.arange(1, len(xs) + 1) / len(xs)
        ax = axes[row][0]
        ax.step(xs, ecdf, where="post", label="probes")
        grid = np.linspace(xs[0] * 0.9, xs[-1] * 1.1, 400)
        ax.plot(grid, dist.cdf(grid), label=f"fit: {name}")
        ax.set_title(f"{phase}: CDF (n={len(xs)})")
        ax.set_xlabel("latency (s)")
        ax.legend()
        ax = axes[row][1]
        theo = np.array([dist.ppf(q) for q in (np.arange(1, len(xs) + 1) - 0.5) / len(xs)])
        ax.plot(theo, xs, ".", ms=3)
        lim = [min(theo.min(), xs.min()), max(theo.max(), xs.max())]
        ax.plot(lim, lim, "k--", lw=0.8)
        ax.set_title(f"{phase}: QQ")
        ax.set_xlabel("fitted quantile (s)")
        ax.set_ylabel("observed (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
