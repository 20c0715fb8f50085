"""What every distribution shares: the frozen model, refusing booleans for numbers, the
scipy-backed sample / mean / cdf / ppf, and the check that a mean and a far tail are finite.
"""

from __future__ import annotations

import math
import warnings
from typing import Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)
from scipy.special import ndtri

Z99 = float(ndtri(0.99))  # the standard normal's 99th percentile (scipy.stats.norm.ppf computes it so)


COMPILED_NORMALS = 1 << 16  # at least this many float32 normals are drawn compiled (:mod:`.normal_f32`)


def float32_normals(rng: np.random.Generator, size, scale: float | None = None, shift: float = 0.0):
    """``rng.standard_normal(size, dtype=np.float32)`` (then ``x *= scale; x += shift`` in float32):
    numpy's values to the bit, drawn compiled when there are many from numpy's default bit
    generator and this numpy draws as the compiled loop does (numba loaded only then)."""
    if int(np.prod(size)) >= COMPILED_NORMALS and type(rng.bit_generator) is np.random.PCG64:
        from .normal_f32 import agrees_with_numpy, standard_normal_f32

        if agrees_with_numpy():
            return standard_normal_f32(rng, size, scale, shift)
    x = rng.standard_normal(size, dtype=np.float32)
    if scale is not None:
        x *= scale
        x += shift
    return x


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

    def sample_above(self, rng: np.random.Generator, size: int, x: float) -> np.ndarray:
        """``size`` draws given that they exceed ``x`` (by the quantile function)."""
        below = float(np.asarray(self.cdf(x)))
        return np.maximum(np.asarray(self.ppf(below + (1.0 - below) * rng.random(size)), dtype=np.float64), x)

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
