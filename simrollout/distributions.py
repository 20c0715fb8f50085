"""Latency distributions: one interface (sample, mean, cdf, ppf) over scipy.stats.

A distribution is written in YAML as a mapping with a ``kind``; a bare number means a constant::

    cold_start: {kind: lognormal, median: 0.15, p99: 0.6}
    teardown: 0.04

>>> import numpy as np
>>> d = parse_dist({"kind": "lognormal", "median": 1.0, "p99": 10.0})
>>> round(float(d.ppf(0.99)), 6)
10.0
>>> d.sample(np.random.default_rng(0), 3).shape
(3,)
"""

from __future__ import annotations

import math
import warnings
from functools import cached_property
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveFloat,
    TypeAdapter,
    model_validator,
)
from scipy import optimize, stats

Z99 = float(stats.norm.ppf(0.99))


def no_bools(data, fields: dict):
    """Refuse ``true``/``false`` where a number is expected (pydantic would read them as 1/0)."""
    if isinstance(data, dict):
        for name, value in data.items():
            f = fields.get(name)
            if isinstance(value, bool) and f is not None and f.annotation is not bool:
                raise ValueError(f"'{name}' is {str(value).lower()}; expected a number")
    return data


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data):
        return no_bools(data, cls.model_fields)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draw ``size`` values (seconds, or counts for discrete kinds)."""
        return np.asarray(self.frozen.rvs(size=size, random_state=rng), dtype=float)

    def mean(self) -> float:
        return float(self.frozen.mean())

    def cdf(self, x):
        return self.frozen.cdf(x)

    def ppf(self, q):
        return self.frozen.ppf(q)

    def _check(self) -> None:
        """This kind's own checks of its parameters (shape, count, order); they run first, before
        any mean or quantile is computed from them. Raise ValueError to refuse."""

    @model_validator(mode="after")
    def _valid(self):
        self._check()
        # numpy's and scipy's floating-point trouble raises here rather than warning later: an
        # overflow or a division by zero is an unbounded moment, an invalid value a refusal
        trouble = np.errstate(over="raise", divide="raise", invalid="raise", under="ignore")
        with trouble, warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                mean = self.mean()
            except (OverflowError, ZeroDivisionError):
                mean = math.inf
            except (FloatingPointError, Warning) as w:
                if "invalid" in str(w):
                    raise ValueError(
                        f"this {self.kind} distribution's mean cannot be computed from these parameters ({w})"
                    ) from None
                mean = math.inf
            try:
                tail = float(np.max(self.ppf(0.999)))
            except (OverflowError, FloatingPointError, ZeroDivisionError, Warning):
                tail = math.inf
            except Exception:  # a quantile this kind cannot invert: the mean check stands alone
                tail = 0.0
        if not math.isfinite(mean):
            raise ValueError(
                f"this {self.kind} distribution has an infinite mean; "
                "choose parameters with a finite mean (e.g. log-logistic shape c > 1)"
            )
        if not math.isfinite(tail) or tail > 1e12:
            raise ValueError(f"this {self.kind} distribution's p99.9 ({tail:.3g}) is beyond any latency")
        return self


class _Shifted(_Base):
    loc: float = Field(0.0, ge=0, description="shift added to every draw, seconds")


class Constant(_Base):
    kind: Literal["constant"] = "constant"
    value: float = Field(ge=0)

    def sample(self, rng, size):
        return np.full(size, self.value, dtype=float)

    def mean(self):
        return self.value

    def cdf(self, x):
        return np.where(np.asarray(x) >= self.value, 1.0, 0.0)

    def ppf(self, q):
        return np.full(np.shape(q), self.value, dtype=float) if np.ndim(q) else self.value


class Exponential(_Shifted):
    kind: Literal["exponential"] = "exponential"
    mean_: PositiveFloat = Field(alias="mean")

    @cached_property
    def frozen(self):
        return stats.expon(loc=self.loc, scale=self.mean_)

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
        return stats.lognorm(s=sigma, loc=self.loc, scale=math.exp(mu))

    def sample(self, rng, size):
        mu, sigma = self.params
        return self.loc + np.exp(mu + sigma * rng.standard_normal(size, dtype=np.float32))


class Gamma(_Shifted):
    kind: Literal["gamma"] = "gamma"
    shape: PositiveFloat
    scale: PositiveFloat

    @cached_property
    def frozen(self):
        return stats.gamma(a=self.shape, loc=self.loc, scale=self.scale)

    def sample(self, rng, size):
        return self.loc + self.scale * rng.standard_gamma(self.shape, size, dtype=np.float32)


class Weibull(_Shifted):
    kind: Literal["weibull"] = "weibull"
    shape: PositiveFloat
    scale: PositiveFloat

    @cached_property
    def frozen(self):
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
        return stats.fisk(c=self.c, loc=self.loc, scale=self.scale)


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
        return stats.norm.ppf(ps), np.log([self.quantiles[p] for p in ps])

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
        return self._from_z(rng.standard_normal(size, dtype=np.float32))

    def ppf(self, q):
        if self.samples is not None:
            return np.quantile(self.samples, q)
        return self._from_z(stats.norm.ppf(q))

    def cdf(self, x):
        if self.samples is not None:
            s = np.sort(self.samples)
            return np.searchsorted(s, x, side="right") / len(s)
        zs, ys = self._curve
        y = np.log(np.maximum(np.asarray(x, dtype=float), 1e-300))
        lo = zs[0] + (y - ys[0]) * (zs[1] - zs[0]) / (ys[1] - ys[0])
        hi = zs[-1] + (y - ys[-1]) * (zs[-1] - zs[-2]) / (ys[-1] - ys[-2])
        return stats.norm.cdf(np.where(y < ys[0], lo, np.where(y > ys[-1], hi, np.interp(y, ys, zs))))

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
            total += math.exp(a + b * b / 2) * (stats.norm.cdf(hi - b) - stats.norm.cdf(lo - b))
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
        return stats.rv_discrete(values=(self.values, w / w.sum()))

    def sample(self, rng, size):
        w = np.asarray(self.weights, dtype=float)
        return rng.choice(np.asarray(self.values, dtype=float), size, p=w / w.sum())


class Component(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    weight: PositiveFloat
    dist: Dist


class Mixture(_Base):
    """Weighted mixture; e.g. cached vs uncached image pulls, or tool categories."""

    kind: Literal["mixture"] = "mixture"
    components: list[Component] = Field(min_length=1)

    @property
    def probs(self) -> np.ndarray:
        w = np.array([c.weight for c in self.components])
        return w / w.sum()

    def sample(self, rng, size):
        return self.sample_which(rng, size)[0]

    def sample_which(self, rng, size) -> tuple[np.ndarray, np.ndarray]:
        """Draws and the component each came from (the same stream as :meth:`sample`)."""
        u = rng.random(size, dtype=np.float32)
        which = np.zeros(size, dtype=np.int8)
        for edge in np.cumsum(self.probs)[:-1]:
            which += u >= edge
        out = np.empty(size)
        for k, comp in enumerate(self.components):
            idx = np.flatnonzero(which == k)
            out[idx] = comp.dist.sample(rng, idx.size)
        return out, which

    def mean(self):
        return float(sum(p * c.dist.mean() for p, c in zip(self.probs, self.components)))

    def cdf(self, x):
        return sum(p * c.dist.cdf(x) for p, c in zip(self.probs, self.components))

    def ppf(self, q):
        def one(qq):
            hi = 1.0
            while self.cdf(hi) < qq:
                hi *= 2
            return optimize.brentq(lambda x: self.cdf(x) - qq, 0.0, hi, xtol=1e-12)

        return np.vectorize(one)(q) if np.ndim(q) else one(q)


class Scaled(_Base):
    """Another distribution times ``factor`` (e.g. a profile's latencies made 20% slower)."""

    kind: Literal["scaled"] = "scaled"
    factor: PositiveFloat
    dist: Dist

    def sample(self, rng, size):
        return self.factor * self.dist.sample(rng, size)

    def mean(self):
        return self.factor * self.dist.mean()

    def cdf(self, x):
        return self.dist.cdf(np.asarray(x) / self.factor)

    def ppf(self, q):
        return self.factor * np.asarray(self.dist.ppf(q))


def number_is_constant(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return {"kind": "constant", "value": v}
    return v


Dist = Annotated[
    Union[  # noqa: UP007 - pydantic discriminated union
        Constant, Exponential, Lognormal, Gamma, Weibull, LogLogistic, Empirical, Discrete, Mixture, Scaled
    ],
    Field(discriminator="kind"),
    BeforeValidator(number_is_constant),
]
Component.model_rebuild()
Mixture.model_rebuild()
Scaled.model_rebuild()

_adapter = TypeAdapter(Dist)


def parse_dist(data) -> Dist:
    """Build a distribution from its YAML form (mapping or bare number)."""
    return _adapter.validate_python(data)


def dump_dist(d) -> dict:
    """The YAML form of a distribution."""
    return d.model_dump(by_alias=True, exclude_none=True, exclude_defaults=False)
