"""A probe run on a known substrate model instead of a real backend.

The probe's lifecycles (create, ``commands`` execs of a no-op, teardown; ``level`` of them in
flight, the next starting when one ends) run on the simulator's own fleet
(:class:`simrollout.sim.fleet.Fleet`: the same contention, failures and capacity the rollouts
see), and come out as the records ``simrollout probe`` writes. Calibrating them and simulating a
workload the probe never ran, on the fitted and on the true model, tells how well the calibration
can predict at best: a miss here is the method's, not the machine's.

>>> from simrollout.scenario import Substrate
>>> sub = Substrate(name="s", cold_start=0.2, exec_overhead=0.05, teardown=0.1)
>>> recs = simulate_probe(sub, levels=(1, 2), sandboxes=4, commands=2)
>>> len(recs), sorted({r["phase"] for r in recs})
(32, ['create', 'exec', 'teardown'])

With ``reference``, the probe repeats its reference blocks as ``simrollout probe`` does
(:meth:`ProbePlan.schedule`); ``drift`` makes the machine slow down linearly over the probe:
the k-th of K parts of the schedule runs with every lifecycle latency times
``1 + drift x k / (K - 1)``.

>>> recs = simulate_probe(sub, levels=(1, 2), sandboxes=4, commands=2, reference=2, drift=0.1)
>>> sorted({r["block"] for r in recs if r["reference"]})
[0, 1, 2]
"""

from __future__ import annotations

from dataclasses import asdict

import simpy

from simrollout.calibration.probe import LEVELS, ProbePlan, ProbeRecord
from simrollout.distributions import Scaled
from simrollout.rng import stream
from simrollout.scenario import Substrate
from simrollout.sim.fleet import Fleet


def _slowed(sub: Substrate, factor: float) -> Substrate:
    """``sub`` with its create, exec and teardown latencies times ``factor``."""
    if factor == 1.0:
        return sub
    fields = ("cold_start", "exec_overhead", "teardown")
    return sub.model_copy(update={f: Scaled(factor=factor, dist=getattr(sub, f)) for f in fields})


def simulate_probe(
    sub: Substrate,
    levels: tuple[int, ...] = LEVELS,
    sandboxes: int = 0,
    commands: int = 10,
    seed: int = 0,
    reference: int = 0,
    drift: float = 0.0,
    middle: int = 1,
) -> list[dict]:
    """Probe records (one dict per operation) of ``sub`` at each level, as ``probe`` would write;
    ``reference`` sandboxes per reference block (0: none), ``drift`` the slowdown from the start
    to the end of the probe."""
    out: list[dict] = []
    plan = ProbePlan(sandboxes=sandboxes, levels=tuple(levels), reference=reference, middle=middle)
    order = plan.schedule()
    for part, (level, count, block) in enumerate(order):
        env = simpy.Environment()
        key = ("synthetic-probe", sub.name, level) + (() if block is None else ("reference", block))
        rng = stream(seed, *key)
        now = _slowed(sub, 1.0 + drift * part / max(len(order) - 1, 1))
        fleet = Fleet(env, now, rng)
        todo = iter(range(count))

        def record(phase: str, idx: int, start: float, latency: float, ok: bool = True, level=level,
                   block=block):  # fmt: skip
            out.append(asdict(ProbeRecord(
                run_id=f"synthetic-{level}", backend="synthetic", backend_version="", engine_version="",
                host="model", image="", phase=phase, start=start, latency=latency, concurrency=level,
                mode="sequential", ok=ok, error=None if ok else "Failed", sandbox=idx,
                reference=block is not None, block=block,
            )))  # fmt: skip

        def lifecycle(k: int, rng=rng, fleet=fleet, env=env, todo=todo, sub=now):
            # starts a nanosecond apart: the records' count of operations in flight at a start
            # is then the count the model used (simultaneous starts would all count each other)
            yield env.timeout(k * 1e-9)
            for idx in todo:
                t0 = env.now
                host, _, latency, fails = yield from fleet.create(
                    float(sub.cold_start.sample(rng, 1)[0]), rng.random()
                )
                record("create", idx, t0, latency, not fails)
                if fails:
                    continue
                for _ in range(commands):
                    t0 = env.now
                    latency = yield from fleet.op(host, float(sub.exec_overhead.sample(rng, 1)[0]), "exec")
                    record("exec", idx, t0, latency)
                t0 = env.now
                latency = yield from fleet.teardown(
                    host, float(sub.teardown.sample(rng, 1)[0]), u=rng.random()
                )
                record("teardown", idx, t0, latency)

        procs = [env.process(lifecycle(k)) for k in range(level)]
        env.run(until=env.all_of(procs))
    return out
