"""What every scenario section shares: a frozen model that refuses unknown fields and booleans
for numbers, and a check that a distribution is non-negative."""

from __future__ import annotations

import copy
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from ..distributions import Dist, no_bools

# the simulator holds an entry per engine, host, client and rollout worker: a count beyond these
# is a typo or an overflow, refused before anything is allocated
MAX_ENGINES = 1_000_000
MAX_COUNT = 10_000_000
Engines = Annotated[int, Field(gt=0, le=MAX_ENGINES)]
Count = Annotated[int, Field(gt=0, le=MAX_COUNT)]
NonNegativeCount = Annotated[int, Field(ge=0, le=MAX_COUNT)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data):
        return no_bools(data, cls.model_fields)


def _non_negative(d: Dist, what: str) -> Dist:
    if float(d.ppf(1e-9)) < 0:
        raise ValueError(f"'{what}' must be a count of tokens >= 0, got a distribution below 0")
    return d


def merge(base: dict, over: dict) -> dict:
    """``over`` laid on a copy of ``base``, recursing into field groups."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        # recurse into field groups (string keys), not into distributions or measured curves
        if (
            isinstance(v, dict)
            and isinstance(out.get(k), dict)
            and "kind" not in v
            and all(isinstance(x, str) for x in v)
        ):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out
