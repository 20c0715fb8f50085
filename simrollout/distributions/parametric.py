"""The parametric families: exponential, lognormal, gamma, Weibull and log-logistic, each with an
optional shift (loc); a lognormal is also given by its median and p99.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Literal

import numpy as np
from pydantic import (
    Field,
    PositiveFloat,
    model_validator,
)
from scipy.special import ndtr, ndtri  # scipy.stats.norm's cdf and ppf, without importing scipy.stats

from .base import Z99, _Shifted, float32_normals


class Exponential(_Shifted):
    kind: Literal["exponential"] = "exponential"
    mean_: PositiveFloat = Field(alias="mean")

    @cached_property
    def frozen(self):
        from scipy import stats

        return stats.expon(loc=self.loc, scale=self.mean_)

    def mean(self) -> float:
        return float(1.0 * self.mean_ + self.loc)  # scipy's expon.mean(), without importing it

    def sample(self, rng, size):
        return self.loc + self.mean_ * rng.standard_exponential(size, dtype=np.float32)


class Lognormal(_Shifted):
    """Lognormal by ``mu``/``sigma`` (of the log) or by ``median`` and ``p99``."""

    kind: Literal["lognormal"] = "lognormal"
    mu: float | None = None
    sigma: PositiveFloat | None = None
    median: PositiveFloat | None = None
    p99: PositiveFloat | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_form(cls, data):
        if isinstance(data, dict):  # a null parameter is a missing one
            params = ("mu", "sigma", "median", "p99")
            data = {k: v for k, v in data.items() if v is not None or k not in params}
            if "median" in data and "sigma" in data and "mu" not in data and "p99" not in data:
                return data  # median and sigma: the way a lognormal is often quoted
            by_log = "mu" in data or "sigma" in data
            by_q = "median" in data or "p99" in data
            if by_log == by_q:
                raise ValueError("give mu and sigma, median and p99, or median and sigma")
            if by_q and not ("median" in data and "p99" in data):
                raise ValueError("give both median and p99")
            if by_log and not ("mu" in data and "sigma" in data):
                raise ValueError("give both mu and sigma")
            num = (int, float)
            both = isinstance(data.get("p99"), num) and isinstance(data.get("median"), num)
            if by_q and both and not data["p99"] > data["median"]:
                raise ValueError("p99 must be greater than median")
        return data

    @property
    def params(self) -> tuple[float, float]:
        if self.mu is not None:
            return self.mu, self.sigma
        if self.sigma is not None:
            return math.log(self.median), self.sigma
        mu = math.log(self.median)
        return mu, (math.log(self.p99) - mu) / Z99

    @cached_property
    def frozen(self):
        mu, sigma = self.params
        from scipy import stats

        return stats.lognorm(s=sigma, loc=self.loc, scale=math.exp(mu))

    def mean(self) -> float:
        """scipy's ``lognorm.mean()`` to the bit (``sqrt(exp(s^2)) x scale + loc``), without
        importing scipy.stats to check a scenario."""
        mu, sigma = self.params
        return float(np.sqrt(np.exp(np.float64(sigma) * sigma)) * math.exp(mu) + self.loc)

    def cdf(self, x):
        """scipy's ``lognorm.cdf`` to the bit (``ndtr(log((x - loc) / scale) / s)``)."""
        mu, sigma = self.params
        z = np.asarray((np.asarray(x) - self.loc) / math.exp(mu), dtype=np.float64)
        out = np.zeros(z.shape)
        inside = (z > 0) & (z < np.inf)
        out[inside] = ndtr(np.log(z[inside]) / sigma)
        out[z == np.inf] = 1.0
        out[np.isnan(z)] = np.nan
        return out[()]

    def ppf(self, q):
        """scipy's ``lognorm.ppf`` to the bit (``exp(s ndtri(q)) x scale + loc``)."""
        mu, sigma = self.params
        return (np.exp(np.float64(sigma) * ndtri(np.asarray(q, dtype=np.float64))) * math.exp(mu) + self.loc)[
            ()
        ]

    def sample(self, rng, size):
        mu, sigma = self.params
        x = float32_normals(rng, size, sigma, mu)  # in float32: loc + exp(mu + sigma x), to the bit
        np.exp(x, out=x)
        return x + self.loc if self.loc else x


class Gamma(_Shifted):
    kind: Literal["gamma"] = "gamma"
    shape: PositiveFloat
    scale: PositiveFloat

    @cached_property
    def frozen(self):
        from scipy import stats

        return stats.gamma(a=self.shape, loc=self.loc, scale=self.scale)

    def sample(self, rng, size):
        return self.loc + self.scale * rng.standard_gamma(self.shape, size, dtype=np.float32)


class Weibull(_Shifted):
    kind: Literal["weibull"] = "weibull"
    shape: PositiveFloat
    scale: PositiveFloat

    @cached_property
    def frozen(self):
        from scipy import stats

        return stats.weibull_min(c=self.shape, loc=self.loc, scale=self.scale)

    def sample(self, rng, size):
        return self.loc + self.scale * rng.weibull(self.shape, size)


class LogLogistic(_Shifted):
    """Log-logistic (scipy's ``fisk``); the mean is finite only for shape ``c > 1``."""

    kind: Literal["loglogistic"] = "loglogistic"
    c: PositiveFloat
    scale: PositiveFloat

    @cached_property
    def frozen(self):
        from scipy import stats

        return stats.fisk(c=self.c, loc=self.loc, scale=self.scale)
