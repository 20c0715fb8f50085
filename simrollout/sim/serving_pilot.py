"""Serving engines at trajectory fidelity: a pilot of a few engines at step fidelity.

The trajectory engine cannot run every iteration of a million trajectories' turns, so a cell of a
token workload first runs a *pilot*: the same scenario at step fidelity on a slice of the
cluster — ``E'`` of its ``E`` engines, and concurrency, sandbox slots (or quota), clients, warm
pool, create rate and arrival rate scaled by ``E'/E`` — for a few waves of trajectories. From it:

- the *load curve*: a turn's seconds over its unloaded seconds (alone on an engine with its
  prefix cached, :func:`simrollout.workload.unloaded_turns`) by the bodies running per engine when
  it began — KV queueing, batching and prefixes prefilled again after an eviction are all in it;
- the share of engines busy by the bodies running per engine;
- each trajectory's *luck*: its generation seconds over what the load curve gives its turns,
  fitted per phase (first wave, steady state, last wave of an async batch run) as log-linear in
  its unloaded seconds, with the residuals kept.

The trajectory engine then runs each body with ``unloaded x luck x curve(bodies / E)``, the curve
re-read per segment, and accrues engine busy time as ``E x busy share`` over time. The serving
metrics in its table are the pilot's, counts scaled to the run's turns.

The fidelity matrix (docs/performance.md) holds this against the step engine run whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..scenario import Scenario, Substrate

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


def slice_scenario(scn: Scenario, sub: Substrate, concurrency: int) -> tuple[Scenario, int]:
    """The pilot: ``(scenario at step fidelity on a slice of the cluster, its concurrency)``."""
    from ..scenario import scenario_from_dict
    from ..sweeps import base_dict

    inf = scn.cluster.inference
    per_engine = concurrency / inf.engines
    engines = min(inf.engines, max(MIN_ENGINES, math.ceil(MIN_IN_FLIGHT / per_engine)))
    f = engines / inf.engines

    def part(x: float) -> int:
        return max(1, round(x * f))

    conc = part(concurrency)
    d = base_dict(scn)
    d["fidelity"], d["replications"] = "step", 1
    d["cluster"].update(concurrency=conc, clients=part(scn.cluster.clients))
    d["cluster"]["inference"]["engines"] = engines
    d["substrates"] = [s for s in d["substrates"] if s["name"] == sub.name]
    s = d["substrates"][0]
    cap = s.get("capacity", {})
    if cap.get("quota"):
        cap["quota"] = part(cap["quota"])
    elif cap.get("sandboxes_per_host"):  # the same slots per trajectory: fewer hosts, or a smaller one
        hosts = cap.get("hosts", 1)
        if hosts * f >= 1:
            cap["hosts"] = part(hosts)
        else:
            cap["hosts"], cap["sandboxes_per_host"] = 1, part(hosts * cap["sandboxes_per_host"])
    if s.get("create_rate"):
        s["create_rate"] = s["create_rate"] * f
    pol = d["policy"]
    wave = conc
    if pol.get("warm_pool"):
        pol["warm_pool"] = part(pol["warm_pool"])
    if pol.get("mode") == "sync":
        pol["batch_size"] = wave = part(pol["batch_size"])
    if d.get("arrivals", {}).get("kind") == "poisson":
        d["arrivals"]["rate"] *= f
    d["workload"]["trajectories"] = min(WAVES * max(wave, conc), part(scn.trajectories))
    return scenario_from_dict(d, scn._source), conc


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

    def scaled_summary(self, turns: int) -> dict[str, float | str]:
        """The pilot's serving metrics, its counts scaled to ``turns`` requests."""
        k = turns / self.turns if self.turns else 0.0
        out: dict[str, float | str] = {m: v * k if m in COUNTS else v for m, v in self.summary.items()}
        out["serving_from"] = self.describe
        return out


def run_pilot(scn: Scenario, sub: Substrate, concurrency: int, rep: int) -> Pilot:
    """Run the pilot of one cell (substrate ``sub`` at ``concurrency``, replication ``rep``)."""
    from ..workload import draw_work
    from .model import Cell
    from .records import OK

    pscn, conc = slice_scenario(scn, sub, concurrency)
    engines = pscn.cluster.inference.engines
    work = draw_work(pscn, rep, detail=True)
    cell = Cell(pscn, pscn.substrates[0], conc, rep, work, "step", keep=True)
    cell.turn_log = []
    samples: list[tuple[int, float]] = []  # (bodies, engine busy seconds)
    period = float(work.llm.sum() / max(work.steps.sum(), 1))  # an unloaded turn, on average

    def sample():
        while True:
            samples.append((cell.bodies, cell.tier.busy_seconds))
            yield cell.env.timeout(period)

    cell.env.process(sample())
    rec = cell.run()
    log = np.array(cell.turn_log, dtype=float).reshape(-1, 4)
    traj, bodies, secs, unloaded = log.T
    traj, bodies = traj.astype(np.int64), bodies.astype(np.int64)
    b = np.arange(conc + 2)
    # the load curve: seconds over unloaded seconds of the turns begun at each count of bodies
    ratio = _monotone(b, np.bincount(bodies, secs, b.size), np.bincount(bodies, unloaded, b.size), True)
    # the share of engines busy, by bodies running (sampled every unloaded turn's length)
    sm = np.array(samples, dtype=float).reshape(-1, 2)
    at = sm[:-1, 0].astype(np.int64)
    span = np.full(at.size, period * engines)
    busy = _monotone(b, np.bincount(at, np.diff(sm[:, 1]), b.size), np.bincount(at, span, b.size), True)
    busy = np.minimum(busy, 1.0)  # busy time accrues when an iteration ends: a sample can overshoot
    # a trajectory's luck: its generation seconds over what the load curve gives its turns
    expect = np.bincount(traj, unloaded * ratio[bodies], work.n)
    done = np.bincount(traj, secs, work.n)
    ok = (rec.status == OK) & (expect > 0)
    u = work.llm
    phase = phases(work.n, conc, pscn)
    luck = {p: _luck_fit(u[m], done[m] / expect[m]) for p in (FIRST, STEADY, LAST)
            if (m := ok & (phase == p)).sum() >= MIN_FIT}  # fmt: skip
    if STEADY not in luck:  # too few completed trajectories per phase: one fit for all
        luck[STEADY] = (
            _luck_fit(u[ok], done[ok] / expect[ok]) if ok.sum() >= 2 else (0.0, 0.0, 0.0, np.zeros(1))
        )
    u_range = (float(u[ok].min()), float(u[ok].max())) if ok.any() else (0.0, np.inf)
    tier = cell.tier
    return Pilot(
        load=b / engines,
        ratio=ratio,
        busy=busy,
        luck=luck,
        u_range=u_range,
        summary=tier.summary(cell.acc.end),
        turns=tier.requests,
        describe=f"pilot: {engines} of {scn.cluster.inference.engines} engines, {conc} in flight, "
        f"{work.n} trajectories at step fidelity",
    )


def _monotone(x: np.ndarray, num: np.ndarray, den: np.ndarray, increasing: bool) -> np.ndarray:
    """``num / den`` at each ``x`` where ``den > 0``, made monotone (weighted by ``den``) and
    interpolated over the others; 1 everywhere when nothing was seen."""
    from scipy.optimize import isotonic_regression

    seen = den > 0
    if not seen.any():
        return np.ones(x.size)
    fit = isotonic_regression(num[seen] / den[seen], weights=den[seen], increasing=increasing).x
    return np.interp(x, x[seen], fit)


def _luck_fit(u: np.ndarray, luck: np.ndarray) -> tuple[float, float, float, np.ndarray]:
    """``log luck = a + b (log u - mid)``, least squares, and its residuals."""
    x, y = np.log(u), np.log(luck)
    mid = float(x.mean())
    b = float(np.polyfit(x - mid, y, 1)[0]) if np.ptp(x) > 0 else 0.0
    a = float(y.mean())
    return a, b, mid, np.sort(y - a - b * (x - mid))
