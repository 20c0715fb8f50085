"""The distribution family that fits a phase's samples best.

Candidates fitted by maximum likelihood with scipy.stats, selected by AIC (or BIC) among those the KS
test does not reject, with the KS statistic and the relative error at p50/p90/p99 reported and the
empirical quantiles kept beside the fit.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

from . import (
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

MIN_SAMPLES = 10  # successful samples a phase needs for a fit
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
