"""Distributions given by data: an empirical one over measured samples (with its quantiles
interpolated) and a discrete one over values and weights.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Annotated, Literal

import numpy as np
from pydantic import (
    Field,
    PositiveFloat,
    model_validator,
)
from scipy.special import ndtr, ndtri  # scipy.stats.norm's cdf and ppf, without importing scipy.stats

from .base import _Base, float32_normals


class Empirical(_Base):
    """Resampled ``samples``, or a curve through published ``quantiles`` {p: value}.

    From quantiles, log(value) is interpolated linearly in the normal score of p (a piecewise
    lognormal), and the end segments are extended past the outermost points.
    """

    kind: Literal["empirical"] = "empirical"
    samples: list[Annotated[float, Field(ge=0)]] | None = Field(None, min_length=1)
    quantiles: dict[float, PositiveFloat] | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_form(cls, data):
        if isinstance(data, dict) and (data.get("samples") is None) == (data.get("quantiles") is None):
            raise ValueError("give either samples (seconds) or quantiles ({level: seconds}), not both")
        return data

    def _check(self) -> None:
        if self.samples is not None and len(self.samples) < 1:
            raise ValueError("'samples' is empty; give at least one sample (seconds)")
        if self.quantiles is not None:
            ps = sorted(self.quantiles)
            outside = [p for p in ps if not 0 < p < 1]
            if outside:
                raise ValueError(
                    f"quantile levels must lie strictly between 0 and 1 (a share, e.g. 0.5 for the median), "
                    f"got {', '.join(f'{p:g}' for p in outside)}"
                )
            if len(ps) < 2:
                raise ValueError(f"give at least two quantiles, got {len(ps)}")
            vs = [self.quantiles[p] for p in ps]
            if any(b <= a for a, b in zip(vs, vs[1:])):
                raise ValueError(
                    "quantiles out of order: values must increase with the level, got "
                    + ", ".join(f"p{p * 100:g}={v:g}" for p, v in zip(ps, vs))
                )

    @cached_property
    def _curve(self) -> tuple[np.ndarray, np.ndarray]:
        ps = np.array(sorted(self.quantiles))
        return ndtri(ps), np.log([self.quantiles[p] for p in ps])

    @cached_property
    def _hinges(self) -> tuple[float, float, list[tuple[float, float]]]:
        """The curve as a line plus hinges: y = y0 + b0 (z - z0) + sum_k db_k max(z - z_k, 0)."""
        zs, ys = self._curve
        b = np.diff(ys) / np.diff(zs)
        return (
            float(ys[0] - b[0] * zs[0]),
            float(b[0]),
            [(float(zs[k]), float(b[k] - b[k - 1])) for k in range(1, len(b))],
        )

    def _from_z(self, z):
        y0, b0, hinges = self._hinges
        y = y0 + b0 * z
        for zk, db in hinges:
            y += db * np.maximum(z - zk, 0)
        return np.exp(y)

    def sample(self, rng, size):
        if self.samples is not None:
            return rng.choice(np.asarray(self.samples, dtype=float), size)
        return self._from_z(float32_normals(rng, size))

    def ppf(self, q):
        if self.samples is not None:
            return np.quantile(self.samples, q)
        return self._from_z(ndtri(q))

    def cdf(self, x):
        if self.samples is not None:
            s = np.sort(self.samples)
            return np.searchsorted(s, x, side="right") / len(s)
        zs, ys = self._curve
        y = np.log(np.maximum(np.asarray(x, dtype=float), 1e-300))
        lo = zs[0] + (y - ys[0]) * (zs[1] - zs[0]) / (ys[1] - ys[0])
        hi = zs[-1] + (y - ys[-1]) * (zs[-1] - zs[-2]) / (ys[-1] - ys[-2])
        return ndtr(np.where(y < ys[0], lo, np.where(y > ys[-1], hi, np.interp(y, ys, zs))))

    def mean(self):
        if self.samples is not None:
            return float(np.mean(self.samples))
        zs, ys = self._curve
        # each segment is a lognormal piece; integrate exp(a + b z) phi(z) over it
        edges = np.concatenate([[-np.inf], zs[1:-1], [np.inf]]) if len(zs) > 2 else [-np.inf, np.inf]
        total = 0.0
        for k in range(len(edges) - 1):
            j = min(k, len(zs) - 2)
            b = (ys[j + 1] - ys[j]) / (zs[j + 1] - zs[j])
            a = ys[j] - b * zs[j]
            lo, hi = edges[k], edges[k + 1]
            total += math.exp(a + b * b / 2) * (ndtr(hi - b) - ndtr(lo - b))
        return float(total)


class Discrete(_Base):
    """A count drawn from ``values`` with ``weights`` (e.g. tool calls per step)."""

    kind: Literal["discrete"] = "discrete"
    values: list[Annotated[float, Field(ge=0)]] = Field(min_length=1)
    weights: list[Annotated[float, Field(ge=0)]] = Field(min_length=1)

    def _check(self) -> None:
        if len(self.values) != len(self.weights):
            raise ValueError(
                "values and weights must have the same length, got "
                f"{len(self.values)} and {len(self.weights)}"
            )
        if not sum(self.weights) > 0:
            raise ValueError("weights must not all be zero")

    @cached_property
    def frozen(self):
        w = np.asarray(self.weights, dtype=float)
        from scipy import stats

        return stats.rv_discrete(values=(self.values, w / w.sum()))

    def sample(self, rng, size):
        w = np.asarray(self.weights, dtype=float)
        return rng.choice(np.asarray(self.values, dtype=float), size, p=w / w.sum())
