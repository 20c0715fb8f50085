"""Bounded-memory summaries: a log-bucket quantile sketch and a time-binned load integral.

:class:`QuantileSketch` is the DDSketch idea with numpy batch insertion: values fall in buckets
``(gamma^(k-1), gamma^k]``, ``gamma = (1 + a) / (1 - a)``, so every quantile is returned within
relative error ``a`` (0.1% by default) in a fixed-size array, whatever the number of values.

>>> import numpy as np
>>> s = QuantileSketch()
>>> s.add(np.arange(1, 100_001, dtype=float))
>>> abs(s.quantile(0.99) / 99_000 - 1) < 0.001
True
"""

from __future__ import annotations

import math

import numpy as np

_MIN, _MAX = 1e-9, 1e12


class QuantileSketch:
    def __init__(self, relative_accuracy: float = 0.001):
        self.gamma = (1 + relative_accuracy) / (1 - relative_accuracy)
        self._log_gamma = math.log(self.gamma)
        self._offset = math.ceil(math.log(_MIN) / self._log_gamma)
        size = math.ceil(math.log(_MAX) / self._log_gamma) - self._offset + 1
        self.counts = np.zeros(size, dtype=np.int64)
        self.zeros = 0  # values below 1e-9 (zero latencies)
        self.n = 0

    def add(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=float)
        small = x < _MIN
        self.zeros += int(small.sum())
        k = np.ceil(np.log(np.clip(x[~small], _MIN, _MAX)) / self._log_gamma).astype(np.int64)
        self.counts += np.bincount(k - self._offset, minlength=self.counts.size)[: self.counts.size]
        self.n += x.size

    def quantile(self, q: float | np.ndarray) -> float | np.ndarray:
        """The value at quantile ``q`` (lower-rank convention, like numpy's 'lower' method)."""
        if self.n == 0:
            return np.full(np.shape(q), np.nan) if np.ndim(q) else float("nan")
        q = np.asarray(q, dtype=float)
        rank = np.floor(q * (self.n - 1)).astype(np.int64)  # 0-based rank
        cum = np.cumsum(self.counts)
        k = np.searchsorted(cum, rank - self.zeros, side="right")
        val = 2 * self.gamma ** (k + self._offset) / (self.gamma + 1)
        out = np.where(rank < self.zeros, 0.0, val)
        return float(out) if out.ndim == 0 else out


class LoadBins:
    """The integral of a piecewise-constant load (intervals with weights) over time bins whose
    width doubles whenever an interval ends past the last bin, so memory stays fixed."""

    def __init__(self, bins: int = 4096, width: float | None = None):
        self.area = np.zeros(bins)
        self.width = width

    def add(self, start: np.ndarray, end: np.ndarray, weight: np.ndarray) -> None:
        if start.size == 0:
            return
        if self.width is None:
            self.width = max(float(end.max()), 1e-9) * 4 / self.area.size
        while end.max() > self.width * self.area.size:
            self.area = self.area.reshape(-1, 2).sum(axis=1)
            self.area = np.concatenate([self.area, np.zeros(self.area.size)])
            self.width *= 2
        edges = np.arange(self.area.size + 1) * self.width
        cum = _ramp(edges, start, weight) - _ramp(edges, end, weight)
        self.area += np.diff(cum)

    def mean_load(self, until: float) -> tuple[np.ndarray, np.ndarray]:
        """Mean load per bin and each bin's width, bins cut at ``until``."""
        if self.width is None or until <= 0:
            return np.zeros(0), np.zeros(0)
        edges = np.arange(self.area.size + 1) * self.width
        widths = np.clip(np.minimum(edges[1:], until) - edges[:-1], 0.0, None)
        keep = widths > 0
        return self.area[keep] / widths[keep], widths[keep]


def _ramp(edges: np.ndarray, t: np.ndarray, w: np.ndarray) -> np.ndarray:
    """sum_i w_i * max(edge - t_i, 0) at every edge, in O(n log n)."""
    order = np.argsort(t, kind="stable")
    ts, ws = t[order], w[order]
    cw = np.concatenate([[0.0], np.cumsum(ws)])
    cwt = np.concatenate([[0.0], np.cumsum(ws * ts)])
    k = np.searchsorted(ts, edges, side="left")
    return edges * cw[k] - cwt[k]
