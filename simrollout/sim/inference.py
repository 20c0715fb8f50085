"""The inference tier: engines whose per-step generation time grows with their running requests."""

from __future__ import annotations

import numpy as np
import simpy

from ..scenario import Inference


class InferenceTier:
    """``engines`` engines; a request goes to the least-loaded one and takes
    ``base x (1 + slowdown x (requests running there, itself included, - 1))`` seconds."""

    def __init__(self, env: simpy.Environment, spec: Inference | None):
        self.env = env
        self.spec = spec
        n = spec.engines if spec else 0
        self.running = np.zeros(n, dtype=np.int64)
        self._since = np.zeros(n)
        self.busy_seconds = 0.0
        self.trace: list | None = None  # (time, engine, running requests) on every change

    def duration(self, base: float) -> tuple[int, float]:
        """Admit a request: pick its engine and fix its duration (step fidelity)."""
        if self.spec is None:
            return -1, base
        e = int(np.argmin(self.running))
        if self.running[e] == 0:
            self._since[e] = self.env.now
        self.running[e] += 1
        if self.trace is not None:
            self.trace.append((self.env.now, e, int(self.running[e])))
        return e, base * (1.0 + self.spec.slowdown * (self.running[e] - 1))

    def done(self, e: int) -> None:
        if e < 0:
            return
        self.running[e] -= 1
        if self.trace is not None:
            self.trace.append((self.env.now, e, int(self.running[e])))
        if self.running[e] == 0:
            self.busy_seconds += self.env.now - self._since[e]

    @property
    def utilised_seconds(self) -> float:
        """Engine-seconds in use: with turns in seconds there is no capacity to fill, so an
        engine with a request running counts as used."""
        return self.busy_seconds


def expected_busy_engines(load: np.ndarray, engines: int) -> np.ndarray:
    """E[min(engines, K)] for K ~ Poisson(load): engines busy when ``load`` requests generate.

    Uses sum_{k<E} k p(k) = load x F(E-2), so E[min(E, K)] = load F(E-2) + E (1 - F(E-1)).
    """
    from scipy import stats

    load = np.asarray(load, dtype=float)
    return load * stats.poisson.cdf(engines - 2, load) + engines * stats.poisson.sf(engines - 1, load)
