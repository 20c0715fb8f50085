"""Serving engines at trajectory fidelity: a pilot of a few engines at step fidelity.

The trajectory engine cannot run every iteration of a million trajectories' turns, so a cell of a
token workload first runs a *pilot*: the same scenario at step fidelity on a slice of the
cluster — ``E'`` of its ``E`` engines, and concurrency, sandbox slots (or quota), clients, warm
pool, create rate and arrival rate scaled by ``E'/E`` — for a few waves of trajectories. From it:

- the *load curve*: a turn's seconds over its unloaded seconds (alone on an engine with its
  prefix cached, :func:`simrollout.sim.workload_draws.unloaded_turns`) by the bodies running per engine when
  it began — KV queueing, batching and prefixes prefilled again after an eviction are all in it;
- the share of engines busy by the bodies running per engine;
- each trajectory's *luck*: its generation seconds over what the load curve gives its turns,
  fitted per phase (first wave, steady state, last wave of an async batch run) as log-linear in
  its unloaded seconds, with the residuals kept.

The trajectory engine then runs each body with ``unloaded x luck x curve(bodies / E)``, the curve
re-read per segment, and accrues engine busy time as ``E x busy share`` over time. The serving
metrics in its table are the pilot's, counts scaled to the run's turns.

The fidelity matrix (docs/fidelity.md) holds this against the step engine run whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..scenario import Scenario

MIN_ENGINES = 4  # engines in a pilot (routing has a choice)
MIN_IN_FLIGHT = 64  # trajectories in flight in a pilot, at least (when the cluster has them)
MIN_FIT = 8  # completed trajectories a phase needs for its own luck fit
WAVES = 4  # a pilot runs this many waves of its concurrency: first, steady (2), last
FIRST, STEADY, LAST = 0, 1, 2
# serving metrics that count things: scaled from the pilot's turns to the run's
COUNTS = ("llm_requests", "prefix_evictions", "compactions", "reprefilled_tokens", "reprefill_gpu_hours",
          "prefill_tokens", "output_tokens")  # fmt: skip


def phases(n: int, concurrency: int, scn: Scenario, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """Phase of trajectories ``lo <= i < hi`` of ``n``: an async batch run's first wave (the first
    ``concurrency``, which start together), its last wave (the last ``concurrency``, which finish
    as the load falls) and the steady state between; every trajectory of a sync or timed run is
    steady (each batch, or the arrival stream, looks alike)."""
    i = np.arange(lo, n if hi is None else hi)
    out = np.full(len(i), STEADY, dtype=np.int8)
    if scn.policy.mode == "async" and scn.arrivals.kind == "batch":
        out[i >= n - concurrency] = LAST
        out[i < concurrency] = FIRST
    return out


@dataclass
class Pilot:
    """What a pilot measured, for the trajectory engine of one cell."""

    load: np.ndarray  # bodies running per engine, increasing
    ratio: np.ndarray  # a turn's seconds over its unloaded seconds at that load (nondecreasing)
    busy: np.ndarray  # the share of engines busy at that load (nondecreasing)
    # a trajectory's luck (its seconds over what the load curve gives its turns) falls with its
    # unloaded seconds U (a wait for KV space does not grow with U): per phase,
    # log luck = a + b log(U / U_mid) + a residual drawn from the pilot's
    luck: dict[int, tuple[float, float, float, np.ndarray]]  # phase -> a, b, U_mid, residuals
    u_range: tuple[float, float]  # the pilot's unloaded seconds per trajectory: the fit holds there
    summary: dict[str, float]  # the pilot tier's metrics
    turns: int  # requests the pilot served
    describe: str  # engines, concurrency and trajectories of the pilot

    def at(self, per_engine: float) -> tuple[float, float]:
        """With ``per_engine`` bodies per engine: a turn's seconds over its unloaded seconds, and
        the share of engines busy."""
        return (float(np.interp(per_engine, self.load, self.ratio)),
                float(np.interp(per_engine, self.load, self.busy)))  # fmt: skip

    def draw(self, rng: np.random.Generator, unloaded: np.ndarray, phase: np.ndarray) -> np.ndarray:
        """Luck of trajectories of these unloaded seconds and phases (stratified: the residuals'
        quantiles are spread evenly over the trajectories, in random order)."""
        n = len(phase)
        pick = (rng.permutation(n) + rng.random(n)) / max(n, 1)
        x = np.log(np.clip(unloaded, *self.u_range))
        out = np.empty(len(phase))
        for p in (FIRST, STEADY, LAST):
            at = phase == p
            a, b, mid, res = self.luck.get(p) or self.luck[STEADY]
            k = np.minimum((pick[at] * res.size).astype(np.int64), res.size - 1)
            out[at] = np.exp(a + b * (x[at] - mid) + res[k])
        return out

    def report(self, store, out: dict) -> None:
        """Its serving metrics in a cell's summary (a :class:`~.metrics.MetricsStore` part): scaled
        to the cell's requests, and the engines' busy share of the cell's makespan."""
        out.update(self.scaled_summary(store.acc.turns))
        engine_seconds = store.scn.cluster.inference.engines * store.acc.end
        out["engine_busy_fraction"] = store.gpu_busy_seconds / engine_seconds if engine_seconds else 0.0

    def scaled_summary(self, turns: int) -> dict[str, float | str]:
        """The pilot's serving metrics, its counts scaled to ``turns`` requests."""
        k = turns / self.turns if self.turns else 0.0
        out: dict[str, float | str] = {m: v * k if m in COUNTS else v for m, v in self.summary.items()}
        out["serving_from"] = self.describe
        return out
