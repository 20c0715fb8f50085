"""Sums of ``m`` independent draws of one distribution, drawn at once from their m-fold law.

A trajectory's exec overhead is the sum of one draw per tool call; where nothing reads the calls
one by one (the trajectory engine), the sum is drawn directly. The distribution is split at its
``1 - tail`` quantile ``T`` (``tail`` from 1e-6 up to 1e-2, the smallest that leaves cells of a
thousandth of the mean below it). Below it, the law is discretised on cells of width ``h`` (a thousandth
of the mean, or coarser for wide supports) and convolved with itself by FFT into the 2^j-fold
laws of the cell index; a sum of ``m`` is the sum of one draw from each table of ``m``'s binary
digits. Above it, how many of the ``m`` draws land in the tail is binomial and each is drawn
from the exact conditional tail. So the drawn sums are exact but for the cells: a sum of ``m``
lies within ``m * h / 2`` of a sum with the exact law (a coupling: their quantile functions
differ by at most that), see :meth:`NFold.bound`; the tables' trimmed mass is below 1e-12.

>>> from simrollout.distributions import parse_dist
>>> nf = nfold(parse_dist({"kind": "exponential", "mean": 1.0}))
>>> s = nf.sample(np.random.default_rng(0), np.full(100_000, 150))
>>> bool(abs(s.mean() / 150 - 1) < 0.01)
True
"""

from __future__ import annotations

import math
import threading

import numpy as np
from numba import njit

_TAILS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)  # the share above the split, drawn exactly: the first
# whose split leaves cells of a thousandth of the mean (a heavy tail splits lower)
_REL = 1e-3  # cell width, in units of the distribution's mean
_CELLS = 1 << 16  # at most this many cells per draw (wider cells for wide supports)
_TRIM = 1e-14  # probability trimmed off each end of a table (under 1e-12 over every table)


class NFold:
    """The m-fold laws of one distribution (anything with ``cdf``, ``ppf`` and ``mean``)."""

    def __init__(self, dist, tail: float | None = None, rel: float = _REL, cells: int = _CELLS):
        self.dist = dist
        self._lock = threading.Lock()
        lo = float(np.asarray(dist.ppf(0.0)))
        self.lo = lo if math.isfinite(lo) and lo > 0 else 0.0
        for t in _TAILS if tail is None else (tail,):
            hi = float(np.asarray(dist.ppf(1.0 - t)))
            if hi - self.lo <= cells * rel * float(dist.mean()):
                break
        self.const = hi <= self.lo  # a constant (or as good as one below the split)
        self.tables: list[tuple[int, np.ndarray]] = []  # per j: (first index, CDF of the 2^j-fold index)
        self.guides: list[np.ndarray] = []  # per j: where each of len(CDF) equal steps of u begins
        if self.const:
            self.h, self.split, self.tail = 0.0, self.lo, 0.0
            return
        self.h = max(rel * float(dist.mean()), (hi - self.lo) / cells)
        n = max(math.ceil((hi - self.lo) / self.h), 1)
        edges = self.lo + self.h * np.arange(n + 1)
        edges[-1] = hi
        cdf = np.asarray(dist.cdf(edges), dtype=np.float64)
        self.split, self.below = hi, float(cdf[-1])
        self.tail = max(1.0 - self.below, 0.0)
        pmf = np.diff(cdf)
        self._pmf0 = pmf / pmf.sum()

    def bound(self, m: int | np.ndarray) -> np.ndarray:
        """Seconds within which a sum of ``m`` lies of a sum with the exact m-fold law."""
        return np.asarray(m) * self.h / 2

    def _table(self, j: int) -> tuple[int, np.ndarray]:
        """The 2^j-fold law of the cell index: (its first index, its CDF). Built under a lock: the
        laws are shared by every thread of the process (a streamed cell's draws), and two threads
        extending the list at once appended one law twice, every sum through it wrong after."""
        if j < len(self.guides):
            return self.tables[j]
        with self._lock:
            self._extend(j)
        return self.tables[j]

    def _extend(self, j: int) -> None:
        while len(self.tables) <= j:
            if not self.tables:
                off, pmf = 0, self._pmf0
            else:
                off0, cdf0 = self.tables[-1]
                prev = np.diff(cdf0, prepend=0.0)
                off, pmf = 2 * off0, np.clip(_self_convolved(prev), 0.0, None)
            pmf = pmf / pmf.sum()
            left, right = np.cumsum(pmf), np.cumsum(pmf[::-1])[::-1]  # each end's mass, accurate there
            first = int(np.argmax(left > _TRIM))
            last = len(pmf) - 1 - int(np.argmax(right[::-1] > _TRIM))
            c = np.cumsum(pmf[first : last + 1])
            c /= c[-1]
            c[-1] = 1.0
            self.tables.append((off + first, c))
            self.guides.append(np.searchsorted(c, np.arange(c.size) / c.size, side="left"))

    def sample(self, rng: np.random.Generator, m: np.ndarray) -> np.ndarray:
        """One sum of ``m[k]`` independent draws for each ``k`` (float64 seconds)."""
        m = np.asarray(m, dtype=np.int64)
        if self.const:
            return m * self.lo
        k = rng.binomial(m, self.tail) if self.tail > 0 else np.zeros_like(m)
        body = m - k
        index = np.zeros(len(m), dtype=np.int64)
        for j in range(int(body.max(initial=0)).bit_length()):
            u = rng.random(len(m))
            off, cdf = self._table(j)
            _add_index(index, body, j, u, off, cdf, self.guides[j])
        out = body * (self.lo + self.h / 2) + index * self.h
        tails = int(k.sum())
        if tails:
            x = self.dist.sample_above(rng, tails, self.split)
            owner = np.repeat(np.arange(len(m)), k)
            np.add.at(out, owner, x)
        return out


@njit(cache=True, _nrt=False)
def _add_index(index, body, j, u, off, cdf, guide):
    """``index[k] += off + searchsorted(cdf, u[k], "left")`` where bit ``j`` of ``body[k]`` is set,
    each search started from the guide (the first index whose CDF reaches the step below ``u``)."""
    size = cdf.size
    for k in range(index.size):
        if (body[k] >> j) & 1:
            x = u[k]
            b = int(x * size)
            i = guide[b - 1 if b > 0 else 0]  # one step below: x * size may have rounded up
            while cdf[i] < x:
                i += 1
            index[k] += off + i


_CACHE: dict[str, NFold] = {}
_CACHE_LOCK = threading.Lock()


def nfold(dist) -> NFold:
    """The (cached, per process) m-fold laws of ``dist``: built once per profile's distribution."""
    key = f"{type(dist).__name__}:{dist.model_dump_json()}"
    got = _CACHE.get(key)
    if got is None:
        with _CACHE_LOCK:
            got = _CACHE.get(key)
            if got is None:
                got = _CACHE[key] = NFold(dist)
    return got


def _self_convolved(p: np.ndarray) -> np.ndarray:
    """``scipy.signal.fftconvolve(p, p)``, its arithmetic step for step, without importing
    scipy.signal (which imports scipy.stats: half a second in every process that draws)."""
    from scipy import fft

    size = 2 * p.shape[0] - 1
    n = fft.next_fast_len(size, True)
    sp = fft.rfftn(p, [n], axes=[0])
    return fft.irfftn(sp * sp, [n], axes=[0])[:size]
