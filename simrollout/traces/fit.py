"""A workload section fitted to a trace: each quantity by the calibration's fitting
(:func:`simrollout.distributions.families.fit_phase`: maximum likelihood over the families, selected by
AIC among those the KS test does not reject), kept when it is within :data:`TOLERANCE` of the
trace's p50, p90 and p99, else the trace's own quantile curve. Counts (steps per trajectory,
tool calls per step) are their exact histogram; the best family is reported beside it."""

from __future__ import annotations

import math

import numpy as np

from ..distributions import Constant, Discrete, Empirical, dump_dist
from ..distributions.families import fit_phase
from .frames import calls_frame, quantiles, steps_frame, trajectories_frame
from .model import TraceSet

TOLERANCE = 0.05  # a family's p50, p90 and p99 within this of the trace's, else the quantile curve
MAX_FIT = 20_000  # values a family is fitted on (a seeded subsample beyond)
FLOOR = 1e-3  # s: zero latencies (Codex reports 0 ms for quick commands) are fitted at 1 ms
LEVELS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999)


def _sample(x: np.ndarray) -> np.ndarray:
    if x.size <= MAX_FIT:
        return x
    return np.random.default_rng(0).choice(x, MAX_FIT, replace=False)


def _curve(x: np.ndarray) -> Empirical:
    qs: dict[float, float] = {}
    last = 0.0
    for p in LEVELS:
        v = float(np.quantile(x, p))
        if v > last * (1 + 1e-9) and v > 0:
            qs[p] = v
            last = v
    return Empirical(quantiles=qs)


def fit_values(x, floor: float = FLOOR) -> tuple[object, dict]:
    """A distribution for the values ``x`` and how well it fits."""
    x = np.asarray(x, dtype=float)
    x = np.maximum(x[np.isfinite(x)], floor)
    emp = {k: float(np.quantile(x, q)) for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
    if np.ptp(x) <= 1e-12 * max(float(x.max()), 1e-12):
        return Constant(value=float(x[0])), {"form": "constant", "n": int(x.size), "trace": emp}
    fit = fit_phase(_sample(x))
    dist = fit["dist"]
    rel = {k: float(dist.ppf(q) / emp[k] - 1) for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
    cand = fit["candidates"][fit["selected"]]
    report = {
        "family": fit["selected"],
        "ks": cand["ks"],
        "ks_pvalue": cand["ks_pvalue"],
        "family_rel_error": {k: round(v, 4) for k, v in rel.items()},
        "n": int(x.size),
        "trace": emp,
    }
    if max(abs(v) for v in rel.values()) <= TOLERANCE and math.isfinite(dist.mean()):
        return dist, report | {"form": "family"}
    curve = _curve(x)
    return curve, report | {
        "form": f"quantile curve (the family misses a quantile by more than {TOLERANCE:.0%})"
    }


def fit_counts(x) -> tuple[Discrete, dict]:
    x = np.asarray(x, dtype=float)
    vals, n = np.unique(x, return_counts=True)
    dist = Discrete(values=vals.tolist(), weights=(n / n.sum()).round(8).tolist())
    report = {"form": "histogram", "n": int(x.size), "trace": quantiles(x)}
    if np.ptp(x) > 0 and x.min() > 0:
        fam = fit_values(x, floor=1.0)[1]
        report["family"] = {k: fam[k] for k in ("family", "ks", "family_rel_error") if k in fam}
    return dist, report


def token_arrays(ts: TraceSet) -> dict[str, np.ndarray] | None:
    """The simulator's token terms per trajectory: the prompt (the first turn's whole input) and
    per step the tokens appended beyond the previous turn's context and output (the input's
    growth; 0 on the first turn and where the context shrank) and the output."""
    prompt, append, output = [], [], []
    for t in ts.trajectories:
        inp = np.array([s.input_tokens for s in t.steps])
        out = np.array([s.output_tokens for s in t.steps])
        if not (np.isfinite(inp).all() and np.isfinite(out).all()):
            return None
        prompt.append(inp[0])
        grow = np.concatenate([[0.0], inp[1:] - inp[:-1] - out[:-1]])
        append.append(np.maximum(grow, 0.0))
        output.append(np.maximum(out, 1.0))
    return {"prompt": np.array(prompt), "appended": np.concatenate(append), "output": np.concatenate(output)}


def fit_workload(ts: TraceSet, overlap: str = "trace") -> tuple[dict, dict]:
    """``(workload mapping, fit report)`` for a scenario's ``workload:`` (trajectories not set)."""
    st, calls, tr = steps_frame(ts, overlap), calls_frame(ts, overlap), trajectories_frame(ts, overlap)
    wl, rep = {}, {}
    d, rep["steps"] = fit_counts(tr["steps"])
    wl["steps"] = dump_dist(d)
    if st["llm"].notna().any():
        d, rep["llm_time"] = fit_values(st["llm"])
        wl["llm_time"] = dump_dist(d)
    d, rep["calls_per_step"] = fit_counts(st["calls"])
    wl["calls_per_step"] = dump_dist(d)
    tools = {}
    if calls.empty:
        tools["none"] = {"weight": 1.0, "latency": 0.0}
    for cat, grp in calls.groupby("category"):
        d, rep[f"tools.{cat}"] = fit_values(grp["piece"])
        tools[cat] = {"weight": round(len(grp) / len(calls), 6), "latency": dump_dist(d), "category": cat}
    wl["tools"] = tools
    for f in ("setup", "reward"):
        if tr[f].notna().any():
            d, rep[f] = fit_values(tr[f])
            wl[f] = dump_dist(d)
    tok = token_arrays(ts)
    extra = {}
    if tok is not None:
        extra["tokens"] = {}
        for k, x in tok.items():
            d, rep[f"tokens.{k}"] = fit_values(x, floor=1.0)
            extra["tokens"][k] = dump_dist(d)
        extra["tokens"]["max_context"] = int(np.nanmax(st["input"]) + np.nanmax(st["output"]))
    return {"workload": wl, **extra}, rep


def held_out(ts: TraceSet, frac: float = 0.5) -> tuple[TraceSet, TraceSet]:
    """Split a trace by trajectory (every other one)."""
    a = TraceSet(ts.format, ts.files, ts.trajectories[::2], ts.problems, ts.notes)
    b = TraceSet(ts.format, ts.files, ts.trajectories[1::2], ts.problems, ts.notes)
    return a, b
