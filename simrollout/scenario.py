"""The versioned scenario file (YAML, ``version: 1``) and its schema.

Every field is documented in docs/scenario.md. Load with :func:`load_scenario`; errors come back
as one :class:`~simrollout.errors.InputError` naming the file, the field path and the line.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from .contention import Curve
from .distributions import Constant, Dist, no_bools
from .errors import InputError, explain, load_yaml


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data):
        return no_bools(data, cls.model_fields)


class Tool(_Model):
    """One tool category: its share of calls and its latency."""

    weight: PositiveFloat
    latency: Dist


class Workload(_Model):
    trajectories: PositiveInt
    steps: Dist
    llm_time: Dist
    calls_per_step: Dist = Constant(value=1)
    tools: dict[str, Tool] = Field(min_length=1)
    setup: Dist | None = None
    reward: Dist | None = None

    @model_validator(mode="after")
    def _at_least_one_step(self):
        if self.steps.mean() < 1:
            raise ValueError(f"'steps' must be at least 1 on average, got a mean of {self.steps.mean():g}")
        return self


Chance = Annotated[float, Field(ge=0.0, le=1.0)]
FailureRate = Chance | dict[Annotated[float, Field(ge=1)], Chance]


class Failures(_Model):
    """Probability that one operation fails: a create, a tool call (sandbox lost), a teardown.

    Per phase either a probability, or a measured curve ``{operations in flight: probability}``
    (piecewise linear between the points, flat outside them).
    """

    create: FailureRate = 0.0
    exec: FailureRate = 0.0
    teardown: FailureRate = 0.0

    def rate(self, phase: str) -> Callable[[float], float]:
        spec = getattr(self, phase)
        if not isinstance(spec, dict):
            return lambda n, p=float(spec): p
        xs, ys = zip(*sorted((float(k), float(v)) for k, v in spec.items()))
        return lambda n: float(np.interp(n, xs, ys))


Slowdown = NonNegativeFloat | dict[Annotated[float, Field(ge=1)], PositiveFloat]


class Contention(_Model):
    """How a host's operations in flight (``n``, itself included) slow each operation.

    Per phase either a slope ``s`` (latency x (1 + s (n - 1))) or a measured curve
    ``{n: multiplier}``: monotone through the points, a fitted saturation law below the first and
    beyond the last (see :mod:`simrollout.contention`).
    """

    create: Slowdown = 0.0
    exec: Slowdown = 0.0
    teardown: Slowdown = 0.0

    def factor(self, phase: str):
        """The multiplier as a function of operations in flight."""
        return slowdown(getattr(self, phase))


def slowdown(spec) -> Callable[[float], float]:
    """A slope is the straight line ``1 + s (n - 1)``; measured points are a monotone, bounded
    :class:`simrollout.contention.Curve`."""
    if not isinstance(spec, dict):
        return lambda n, s=float(spec): 1.0 + s * (n - 1.0) if n > 1.0 else 1.0
    return Curve(spec)


class Capacity(_Model):
    """Concurrent sandboxes: ``quota`` (hosted service) or ``hosts`` x ``sandboxes_per_host``."""

    hosts: PositiveInt = 1
    sandboxes_per_host: PositiveInt | None = None
    quota: PositiveInt | None = None

    @model_validator(mode="after")
    def _one_form(self):
        if self.quota is not None and (self.sandboxes_per_host is not None or self.hosts != 1):
            raise ValueError("give either quota, or hosts and sandboxes_per_host, not both")
        return self

    @property
    def per_host(self) -> int | None:
        return self.quota if self.quota is not None else self.sandboxes_per_host

    @property
    def total(self) -> int | None:
        return None if self.per_host is None else self.hosts * self.per_host


class Billing(_Model):
    price_per_second: NonNegativeFloat = 0.0
    minimum_seconds: NonNegativeFloat = 0.0


class Substrate(_Model):
    name: str = Field(min_length=1)
    profile: str | None = None
    cold_start: Dist
    warm_start: Dist = Constant(value=0.0)
    exec_overhead: Dist
    teardown: Dist
    failures: Failures = Failures()
    create_rate: PositiveFloat | None = None
    capacity: Capacity = Capacity()
    contention: Contention = Contention()
    billing: Billing = Billing()


class Inference(_Model):
    """Engines serving the policy; generation slows by ``slowdown`` per extra running request."""

    engines: PositiveInt
    slowdown: NonNegativeFloat = 0.0
    price_per_hour: NonNegativeFloat = 0.0


class Cluster(_Model):
    concurrency: PositiveInt | list[PositiveInt]
    inference: Inference | None = None

    @field_validator("concurrency")
    @classmethod
    def _non_empty(cls, v):
        if isinstance(v, list) and not v:
            raise ValueError("give at least one concurrency level")
        return v

    @property
    def levels(self) -> list[int]:
        return list(self.concurrency) if isinstance(self.concurrency, list) else [self.concurrency]


class Policy(_Model):
    mode: Literal["async", "sync"] = "async"
    batch_size: PositiveInt | None = None
    timeout: PositiveFloat | None = None
    retries: NonNegativeInt = 0
    retry_backoff: NonNegativeFloat = 0.0
    warm_pool: NonNegativeInt = 0

    @model_validator(mode="after")
    def _batch(self):
        if self.mode == "sync" and self.batch_size is None:
            raise ValueError("mode 'sync' needs batch_size")
        return self


class Arrivals(_Model):
    kind: Literal["batch", "poisson"] = "batch"
    rate: PositiveFloat | None = None

    @model_validator(mode="after")
    def _rate(self):
        if self.kind == "poisson" and self.rate is None:
            raise ValueError("kind 'poisson' needs rate (trajectories per second)")
        return self


class Scenario(_Model):
    version: Literal[1]
    name: str = "scenario"
    seed: NonNegativeInt = 0
    replications: PositiveInt = 1
    fidelity: Literal["auto", "step", "trajectory"] = "auto"
    workload: Workload
    substrates: list[Substrate] = Field(min_length=1)
    cluster: Cluster
    policy: Policy = Policy()
    arrivals: Arrivals = Arrivals()
    _source: str = PrivateAttr("<scenario>")  # the file it came from, for error messages

    @field_validator("substrates")
    @classmethod
    def _unique(cls, v):
        names = [s.name for s in v]
        if len(set(names)) != len(names):
            raise ValueError(f"substrate names must be unique, got {names}")
        return v

    def resolved_fidelity(self) -> str:
        return self.fidelity_choice()[0]

    def fidelity_choice(self) -> tuple[str, str]:
        """The fidelity that runs and why. ``auto`` simulates every step when the run is small (at
        most 200k steps), else uses the trajectory engine, which the fidelity matrix
        (docs/performance.md) finds within tolerance of the step engine in every mode."""
        if self.fidelity != "auto":
            return self.fidelity, "set in the scenario"
        steps = self.workload.trajectories * self.workload.steps.mean()
        if steps <= 2e5:
            return "step", f"auto: {steps:,.0f} steps, small enough to simulate every step"
        inf = self.cluster.inference
        if self.policy.mode == "sync" and inf is not None and inf.slowdown > 0:
            # the fidelity matrix: sync batches on a loaded tier miss p99 by 3.5% and gain < 2x
            return "step", "auto: sync batches on a loaded inference tier need the step engine"
        return (
            "trajectory",
            f"auto: {steps:,.0f} steps; the trajectory engine holds in every mode of the matrix",
        )


# ---------------------------------------------------------------- loading


class ProfileFile(_Model):
    """A substrate profile under calibration/profiles/ (written by ``simrollout calibrate``)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    version: Literal[1]
    name: str
    substrate: dict
    provenance: dict = {}


def _resolve(ref: str, scenario: Path) -> Path:
    for cand in (scenario.parent / ref, Path(ref)):
        if cand.is_file():
            return cand
    raise InputError(
        f"{scenario}: substrate profile '{ref}' not found (looked relative to the scenario file and "
        "to the current directory)."
    )


def load_profile(path: Path) -> ProfileFile:
    data, node = load_yaml(path)
    try:
        prof = ProfileFile.model_validate(data)
        # check its substrate fields now, so errors name the profile file
        Substrate.model_validate({"name": prof.name, **prof.substrate})
    except ValidationError as exc:
        raise explain(exc, path, node) from None
    return prof


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        # recurse into field groups (string keys), not into distributions or measured curves
        if (
            isinstance(v, dict)
            and isinstance(out.get(k), dict)
            and "kind" not in v
            and all(isinstance(x, str) for x in v)
        ):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def scenario_from_dict(data, path: str | Path = "<scenario>", node=None) -> Scenario:
    """Validate a scenario mapping; substrate ``profile`` paths resolve relative to ``path``."""
    path = Path(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of scenario fields at the top level.")
    subs = data.get("substrates")
    if subs is not None and not isinstance(subs, list):
        raise InputError(f"{path}: field 'substrates' must be a list of substrates, got {subs!r}.")
    data = copy.deepcopy(data)
    for i, sub in enumerate(data.get("substrates") or []):
        if isinstance(sub, dict) and isinstance(sub.get("profile"), str):
            prof = load_profile(_resolve(sub["profile"], path))
            data["substrates"][i] = {"name": prof.name, **_merge(prof.substrate, sub)}
    try:
        scn = Scenario.model_validate(data)
    except ValidationError as exc:
        raise explain(exc, path, node) from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError) as exc:
        # a value of the wrong shape that reached a validator's arithmetic
        raise InputError(
            f"{path}: invalid input ({exc}); check each field's type against docs/scenario.md."
        ) from None
    scn._source = str(path)
    return scn


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    data, node = load_yaml(path)
    return scenario_from_dict(data, path, node)
