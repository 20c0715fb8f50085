"""One simulated cell (substrate x concurrency x replication) as SimPy processes.

Rollout workers are plain generators pulling trajectories; a trajectory acquires a sandbox
(warm pool, or quota -> create-rate token -> cold start), runs its body, and tears down.
The body is either every LLM call and tool call as events (``step`` fidelity, the reference) or
a few timeouts whose lengths sum its pre-drawn steps (``trajectory`` fidelity): segments of steps
that re-read the load on the inference tier and on the host at each boundary, where the load is
the sum of the running bodies' own expected shares (docs/model.md, "Two fidelities").

The cell wires its parts, each in its own module: the chunks of trajectories and their records
(:mod:`.chunks`), the sandbox lifecycle (:mod:`.sandbox`), the body engines (:mod:`.body_steps`,
:mod:`.body_trajectory`, :mod:`.segments`), the bodies' load (:mod:`.load`) and the steady state
(:mod:`.steady`); the fleet (:mod:`.fleet`) and the inference tier (:mod:`.inference`,
:mod:`.serving`) are its resources.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np
import simpy

from ..rng import stream
from ..scenario import Scenario, Substrate
from .body_steps import StepBody
from .body_trajectory import TrajectoryBody
from .chunks import ChunkRows
from .engines import engine_named
from .fleet import Fleet
from .inference import InferenceTier
from .load import BodyLoad
from .metrics import Accumulator, MetricsStore
from .records import Records
from .sandbox import SandboxLifecycle
from .segments import Segments
from .serving import ServingTier
from .serving_pilot import Pilot
from .steady import Steady
from .workload_draws import CHUNK, Work


@contextmanager
def few_collections(gen0: int = 100_000):
    """Run with the cyclic garbage collector looking every ``gen0`` allocations instead of 700: a
    SimPy run allocates events by the million and frees nearly all of them by reference counting,
    and the default threshold spent about 14% of a serving pilot looking (the same numbers; the
    previous thresholds restored after)."""
    old = gc.get_threshold()
    gc.set_threshold(gen0, old[1], old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)


class Cell(ChunkRows, SandboxLifecycle, StepBody, TrajectoryBody, Segments, BodyLoad):
    """One cell. Trajectories are loaded a chunk at a time and each finished chunk is folded into
    :attr:`acc` (and handed to ``sink``, or kept when ``keep``), so memory does not grow with N."""

    def __init__(
        self,
        scn: Scenario,
        sub: Substrate,
        concurrency: int,
        rep: int,
        work: Work,
        fidelity: str,
        progress: Callable[[int], None] | None = None,
        sink: Callable[[Records, int], None] | None = None,
        keep: bool = False,
        pilot: Pilot | None = None,
    ):
        self.scn, self.sub, self.work = scn, sub, work
        self.pilot = pilot  # serving engines at trajectory fidelity: load curve, busy share, luck
        self.concurrency, self.rep = concurrency, rep
        self.step = engine_named(fidelity).per_step
        self.env = simpy.Environment()
        self.rng = stream(scn.seed, rep, "substrate", sub.name, "run", concurrency)
        inf, c, f = scn.cluster.inference, sub.contention, sub.failures
        curves = any(isinstance(getattr(f, ph), dict) for ph in ("create", "exec", "teardown"))
        self.loaded = bool((inf and inf.slowdown) or c.create or c.exec or c.teardown or curves or pilot)
        self.fleet = self._fleet(not self.step and not self.loaded)
        self._init_sandboxes()
        tokens = scn.workload.tokens is not None and self.step
        self._kv = inf.engine.kv_capacity_tokens if tokens else 0
        self._overhead = inf.engine.overhead if tokens else 0.0
        self.tier = ServingTier(self.env, inf) if tokens else InferenceTier(self.env, inf)
        self.metrics = MetricsStore(scn, sub)  # its records' and its parts' metrics
        self.metrics.attach(self.fleet.report, self.fleet.totals)
        if pilot is not None:
            self.metrics.attach(pilot.report)
        elif tokens:  # serving engines at step fidelity
            self.metrics.attach(self.tier.report)
        self._init_load()
        self.sink, self.keep, self.kept = sink, keep, []
        self.progress = progress
        self._done = self._told = 0  # trajectories done, and reported to ``progress``
        self._init_chunks()
        self._init_segments()
        # hooks of the training loop (simrollout.sim.training, .loop_body): trajectories to
        # stop at their next step, a per-trajectory duration factor (the prompt's task), a gate
        # that holds new generation while the engines train, and a call per generated step
        self.loop = None  # the training loop, when the scenario has one
        self.trace: list | None = None  # Chrome-trace spans, when a timeline is asked for
        self.cancelled: set[int] = set()
        self.task_scale: np.ndarray | None = None
        self.llm_gate: Callable[[], simpy.Event | None] | None = None
        self.on_generate: Callable[[int], None] | None = None
        # at_sync: interrupt: an event that fires at a weight sync, and a call per resume
        self.llm_abort: Callable[[], simpy.Event] | None = None
        self.on_resume: Callable[[int], None] | None = None
        self.steady: Steady | None = None  # the steady state as one wait per trajectory
        self.cosim = None  # a pilot's bodies and engines run compiled (.pilot_compiled)

    @property
    def exact_tier(self) -> bool:
        """Its inference tier runs every request (step fidelity; a training loop's serving
        engines compiled beside the compiled loop), so the tier's own figures are exact."""
        return self.step or self.cosim is not None

    @property
    def acc(self) -> Accumulator:
        """The totals and sketches of its finished trajectories (``metrics.acc``)."""
        return self.metrics.acc

    def _fleet(self, defer: bool) -> Fleet:
        """The substrate's hosts (with the scenario's task images, when it has them)."""
        scn, sub, rep, concurrency = self.scn, self.sub, self.rep, self.concurrency
        img = scn.workload.images
        sizes = img.size_gb.sample(stream(scn.seed, "images"), img.count) if img is not None else None
        return Fleet(
            self.env, sub, self.rng, most=concurrency + scn.policy.warm_pool, defer=defer,
            refill_rng=lambda k: stream(scn.seed, rep, "pool", sub.name, concurrency, k),
            scn_images=sizes, clients=scn.cluster.clients,
        )  # fmt: skip

    # ------------------------------------------------------------ drivers
    def run(self) -> Records | None:
        """Simulate; returns the per-trajectory records when ``keep``, else None (see ``acc``)."""
        pol, n = self.scn.policy, self.work.n
        if pol.warm_pool and not self._images:
            self.fleet.start_pool(pol.warm_pool)
        if self.scn.training is not None:
            from .training import TrainingLoop

            self.loop = TrainingLoop(self, self.trace)
            self.metrics.attach(self.loop.report)
            main = self.env.process(self.loop.run())
        elif pol.mode == "sync":
            main = self.env.process(self._sync(pol.batch_size))
        else:
            if self.trace is None and Steady.applies(self):
                self.steady = Steady(self)
                self.metrics.attach(self.steady.report)
            main = self.env.process(self._workers(iter(range(n)), self.concurrency))
        with few_collections():
            if self.cosim is not None:
                self.cosim.run(main)
            else:
                self.env.run(until=main)
        self._catch_up(math.inf)
        self.fleet.close_pool(self.env.now)
        self.fleet.close_parked(self.env.now)
        self._close_prefetched()
        self.close()
        if not self.keep:
            return None
        return Records(**{f: np.concatenate([getattr(r, f) for r in self.kept]) for f in Records.fields()})

    def _workers(self, todo, count: int):
        yield self.env.all_of([self.env.process(self._worker(todo)) for _ in range(count)])

    def _sync(self, batch: int):
        n, timed = self.work.n, self.scn.arrivals.kind == "poisson"
        for lo in range(0, n, batch):
            hi = min(lo + batch, n)
            ready = self.arrival(hi - 1)  # a batch starts once all its members have arrived
            if ready > self.env.now:
                yield self.env.timeout(ready - self.env.now)
            if not timed:  # all were ready at t=0; a batch member waits from its batch's start
                for c in range(lo // CHUNK, (hi - 1) // CHUNK + 1):
                    st = self.chunk(c)
                    st.arrival[max(lo - st.lo, 0) : hi - st.lo] = self.env.now
            yield from self._workers(iter(range(lo, hi)), min(self.concurrency, hi - lo))

    def _worker(self, todo):
        env, timed = self.env, self.scn.arrivals.kind == "poisson"
        steady = self.steady
        for i in todo:
            if timed and self.arrival(i) > env.now:
                yield env.timeout(self.arrival(i) - env.now)
            if steady is not None and steady.takes(i):  # one wait, unless it must run in full
                wait = steady.start(i)
                if wait is not None:
                    yield env.timeout(wait)
                    steady.end(i)
                    i = None
            if i is not None:
                yield from self.trajectory(i)
            self._done += 1
            if self.progress is not None and self._done - self._told >= 4096:
                self.progress(self._done - self._told)
                self._told = self._done
        self._drain()
