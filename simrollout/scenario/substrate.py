"""A ``substrates`` entry: lifecycle latencies, failures, host contention, capacity, billing and the
image cache."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Literal

import numpy as np
from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    model_validator,
)

from ..distributions import Constant, Dist
from ..distributions.contention import Curve
from .base import Count, _Model
from .workload import FailureRate


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


PHASES = ("create", "exec", "teardown")  # the lifecycle operations that contend
Phase = Literal["create", "exec", "teardown"]
Slowdown = NonNegativeFloat | dict[Annotated[float, Field(ge=1)], PositiveFloat]


class Contention(_Model):
    """How a host's operations in flight (``n``, itself included) slow each operation.

    Per phase either a slope ``s`` (latency x (1 + s (n - 1))) or a measured curve
    ``{n: multiplier}``: monotone through the points, a fitted saturation law below the first and
    beyond the last (see :mod:`simrollout.distributions.contention`).
    """

    create: Slowdown = 0.0
    exec: Slowdown = 0.0
    teardown: Slowdown = 0.0
    # where operations in flight slow each other: on one host (a Docker daemon), across the whole
    # service (a shared control plane), or per rollout client (cluster.clients; what a probe from
    # one client measures of a hosted service)
    scope: Literal["host", "service", "client"] = "host"
    # how much one operation of another phase in flight counts towards a phase's load, relative
    # to one of its own (a create slows creates more than an exec does); missing weights are 1
    weights: dict[Phase, dict[Phase, NonNegativeFloat]] | None = None
    # how creates and teardowns feel the load: false, each takes base x m(n at its start); true,
    # they share the domain (processor sharing): each progresses at 1 / m(n now), re-read whenever
    # an operation there starts or ends, so a create that a burst overtakes slows down and one
    # left alone speeds up (execs keep the multiplier at their start). ``calibrate`` fits such
    # curves on the load averaged over each operation's life.
    shared: bool = False
    # with ``shared``, how the creates in flight divide the domain's create capacity (the sum of
    # their sharing rates): ``together``, each its share, so a burst's creates finish together;
    # ``in_order``, the oldest first (a control plane that serves creates in arrival order, as
    # Docker's daemon does), so a burst's creates finish one after another at the same throughput
    creates: Literal["together", "in_order"] = "together"

    @model_validator(mode="after")
    def _in_order_shares(self):
        if self.creates == "in_order" and not self.shared:
            raise ValueError(
                "creates 'in_order' divides the shared capacity of creates: it needs shared: true"
            )
        return self

    @model_validator(mode="after")
    def _others_only(self):
        own = [ph for ph, w in (self.weights or {}).items() if ph in w]
        if own:
            raise ValueError(
                f"weights of {own}: a phase's own operations count one; weigh only the other phases"
            )
        return self

    def factor(self, phase: str):
        """The multiplier as a function of operations in flight."""
        return slowdown(getattr(self, phase))

    def weight_rows(self) -> dict[str, tuple[float, float, float]] | None:
        """Per phase, the weights of (create, exec, teardown) operations in its load; None when
        every operation counts one."""
        if not self.weights:
            return None
        rows = {}
        for ph in PHASES:
            got = self.weights.get(ph, {})
            rows[ph] = tuple(1.0 if q == ph else float(got.get(q, 1.0)) for q in PHASES)
        return rows


def slowdown(spec) -> Callable[[float], float]:
    """A slope is the straight line ``1 + s (n - 1)``; measured points are a monotone, bounded
    :class:`simrollout.distributions.contention.Curve`."""
    if not isinstance(spec, dict):
        return lambda n, s=float(spec): 1.0 + s * (n - 1.0) if n > 1.0 else 1.0
    return _curve(tuple(sorted((float(k), float(v)) for k, v in spec.items())))


@functools.lru_cache(maxsize=512)
def _curve(points: tuple[tuple[float, float], ...]) -> Curve:
    """One :class:`Curve` per set of points (its law is fitted once, however many cells use it)."""
    return Curve(dict(points))


class Capacity(_Model):
    """Concurrent sandboxes: ``quota`` (hosted service) or ``hosts`` x ``sandboxes_per_host``."""

    hosts: Count = 1
    sandboxes_per_host: Count | None = None
    quota: Count | None = None

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


class ImageCache(_Model):
    """Per host: task images pulled at ``pull_mb_s`` (pulls on a host queue on its link) into a
    cache of ``cache_gb`` (least recently used image evicted first)."""

    pull_mb_s: PositiveFloat
    cache_gb: PositiveFloat


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
    image_cache: ImageCache | None = None  # none: task images are always ready (e.g. prebuilt snapshots)
    reset: Dist | None = None  # reusing a sandbox for the next sample of its task (policy.reuse)
    # per tool category (or tool name): tool latency x factor on this substrate (``probe`` measures it)
    tool_speed: dict[str, PositiveFloat] = {}

    def speed_of(self, names: list[str]) -> np.ndarray | None:
        """Factors for tool categories (or names) ``names``; None when every one is 1."""
        f = np.array([float(self.tool_speed.get(n, self.tool_speed.get("default", 1.0))) for n in names])
        return None if np.all(f == 1.0) else f
