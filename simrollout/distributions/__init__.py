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

from typing import Annotated, Literal, Union

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveFloat,
    TypeAdapter,
)

from .base import Z99, Constant, _Base, no_bools  # noqa: F401 (the package's interface)
from .empirical import Discrete, Empirical
from .parametric import Exponential, Gamma, LogLogistic, Lognormal, Weibull


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
        """The least ``x`` with ``cdf(x) >= q``, by bisection between the components' quantiles
        (it lies between the least and the greatest; a component may be a constant)."""
        qq = np.asarray(q, dtype=float)
        each = np.array([np.broadcast_to(np.asarray(c.dist.ppf(qq), dtype=float), qq.shape)
                         for c in self.components])  # fmt: skip
        lo, hi = each.min(axis=0), each.max(axis=0)
        hi = np.where(qq <= 0, lo, hi)
        inner = np.isfinite(hi) & (hi > lo)
        for _ in range(80):  # cdf(hi) >= q throughout; every x below lo has cdf(x) < q
            if not inner.any():
                break
            mid = np.where(inner, lo + (hi - lo) / 2, hi)
            up = np.asarray(self.cdf(mid)) >= qq
            hi, lo = np.where(inner & up, mid, hi), np.where(inner & ~up, mid, lo)
            inner &= hi - lo > 1e-12 * np.maximum(np.abs(hi), 1.0)
        return hi if np.ndim(q) else float(hi)

    def sample_above(self, rng, size: int, x: float) -> np.ndarray:
        """``size`` draws given that they exceed ``x``: the component in proportion to its mass
        above ``x``, then its own conditional tail (vectorized, unlike :meth:`ppf`)."""
        below = [float(np.asarray(c.dist.cdf(x))) for c in self.components]
        above = self.probs * (1.0 - np.array(below))
        which = np.searchsorted(np.cumsum(above / above.sum())[:-1], rng.random(size), side="right")
        v = rng.random(size)
        out = np.empty(size)
        for k, (comp, f) in enumerate(zip(self.components, below)):
            at = which == k
            out[at] = comp.dist.ppf(f + (1.0 - f) * v[at])
        return np.maximum(out, x)


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


class Capped(_Base):
    """Another distribution cut at ``cap``: ``min(X, cap)`` (a harness's tool timeout). Built by
    the simulator, not written in a scenario."""

    kind: Literal["capped"] = "capped"
    cap: PositiveFloat
    dist: Dist

    def sample(self, rng, size):
        return np.minimum(self.dist.sample(rng, size), self.cap)

    def mean(self):
        from scipy import integrate

        # E min(X, cap) = the integral of the survival function up to the cap
        got, _ = integrate.quad(lambda x: 1.0 - float(np.asarray(self.dist.cdf(x))), 0.0, self.cap, limit=200)
        return float(got)

    def cdf(self, x):
        x = np.asarray(x, dtype=float)
        return np.where(x >= self.cap, 1.0, self.dist.cdf(x))

    def ppf(self, q):
        return np.minimum(np.asarray(self.dist.ppf(q), dtype=float), self.cap)


Component.model_rebuild()
Mixture.model_rebuild()
Capped.model_rebuild()
Scaled.model_rebuild()

_adapter = TypeAdapter(Dist)


def parse_dist(data) -> Dist:
    """Build a distribution from its YAML form (mapping or bare number)."""
    return _adapter.validate_python(data)


def dump_dist(d) -> dict:
    """The YAML form of a distribution."""
    return d.model_dump(by_alias=True, exclude_none=True, exclude_defaults=False)
