"""The compiled engine's arithmetic (numba): contention curves and failure rates as arrays, and a
trajectory's per-step detail (sums, the cut at a deadline, where a lost sandbox stops it), the
same formulas as :mod:`simrollout.distributions.contention`, :mod:`simrollout.scenario.substrate`
and :class:`simrollout.sim.substrate_draws.ChunkDetail`."""

from __future__ import annotations

import numpy as np

from ..distributions.contention import Curve
from . import substrate_draws
from .compiled_jit import compiled

TABLE = 8  # parameters per curve: kind, slope or c, b, p, hi, y_hi, scale, table offset


def curve_params(spec, tables: list[np.ndarray]) -> np.ndarray:
    """One phase's contention: a slope (kind 0) or a measured :class:`Curve` (kind 1, its table
    appended to ``tables``)."""
    from ..scenario.substrate import slowdown

    out = np.zeros(TABLE)
    if not isinstance(spec, dict):
        out[1] = float(spec)
        return out
    f: Curve = slowdown(spec)
    off = sum(len(t) for t in tables)
    tables.append(np.asarray(f._table, dtype=np.float64))
    out[:] = (1.0, f.c, f.b, f.p, f.hi, f.y_hi, f._scale, off)
    return out


def table_sizes(tables: list[np.ndarray]) -> np.ndarray:
    return np.array([len(t) for t in tables] or [0], dtype=np.int64)


def rate_params(spec) -> tuple[np.ndarray, np.ndarray]:
    """A failure rate: a constant (one point) or points interpolated by operations in flight."""
    if not isinstance(spec, dict):
        return np.array([1.0]), np.array([float(spec)])
    xs, ys = zip(*sorted((float(k), float(v)) for k, v in spec.items()))
    return np.array(xs), np.array(ys)


@compiled
def factor(par, tab, size, n):
    """The multiplier of a phase at ``n`` operations in flight."""
    if par[0] == 0.0:
        return 1.0 + par[1] * (n - 1.0) if n > 1.0 else 1.0
    if n <= 1.0:
        return 1.0
    c, b, p, hi, y_hi, scale = par[1], par[2], par[3], par[4], par[5], par[6]
    if n >= hi:
        x = max(n - 1.0, 0.0) / c
        return max(y_hi, scale * (1.0 + x**p) ** (b / p))
    off = int(par[7])
    k = (n - 1.0) / 0.25
    i = int(k)
    if i + 1 < size:
        return tab[off + i] + (k - i) * (tab[off + i + 1] - tab[off + i])
    return tab[off + size - 1]


@compiled
def fail_rate(xs, ys, n):
    """``np.interp(n, xs, ys)`` without an allocation (one point: a constant)."""
    last = xs.size - 1
    if n <= xs[0]:
        return ys[0]
    if n >= xs[last]:
        return ys[last]
    j = 0
    while xs[j + 1] <= n:
        j += 1
    if xs[j] == n:
        return ys[j]
    return (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]) * (n - xs[j]) + ys[j]


# the first failing call, compiled from the one definition the Python engines use
first_failure = compiled(substrate_draws.first_failure)


@compiled
def first_call(snc, s0, s):
    """Calls before step ``s`` of a detail starting at ``s0``."""
    c = 0
    for k in range(s):
        c += snc[s0 + k]
    return c


@compiled
def sums(sg, snc, co, ct, s0, c0, a, b, luck):
    """Generation (x luck), exec overhead and tool time of steps ``a <= s < b``."""
    g = 0.0
    for k in range(a, b):
        g += sg[s0 + k]
    ca, cb = first_call(snc, s0, a), first_call(snc, s0, b)
    o = 0.0
    t = 0.0
    for k in range(ca, cb):
        o += co[c0 + k]
        t += ct[c0 + k]
    return g * luck, o, t


@compiled
def lost_at(sg, snc, co, ct, s0, ns, c0, call, luck):
    """Where losing the sandbox at ``call`` (1-based) stops: whole steps, and the partial step's
    generation, overhead and tool time."""
    cum = 0
    s = 0
    while s < ns and cum + snc[s0 + s] <= call - 1:
        cum += snc[s0 + s]
        s += 1
    o = 0.0
    t = 0.0
    for k in range(cum, call - 1):
        o += co[c0 + k]
        t += ct[c0 + k]
    g = sg[s0 + s] if s < ns else 0.0
    return s, g * luck, o, t


@compiled
def cut(sg, snc, co, ct, s0, c0, a, b, x_l, x_e, x_t, left, skip):
    """Steps ``a <= s < b`` at these multipliers (``x_t``: the tools') stopped after ``left``
    seconds: steps completed, generation and exec overhead spent (ChunkDetail.cut)."""
    call = first_call(snc, s0, a)
    llm = 0.0
    over = 0.0
    for s in range(a, b):
        g = 0.0 if (skip and s == a) else sg[s0 + s] * x_l
        if g >= left:
            return s - a, llm + left, over
        llm += g
        left -= g
        for _ in range(snc[s0 + s]):
            o = co[c0 + call] * x_e
            t = o + ct[c0 + call] * x_t
            if t >= left:
                return s - a, llm, over + min(o, left)
            left -= t
            over += o
            call += 1
    return b - a, llm, over
