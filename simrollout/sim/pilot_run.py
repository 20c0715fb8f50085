"""Running the serving pilot of a cell: the scenario sliced to a few engines and run at step
fidelity (:func:`slice_scenario`), and the load curve, busy share and luck read off its turns
(:func:`run_pilot`). What the pilot is and how the trajectory engine uses it:
:mod:`simrollout.sim.serving_pilot`."""

from __future__ import annotations

import math

import numpy as np

from ..scenario import Scenario, Substrate, scenario_from_dict
from ..scenario.overrides import base_dict
from .engines import STEP
from .model import Cell
from .records import OK
from .serving_pilot import FIRST, LAST, MIN_ENGINES, MIN_FIT, MIN_IN_FLIGHT, STEADY, WAVES, Pilot, phases
from .workload_draws import draw_work


def slice_scenario(scn: Scenario, sub: Substrate, concurrency: int) -> tuple[Scenario, int]:
    """The pilot: ``(scenario at step fidelity on a slice of the cluster, its concurrency)``."""

    inf = scn.cluster.inference
    per_engine = concurrency / inf.engines
    engines = min(inf.engines, max(MIN_ENGINES, math.ceil(MIN_IN_FLIGHT / per_engine)))
    f = engines / inf.engines

    def part(x: float) -> int:
        return max(1, round(x * f))

    conc = part(concurrency)
    d = base_dict(scn)
    d["fidelity"], d["replications"] = STEP.name, 1
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


def run_pilot(scn: Scenario, sub: Substrate, concurrency: int, rep: int, compiled: bool = True) -> Pilot:
    """Run the pilot of one cell (substrate ``sub`` at ``concurrency``, replication ``rep``), its
    bodies and engines compiled where :func:`.pilot_compiled.gaps` allows (``compiled``)."""
    from . import pilot_compiled

    pscn, conc = slice_scenario(scn, sub, concurrency)
    engines = pscn.cluster.inference.engines
    work = draw_work(pscn, rep, detail=True)
    cell = Cell(pscn, pscn.substrates[0], conc, rep, work, STEP.name, keep=True)
    co = pilot_compiled.attach(cell) if compiled and pilot_compiled.gaps(cell) is None else None
    cell.turn_log = []
    samples: list[tuple[int, float]] = []  # (bodies, engine busy seconds)
    period = float(work.llm.sum() / max(work.steps.sum(), 1))  # an unloaded turn, on average

    def sample():
        while True:
            samples.append((cell.bodies, cell.tier.busy_seconds))
            yield cell.env.timeout(period)

    cell.env.process(sample())
    rec = cell.run()
    log = co.turn_log() if co is not None else np.array(cell.turn_log, dtype=float).reshape(-1, 4)
    traj, bodies, secs, unloaded = log.T
    traj, bodies = traj.astype(np.int64), bodies.astype(np.int64)
    b = np.arange(conc + 2)
    # the load curve: seconds over unloaded seconds of the turns begun at each count of bodies
    ratio = monotone(b, np.bincount(bodies, secs, b.size), np.bincount(bodies, unloaded, b.size), True)
    # the share of engines busy, by bodies running (sampled every unloaded turn's length)
    sm = np.array(samples, dtype=float).reshape(-1, 2)
    at = sm[:-1, 0].astype(np.int64)
    span = np.full(at.size, period * engines)
    busy = monotone(b, np.bincount(at, np.diff(sm[:, 1]), b.size), np.bincount(at, span, b.size), True)
    busy = np.minimum(busy, 1.0)  # busy time accrues when an iteration ends: a sample can overshoot
    # a trajectory's luck: its generation seconds over what the load curve gives its turns
    expect = np.bincount(traj, unloaded * ratio[bodies], work.n)
    done = np.bincount(traj, secs, work.n)
    ok = (rec.status == OK) & (expect > 0)
    u = work.llm
    phase = phases(work.n, conc, pscn)
    luck = {p: luck_fit(u[m], done[m] / expect[m]) for p in (FIRST, STEADY, LAST)
            if (m := ok & (phase == p)).sum() >= MIN_FIT}  # fmt: skip
    if STEADY not in luck:  # too few completed trajectories per phase: one fit for all
        luck[STEADY] = (
            luck_fit(u[ok], done[ok] / expect[ok]) if ok.sum() >= 2 else (0.0, 0.0, 0.0, np.zeros(1))
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


def monotone(x: np.ndarray, num: np.ndarray, den: np.ndarray, increasing: bool) -> np.ndarray:
    """``num / den`` at each ``x`` where ``den > 0``, made monotone (weighted by ``den``) and
    interpolated over the others; 1 everywhere when nothing was seen."""
    from scipy.optimize import isotonic_regression

    seen = den > 0
    if not seen.any():
        return np.ones(x.size)
    fit = isotonic_regression(num[seen] / den[seen], weights=den[seen], increasing=increasing).x
    return np.interp(x, x[seen], fit)


def luck_fit(u: np.ndarray, luck: np.ndarray) -> tuple[float, float, float, np.ndarray]:
    """``log luck = a + b (log u - mid)``, least squares, and its residuals."""
    x, y = np.log(u), np.log(luck)
    mid = float(x.mean())
    b = float(np.polyfit(x - mid, y, 1)[0]) if np.ptp(x) > 0 else 0.0
    a = float(y.mean())
    return a, b, mid, np.sort(y - a - b * (x - mid))
