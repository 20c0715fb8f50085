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
from scipy import optimize

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
