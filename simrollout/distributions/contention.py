"""How operations in flight slow each operation: a monotone, bounded curve from measured points.

A measured curve ``{n: multiplier}`` (n operations in flight, itself included) becomes:

- a saturation law fitted to the points, ``m(n) = (1 + (max(n - 1, 0) / c) ** p) ** (b / p)``:
  about ``c`` operations are served side by side (m stays near 1 below), beyond which each one
  waits for its share (m grows like ``((n - 1) / c) ** b``, ``b <= 1``: at most linearly, the
  processor-sharing bound); ``p`` sets how sharp the knee is;
- inside the measured range, a monotone cubic (PCHIP) through the points, made non-decreasing by
  isotonic regression, with knots from the law between (1, 1) and the first point (no straight
  line from (1, 1) unless measured);
- beyond the last point, the law scaled to meet it: never below 1, never decreasing, growing
  no faster than linearly.

>>> f = Curve({8: 3.0, 32: 12.0})
>>> 1.0 <= f(2) <= f(8) <= f(20) <= f(32) <= f(200)
True
"""

from __future__ import annotations

import math
import warnings

import numpy as np


def law(n, c: float, b: float, p: float):
    """The saturation law at ``n`` operations in flight (numpy-friendly)."""
    x = np.maximum(np.asarray(n, dtype=float) - 1.0, 0.0) / c
    return (1.0 + x**p) ** (b / p)


def fit_law(xs, ys, weights=None) -> tuple[float, float, float]:
    """Least squares on log multipliers (with (1, 1) included): ``(c, b, p)``."""
    x = np.concatenate([[1.0], np.asarray(xs, dtype=float)])
    y = np.log(np.maximum(np.concatenate([[1.0], np.asarray(ys, dtype=float)]), 1.0))
    w = np.concatenate([[1.0], np.ones(len(xs)) if weights is None else np.asarray(weights, float)])
    if x.size < 2 or not np.any(y > 1e-6):
        return float(max(x.max(), 1.0)) * 1e3, 0.0, 2.0  # flat: nothing measured slows
    hi = float(x.max())

    def resid(theta):
        c, b, p = math.exp(theta[0]), theta[1], theta[2]
        return np.sqrt(w) * (np.log(law(x, c, b, p)) - y)

    from scipy import optimize

    best = None
    for c0 in (0.5, 2.0, hi / 4):  # a few starts: the knee may sit anywhere in the range
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = optimize.least_squares(
                resid, [math.log(max(c0, 1e-3)), 0.9, 2.0],
                bounds=([math.log(1e-3), 0.0, 1.0], [math.log(1e5), 1.0, 8.0]),
            )  # fmt: skip
        if best is None or r.cost < best.cost:
            best = r
    return math.exp(best.x[0]), float(best.x[1]), float(best.x[2])


class Curve:
    """The multiplier as a function of operations in flight, for measured points (see module)."""

    STEP = 0.25  # table resolution in operations in flight

    def __init__(self, points: dict[float, float]):
        from scipy import interpolate
        from scipy.optimize import isotonic_regression

        pts = sorted((float(k), float(v)) for k, v in points.items() if float(k) > 1.0)
        xs = np.array([p[0] for p in pts])
        ys = np.array([p[1] for p in pts])
        if xs.size:
            ys = np.maximum(isotonic_regression(np.maximum(ys, 1.0)).x, 1.0)
        self.c, self.b, self.p = fit_law(xs, ys)
        self.hi = float(xs[-1]) if xs.size else 1.0
        self.y_hi = float(ys[-1]) if xs.size else 1.0
        self._scale = self.y_hi / float(law(self.hi, self.c, self.b, self.p))
        if xs.size:  # law knots between (1, 1) and the first measured point, then the points
            lead = np.linspace(1.0, xs[0], 6)[:-1]
            kx = np.concatenate([lead, xs])
            ky = np.concatenate([np.minimum(law(lead, self.c, self.b, self.p), ys[0]), ys])
            ky = np.maximum.accumulate(ky)
            grid = np.arange(1.0, self.hi + self.STEP, self.STEP)
            self._table = interpolate.PchipInterpolator(kx, ky)(np.minimum(grid, self.hi))
        else:
            self._table = np.ones(1)

    def __call__(self, n: float) -> float:
        if n <= 1.0:
            return 1.0
        if n >= self.hi:
            return max(self.y_hi, self._scale * float(law(n, self.c, self.b, self.p)))
        k = (n - 1.0) / self.STEP
        i = int(k)
        t = self._table
        return float(t[i] + (k - i) * (t[i + 1] - t[i])) if i + 1 < t.size else float(t[-1])

    def describe(self) -> dict:
        """The fitted law, for profiles and reports."""
        return {"capacity": round(self.c, 4), "exponent": round(self.b, 4), "sharpness": round(self.p, 4)}
