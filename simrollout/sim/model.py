"""One simulated cell (substrate x concurrency x replication) as SimPy processes.

Rollout workers are plain generators pulling trajectories; a trajectory acquires a sandbox
(warm pool, or quota -> create-rate token -> cold start), runs its body, and tears down.
The body is either every LLM call and tool call as events (``step`` fidelity, the reference) or
a few timeouts whose lengths sum its pre-drawn steps (``trajectory`` fidelity): segments of steps
that re-read the load on the inference tier and on the host at each boundary, where the load is
the sum of the running bodies' own expected shares (docs/model.md, "Two fidelities").
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable

import numpy as np
import simpy

from ..metrics import Accumulator
from ..rng import stream
from ..scenario import Scenario, Substrate
from ..workload import (
    CHUNK,
    ChunkDetail,
    SubstrateDraws,
    Work,
    arrival_gaps,
    chunk_detail,
    draw_substrate,
    first_failure,
)
from .fleet import Fleet
from .inference import InferenceTier, expected_busy_engines
from .records import CANCELLED, FAILED, OK, STATUS, TIMEOUT, Records
from .records import INPUTS as _IN
from .serving import ServingTier
from .serving_pilot import Pilot, phases
from .steady import Steady

_AT_RISK = 1.25  # a body whose estimated end times this passes its deadline runs exact steps
_JSQ = 0.5  # a request joins the least-loaded engine: about half a request below the mean
_STILL = 0.01  # multipliers that moved less than this (relative) since the last segment: double it
LOST = 3  # the sandbox was lost mid-trajectory (exec failure): retried when retries remain
_OUT = (
    "start",
    "end",
    "cold",
    "acquire_wait",
    "worker",
    "sandbox",
    "llm",
    "attempts",
    "status",
    "warm",
    "steps_done",
    "overhead",
    "teardown",
    "lost",
)


class _Chunk:
    """Inputs and outputs of one chunk of trajectories while any of them is in flight."""

    def __init__(self, lo: int, inputs: np.ndarray, draws: SubstrateDraws, arrival: np.ndarray):
        self.lo, self.inputs, self.draws, self.arrival = lo, inputs, draws, arrival
        self.out = np.zeros((len(inputs), len(_OUT)))
        self.gen = np.zeros((len(inputs), 3))  # body start, end, generating share (GPU estimate)
        self.left = len(inputs)
        self.ran = np.zeros(len(inputs), dtype=bool)  # rows written (the training loop starts a subset)
        self.detail: ChunkDetail | None = None  # per-step detail, drawn when a body needs it
        self.scale: np.ndarray | None = None  # per trajectory: its luck (serving pilot)
        # the steady state's one-wait trajectories (simrollout.sim.steady): their plan, which
        # rows they wrote, when each could start its create, and how their rows are filled
        self.plan: dict | None = None
        self.one_wait: np.ndarray | None = None
        self.t0: np.ndarray | None = None
        self.times: np.ndarray | None = None
        self.fill: Callable[[], None] | None = None


class Cell:
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
        self.step = fidelity == "step"
        self.env = simpy.Environment()
        self.rng = stream(scn.seed, rep, "substrate", sub.name, "run", concurrency)
        inf, c, f = scn.cluster.inference, sub.contention, sub.failures
        curves = any(isinstance(getattr(f, ph), dict) for ph in ("create", "exec", "teardown"))
        self._loaded = bool((inf and inf.slowdown) or c.create or c.exec or c.teardown or curves or pilot)
        defer = not self.step and not self._loaded
        img = scn.workload.images
        sizes = img.size_gb.sample(stream(scn.seed, "images"), img.count) if img is not None else None
        self.fleet = Fleet(
            self.env, sub, self.rng, most=concurrency + scn.policy.warm_pool, defer=defer,
            refill_rng=lambda k: stream(scn.seed, rep, "pool", sub.name, concurrency, k),
            scn_images=sizes, clients=scn.cluster.clients,
        )  # fmt: skip
        # task images and reuse: trajectory i runs task i // G, image task % count
        self._G = scn.samples_per_task()
        self._images = img.count if img is not None else 0
        self._reuse = scn.policy.reuse
        self._started = 0  # trajectories are started in index order: the next one to start
        # with task images the warm pool prefetches: when trajectory i starts, the sandbox of
        # trajectory i + warm_pool is created with its image, and that trajectory takes it
        self._ahead = scn.policy.warm_pool if self._images else 0
        self._prefetched: dict[int, simpy.Process] = {}
        tokens = scn.workload.tokens is not None and self.step
        self._kv = inf.engine.kv_capacity_tokens if tokens else 0
        self._overhead = inf.engine.overhead if tokens else 0.0
        self.tier = ServingTier(self.env, inf) if tokens else InferenceTier(self.env, inf)
        self.acc = Accumulator()
        # serving engines at trajectory fidelity (a pilot): a body's generation is its unloaded
        # time x its luck x the pilot's load curve at the bodies running (re-read per segment)
        self.bodies = 0  # trajectories running their body
        self._x: dict[int, float] = {}  # luck of each running body
        # the pilot's load ratio and engines busy at each count of bodies
        curve = [pilot.at(b / inf.engines) for b in range(concurrency + 2)] if pilot else []
        self._curve = [x for x, _ in curve]  # the load ratio at each count of bodies
        self._busy_at = [inf.engines * f for _, f in curve]  # engines busy at each count
        # when bodies start and end (every one, full or one-wait): engine busy time is integrated
        # over them once, at the end (gpu_busy_seconds)
        self._on, self._off = array("d"), array("d")
        self._lean_on: list[float] = []  # heaps: one-wait bodies' starts and ends not yet counted
        self._lean_off: list[float] = []
        self.turn_log: list | None = None  # a pilot's turns: (trajectory, bodies, seconds, unloaded)
        self.sink, self.keep, self.kept = sink, keep, []
        self.progress = progress
        self._done = self._told = 0  # trajectories done, and reported to ``progress``
        self._chunks: dict[int, _Chunk] = {}
        self._last_arrival = 0.0  # of the latest chunk whose arrivals were drawn
        # trajectory fidelity: the load as the sum of every running body's expected share of
        # its current segment in generation (the tier) and in exec overhead (per host)
        self._gen_load = 0.0
        # a loaded tier without a pilot: one-wait bodies' starts and ends to come, with their share
        # in generation (a pilot's are in _lean_on / _lean_off)
        self._pending: list[tuple[float, int, float]] = []
        self._heads = bool(inf and inf.slowdown)  # a segment's first generation waited on its own
        self._slowdown = inf.slowdown if self._heads else 0.0
        self._engines = inf.engines if inf else 1
        self._f_exec = self.fleet.factor["exec"]
        # segment control: the load is steady in an async batch run once every worker has
        # started a body and until the queue runs dry
        self._steady_run = scn.policy.mode == "async" and scn.arrivals.kind == "batch"
        self._ramp = min(concurrency, work.n)
        self._ramped = self._draining = False
        self._long: dict[int, simpy.Process] = {}  # bodies in one long wait, cut short by the drain
        # hooks of the training loop (simrollout.sim.training; step fidelity): trajectories to
        # stop at their next step, a per-trajectory duration factor (the prompt's task), a gate
        # that holds new generation while the engines train, and a call per generated step
        self.loop = None  # the training loop, when the scenario has one
        self.trace: list | None = None  # Chrome-trace spans, when a timeline is asked for
        self.cancelled: set[int] = set()
        self.task_scale: np.ndarray | None = None
        self.llm_gate: Callable[[], simpy.Event | None] | None = None
        self.on_generate: Callable[[int], None] | None = None
        self.steady: Steady | None = None  # the steady state as one wait per trajectory

    def _chunk(self, c: int) -> _Chunk:
        """The chunk's state, drawn when its first trajectory is needed."""
        st = self._chunks.get(c)
        if st is None:
            w, lo = self.work, c * CHUNK
            d = draw_substrate(self.scn, self.sub, self.rep, w, c, detail=self.step)
            sl = slice(lo, lo + len(d.cold))
            cols = {"cold": d.cold, "warm": d.warm, "teardown": d.teardown, "u_create": d.u_create,
                    "u_exec": d.u_exec, "u_teardown": d.u_teardown, "calls": w.calls[sl], "llm": w.llm[sl],
                    "overhead": d.overhead, "tool": w.tool[sl], "setup": w.setup[sl],
                    "reward": w.reward[sl], "steps": w.steps[sl]}  # fmt: skip
            inputs = np.column_stack([cols[k] for k in _IN])
            arrival = np.zeros(len(inputs))
            if self.scn.arrivals.kind == "poisson":
                gaps = arrival_gaps(self.scn, self.rep, c, len(inputs))
                arrival = self._last_arrival + np.cumsum(gaps)
                self._last_arrival = float(arrival[-1])
            st = self._chunks[c] = _Chunk(lo, inputs, d, arrival)
            if self.pilot is not None:
                n = len(inputs)
                phase = phases(w.n, self.concurrency, self.scn, lo, lo + n)
                rng = stream(self.scn.seed, self.rep, "serving", self.sub.name, self.concurrency, c)
                st.scale = self.pilot.draw(rng, w.llm[sl], phase)
        return st

    def arrival(self, i: int) -> float:
        return float(self._chunk(i // CHUNK).arrival[i % CHUNK])

    def _finish(self, c: int) -> None:
        st = self._chunks.pop(c)
        if st.fill is not None:
            st.fill()
        ran = slice(None) if st.ran.all() else st.ran
        cols = dict(zip(_OUT, st.out[ran].T))
        ints = {"attempts": np.int8, "status": np.int8, "warm": bool, "steps_done": np.int32}
        cols = {k: v.astype(ints.get(k, np.float64)) for k, v in cols.items()}
        rec = Records(arrival=st.arrival[ran], **cols)
        self.acc.add(rec, None if self.step else st.gen)
        if self.sink is not None:
            self.sink(rec, st.lo)
        if self.keep:
            self.kept.append(rec)

    # ------------------------------------------------------------ drivers
    def run(self) -> Records | None:
        """Simulate; returns the per-trajectory records when ``keep``, else None (see ``acc``)."""
        pol, n = self.scn.policy, self.work.n
        if pol.warm_pool and not self._images:
            self.fleet.start_pool(pol.warm_pool)
        if self.scn.training is not None:
            from .training import TrainingLoop

            self.loop = TrainingLoop(self, self.trace)
            main = self.env.process(self.loop.run())
        elif pol.mode == "sync":
            main = self.env.process(self._sync(pol.batch_size))
        else:
            if self.trace is None and Steady.applies(self):
                self.steady = Steady(self)
            main = self.env.process(self._workers(iter(range(n)), self.concurrency))
        self.env.run(until=main)
        self._catch_up(math.inf)
        self.fleet.close_pool(self.env.now)
        self.fleet.close_parked(self.env.now)
        for proc in self._prefetched.values():  # created ahead for trajectories that never started
            if proc.triggered and proc.value is not None:
                self.fleet.pool_sandbox_seconds += self.env.now - proc.value[1]
        self.close()
        if not self.keep:
            return None
        return Records(**{f: np.concatenate([getattr(r, f) for r in self.kept]) for f in Records.fields()})

    def close(self) -> None:
        """Fold in the chunks whose every trajectory was not started (the training loop stops
        before its budget): their rows that ran."""
        for c in sorted(self._chunks):
            if self._chunks[c].ran.any():
                self._finish(c)
        self._chunks.clear()

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
                    st = self._chunk(c)
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

    def _drain(self) -> None:
        """The queue ran dry: the load falls from here on, so long waits go back to segments."""
        if self._draining:
            return
        self._draining = True
        for proc in list(self._long.values()):
            proc.interrupt("drain")

    # ------------------------------------------------------------ one trajectory
    def trajectory(self, i: int):
        env, sub, fleet = self.env, self.sub, self.fleet
        min_bill = sub.billing.minimum_seconds
        st = self._chunk(i // CHUNK)
        cold0, warm0, td0, u_create0, u_exec0, u_td0, calls, *_ = st.inputs[i - st.lo].tolist()  # _IN
        start = env.now
        deadline = start + (self.scn.policy.timeout or math.inf)
        attempt, waited_all, worker, sandbox, llm_all, steps, warm_hit = 0, 0.0, 0.0, 0.0, 0.0, 0, False
        over = td = lost = 0.0  # the phases of ``worker`` (Records)
        task, image = i // self._G, self._image(i)
        self._started = max(self._started, i + 1)
        if self._ahead and i + self._ahead < self.work.n and i + self._ahead not in self._prefetched:
            j = i + self._ahead
            self._prefetched[j] = env.process(self._prefetch(j))
        while True:
            attempt += 1
            first = attempt == 1
            # a retry draws from its own stream: the same numbers in both fidelities
            rng = None if first else stream(self.scn.seed, self.rep, "retry", sub.name, i, attempt)
            warm, ahead = fleet.claim_warm(), 0.0
            if first and i in self._prefetched:  # its own sandbox, created ahead (waited if not ready)
                t_ask = env.now
                got = yield self._prefetched.pop(i)
                if got is not None:
                    host, created, ready = got
                    fleet.pool_idle_seconds += env.now - ready
                    warm, ahead = (host, env.now - created), env.now - t_ask
                else:  # the prefetch failed: it waited for a sandbox it did not get
                    waited_all += env.now - t_ask
            reused = fleet.claim_parked(task) if self._reuse else None
            if reused is not None:  # the sandbox of an earlier sample of this task, reset
                host, billed = reused, 0.0
                base = float(
                    sub.reset.sample(stream(self.scn.seed, self.rep, "reset", sub.name, i, attempt), 1)[0]
                )
                # a deferred reset is waited with the body, like a deferred create
                latency = base if fleet.defer else (yield from fleet.op(fleet.dom(host, i), base, "exec"))
                billed += latency
                warm_hit = True
            elif warm is not None:
                host, billed = warm
                start_warm = warm0 if first else float(sub.warm_start.sample(rng, 1)[0])
                if not fleet.defer:  # a deferred warm start is waited with the body
                    yield env.timeout(start_warm)
                latency = ahead + start_warm  # with a prefetch still being created, its rest too
                billed += latency
                warm_hit = True
            else:
                base = cold0 if first else float(sub.cold_start.sample(rng, 1)[0])
                u = u_create0 if first else rng.random()
                host, waited, latency, fails = yield from fleet.create(base, u, image, i)
                waited_all += waited
                warm_hit = False
                billed = latency
                if fails:
                    worker += latency
                    lost += latency
                    sandbox += max(latency, min_bill)
                    if (yield from self._again(attempt)):
                        continue
                    status = FAILED
                    break
            worker += latency
            lag = latency - ahead if fleet.defer else 0.0  # a deferred create is waited with the body
            if i in self.cancelled:  # cancelled by the training loop while it waited for a sandbox
                status, llm, busy, over = CANCELLED, 0.0, 0.0, 0.0
            else:
                dom = fleet.dom(host, i)  # where its operations contend (contention.scope)
                p_exec = fleet.fail["exec"](fleet.load(dom) + 1.0)
                fail_call = first_failure(u_exec0 if first else rng.random(), p_exec, int(calls))
                body = self._body_steps if self.step else self._body_fast
                self._count_bodies(+1)
                if self.pilot is not None:
                    self._x[i] = float(st.scale[i - st.lo])
                status, llm, steps, busy, over = yield from body(i, dom, deadline, fail_call, env.now + lag)
                self._x.pop(i, None)
                self._count_bodies(-1)
            if fleet.defer:
                lag += busy
            if self._reuse and status != LOST:
                if lag:  # decide at the body's end, not when a deferred body was drawn
                    yield env.timeout(lag)
                    lag = 0.0
                if self._started < min((task + 1) * self._G, self.work.n):
                    # a later sample of this task has not started: it takes this sandbox
                    fleet.park(task, host)
                    llm_all += llm
                    worker += busy - llm
                    sandbox += billed + busy
                    td = 0.0
                    break
            td_base = td0 if first else float(sub.teardown.sample(rng, 1)[0])
            td = yield from fleet.teardown(host, td_base, lag, u_td0 if first else rng.random(), i)
            llm_all += llm
            worker += busy - llm + td
            sandbox += max(billed + busy + td, min_bill)
            if status == LOST:
                lost += latency + busy - llm + td
                if (yield from self._again(attempt)):
                    continue
                status = FAILED
            break
        row = (
            start,
            env.now,
            latency,
            waited_all,
            worker,
            sandbox,
            llm_all,
            attempt,
            status,
            warm_hit,
            steps,
            0.0 if status == FAILED else over,
            0.0 if status == FAILED else td,
            lost,
        )  # noqa: E501
        if self.steady is not None:
            if status == OK and attempt == 1 and not warm_hit:
                self.steady.done(i, latency / cold0 if cold0 > 0 else 1.0, td / td0 if td0 > 0 else 1.0)
            else:
                self.steady.forget(i)
        self._record(i, st, row)
        return row

    def _record(self, i: int, st: _Chunk, row: tuple | None) -> None:
        """Trajectory ``i`` ended: its row (None: a one-wait trajectory's, filled with its chunk)."""
        if row is not None:
            st.out[i - st.lo] = row
            if self.trace is not None:
                self._trace(i, row)
        st.ran[i - st.lo] = True
        st.left -= 1
        if st.left == 0:
            self._finish(i // CHUNK)

    def _count_bodies(self, change: int) -> None:
        """A body starts (+1) or ends (-1) now."""
        self.bodies += change
        if self._curve:
            (self._on if change > 0 else self._off).append(self.env.now)

    def _later(self, start: float, end: float, c_g: float) -> None:
        """A one-wait trajectory's body runs from ``start`` to ``end`` generating ``c_g`` of the
        time: counted when the bodies or the tier's load are next read (no events)."""
        if self._curve:
            heapq.heappush(self._lean_on, start)
            heapq.heappush(self._lean_off, end)
            self._on.append(start)
            self._off.append(end)
        elif self._heads:
            heapq.heappush(self._pending, (start, 1, c_g))
            heapq.heappush(self._pending, (end, -1, -c_g))

    def _catch_up(self, now: float) -> None:
        """Apply the one-wait bodies' starts and ends up to ``now``."""
        on, off = self._lean_on, self._lean_off
        while on and on[0] <= now:
            heapq.heappop(on)
            self.bodies += 1
        while off and off[0] <= now:
            heapq.heappop(off)
            self.bodies -= 1
        pending = self._pending
        while pending and pending[0][0] <= now:
            _, change, c_g = heapq.heappop(pending)
            self.bodies += change
            self._gen_load += c_g

    def _image(self, i: int) -> int:
        """Trajectory ``i``'s task image (its task ``i // G`` modulo the images), -1 without images."""
        return (i // self._G) % self._images if self._images else -1

    def _prefetch(self, j: int):
        """Create trajectory ``j``'s sandbox with its image ahead of its start: ``(host, created,
        ready)``, or None when the create failed (the trajectory then creates its own)."""
        fleet, sub = self.fleet, self.sub
        rng = stream(self.scn.seed, self.rep, "prefetch", sub.name, j)
        t0 = self.env.now
        base = float(sub.cold_start.sample(rng, 1)[0])
        host, _, latency, fails = yield from fleet.create(base, rng.random(), self._image(j), j)
        if fails:
            return None
        if fleet.defer:  # a deferred create returns before its latency has passed
            yield self.env.timeout(latency)
        return host, t0, self.env.now

    def _trace(self, i: int, row) -> None:
        """Spans of a timeline (simrollout.timeline): the trajectory, and its sandbox's create."""
        start, end, cold, waited, status, steps = row[0], row[1], row[2], row[3], int(row[8]), int(row[10])
        args = {"status": STATUS.get(status, "lost"), "steps": steps, "attempts": int(row[7])}
        if cold > 0 and row[7] == 1:
            self.trace.append(("trajectories", i, "sandbox create", start + waited, cold, {}))
        self.trace.append(("trajectories", i, f"trajectory {i}", start, end - start, args))

    def _again(self, attempt: int):
        """After a failed attempt: wait the backoff and say True, or False when retries are spent."""
        pol = self.scn.policy
        if attempt > pol.retries:
            return False
        if pol.retry_backoff:
            yield self.env.timeout(pol.retry_backoff * 2 ** (attempt - 1))
        return True

    # ------------------------------------------------------------ bodies
    def _multipliers(self, host: int) -> tuple[float, float]:
        """Generation and exec-overhead multipliers for a body on ``host`` at the current load of
        the other bodies (a request joins the least-loaded engine, about half a request below
        the mean; an exec counts itself, as in the step engine)."""
        x_l = 1.0
        if self._pending or self._lean_on or self._lean_off:
            self._catch_up(self.env.now)
        if self._curve:  # serving engines: the pilot's load curve at the bodies running
            x_l = self._curve[min(self.bodies, len(self._curve) - 1)]
        elif self._heads:  # a loaded tier
            x_l = 1.0 + self._slowdown * max(self._gen_load / self._engines - _JSQ, 0.0)
        fleet = self.fleet
        return x_l, self._f_exec(1.0 + fleet.load(host, "exec"))

    def _settled(self) -> bool:
        """The load is steady: an async batch run whose every worker is busy and whose queue is
        not yet empty. Then a body waits its remainder at once instead of in segments."""
        return self._steady_run and self._ramped and not self._draining

    def _detail(self, c: int) -> ChunkDetail:
        st = self._chunks[c]
        if st.detail is None:
            st.detail = chunk_detail(self.scn, self.sub, self.rep, self.work, c)
        return st.detail

    # per-step detail of a body, its generation scaled by the body's own multiplier (serving pilot)
    def _cut(self, i, s0, s1, x_l, x_e, left, skip=False) -> tuple[int, float, float]:
        d, j = self._span(i)
        return d.cut(j, s0, s1, x_l * self._x.get(i, 1.0), x_e, left, skip)

    def _sums(self, i: int, s0: int, s1: int) -> tuple[float, float, float]:
        d, j = self._span(i)
        g, o, t = d.sums(j, s0, s1)
        return g * self._x.get(i, 1.0), o, t

    def _lost_at(self, i: int, fail_call: int) -> tuple[int, tuple[float, float, float]]:
        d, j = self._span(i)
        s, (g, o, t) = d.lost_at(j, fail_call)
        return s, (g * self._x.get(i, 1.0), o, t)

    def _span(self, i: int) -> tuple[ChunkDetail, int]:
        """Trajectory ``i``'s per-step detail and its index within it: kept when the workload
        was drawn if the body is long, else the chunk drawn again."""
        st = self._chunks[i // CHUNK]
        if i in st.draws.kept and st.detail is None:
            return ChunkDetail.one(*self.work.kept[i], st.draws.kept[i]), 0
        return self._detail(i // CHUNK), i - st.lo

    def _body_fast(self, i: int, host: int, deadline: float, fail_call: int, t0: float):
        """The body as few timeouts: one when nothing contends (none when the fleet defers: the
        caller waits it), else segments of steps whose multipliers are re-read from the load at
        each boundary, one step at first and doubling while the load holds still. A body that
        loses its sandbox runs exactly up to the failing call (per-step detail)."""
        env, st = self.env, self._chunks[i // CHUNK]
        j = i - st.lo
        *_, llm, over, tool, setup, reward, steps = st.inputs[j].tolist()  # _IN
        llm *= self._x.get(i, 1.0)
        status, units, tail = OK, steps, None
        if fail_call:
            status = LOST
            units, tail = self._lost_at(i, fail_call)
        per = (llm / steps, over / steps, tool / steps) if steps else (0.0, 0.0, 0.0)
        if not self._loaded:
            if tail is None:
                g, o, part, done = llm, over, llm + over + tool, int(steps)
            else:
                g, o, t = (a + b for a, b in zip(self._sums(i, 0, units), tail))
                part, done = g + o + t, units
            dur = setup + part + (reward if status == OK else 0.0)
            if t0 + dur > deadline:
                dur, status = max(deadline - t0, 0.0), TIMEOUT
                cut = self._cut(i, 0, int(steps), 1.0, 1.0, dur - setup) if dur > setup else (0, 0.0, 0.0)
                done, g, o = cut
                part = dur - setup
            st.gen[j] = (t0, t0 + dur, g / part if part > 0 else 0.0)
            if not self.fleet.defer:
                yield env.timeout(dur)
            return status, g, done, dur, o

        fleet = self.fleet
        start = (0.0, 0.0, 0.0, 0.0)  # steps done, generation, body time, exec overhead
        steady = (
            self._steady(host, deadline, units, per, setup, reward)
            if tail is None and self._settled()
            else None
        )
        if steady is not None:  # one wait; the start of the drain cuts it short
            d, x_l, x_e, rate, c_g, c_e = steady
            if self.steady is not None:
                self.steady.body(i, x_l, x_e, host)
            self._gen_load += c_g
            fleet.add_exec_load(host, c_e)
            self._long[i] = env.active_process
            try:
                yield env.timeout(d)
                st.gen[j] = (t0, env.now, per[0] * x_l / rate if rate > 0 else 0.0)
                return OK, per[0] * x_l * units, int(units), d, per[1] * x_e * units
            except simpy.Interrupt:
                spent = env.now - t0
            finally:
                self._long.pop(i, None)
                self._gen_load -= c_g
                fleet.add_exec_load(host, -c_e)
            done = min(max(spent - setup, 0.0) / rate, units) if rate > 0 else units
            start = (done, per[0] * x_l * done, spent, per[1] * x_e * done)
            setup, reward = max(setup - spent, 0.0), min(reward, d - spent)
        out = yield from self._segments(i, host, deadline, status, units, per, setup, reward, tail, start)
        status, g, done, work_time, o = out
        st.gen[j] = (t0, env.now, g / work_time if work_time > 0 else 0.0)
        return status, g, done, env.now - t0, o

    def _steady(self, host, deadline, units, per, setup, reward):
        """The whole body as one wait at the steady load: ``(duration, x_l, x_e, seconds per step,
        generating share, exec share)``, or None for a body that may reach its deadline (the
        segments cut it exactly)."""
        x_l, x_e = self._multipliers(host)
        rate = per[0] * x_l + per[1] * x_e + per[2]
        d = setup + units * rate + reward
        if self.env.now + (d - reward) * _AT_RISK > deadline or d <= 0:
            return None
        return d, x_l, x_e, rate, per[0] * x_l * units / d, per[1] * x_e * units / d

    def _segments(
        self, i, host, deadline, status, units, per, setup, reward, tail=None, start=(0.0, 0.0, 0.0, 0.0)
    ):
        """The body's steps in segments: ``(status, generation, steps done, time in steps, exec
        overhead)``."""
        env, fleet = self.env, self.fleet
        done, g_all, work_time, o_all = start
        if setup and not (yield from self._until(setup, deadline)):
            return TIMEOUT, 0.0, 0, 0.0, o_all
        if not self._ramped:
            self._ramp -= 1
            self._ramped = self._ramp <= 0
        # a body that may reach its deadline runs its own steps' latencies (per-step detail),
        # so the cut falls where it would in the step engine
        x_l, x_e = self._multipliers(host)
        rate = per[0] * x_l + per[1] * x_e + per[2]
        exact = tail is not None or env.now + (units - done) * rate * _AT_RISK > deadline
        seg, prev = 1.0, None
        while done < units - 1e-9:
            x_l, x_e = self._multipliers(host)
            if prev is not None:
                moved = max(abs(x_l / prev[0] - 1.0), abs(x_e / prev[1] - 1.0))
                seg = seg * 2 if moved <= _STILL else max(1.0, seg / 2)
            prev = (x_l, x_e)
            long = self._settled() and not exact
            du = units - done if long else min(seg, units - done)
            if exact and done + du < units:  # whole steps
                du = max(1.0, float(int(du)))
            if exact and done == int(done) and int(done + du) > int(done):
                k1 = min(int(done + du), int(units))
                g0, o0, t0 = self._sums(i, int(done), k1)
                rem = (done + du) - k1  # a lost sandbox's partial last step, proportional
                g0, o0, t0 = g0 + per[0] * rem, o0 + per[1] * rem, t0 + per[2] * rem
            else:
                g0, o0, t0 = per[0] * du, per[1] * du, per[2] * du
            headed = False
            if self._heads and not long and done == int(done) and du >= 1.0:
                # the segment opens with a generation: wait it on its own, counted as generating,
                # so bodies in step with each other (a sync batch, a burst) load the tier together
                head = self._sums(i, int(done), int(done) + 1)[0] if exact else per[0]
                t_gen = env.now
                self._gen_load += 1.0
                ok = yield from self._until(head * x_l, deadline)
                self._gen_load -= 1.0
                headed = True
                g_all += env.now - t_gen
                work_time += env.now - t_gen
                if not ok:
                    return TIMEOUT, g_all, int(done), work_time, o_all
                g0 = max(g0 - head, 0.0)
                x_l, x_e = self._multipliers(host)
            d = g0 * x_l + o0 * x_e + t0
            left = deadline - env.now
            if d > left:  # the deadline falls in this segment
                left = max(left, 0.0)
                if exact and done == int(done):
                    k, g, o = self._cut(i, int(done), min(int(done + du) + 1, int(units)), x_l, x_e, left,
                                         skip=headed)  # fmt: skip
                else:
                    k, g, o = int(du * left / d), g0 * x_l * left / d, o0 * x_e * left / d
                yield env.timeout(left)
                return TIMEOUT, g_all + g, int(done) + k, work_time + left, o_all + o
            t_seg = env.now
            c_g, c_e = (g0 * x_l / d, o0 * x_e / d) if d > 0 else (0.0, 0.0)
            self._gen_load += c_g
            fleet.add_exec_load(host, c_e)
            try:
                if long and du > seg:  # a long wait: the start of the drain cuts it short
                    self._long[i] = env.active_process
                    try:
                        yield env.timeout(d)
                    except simpy.Interrupt:
                        part = (env.now - t_seg) / d if d > 0 else 1.0
                        d, du, g0, o0 = env.now - t_seg, du * part, g0 * part, o0 * part
                        seg = 1.0
                    finally:
                        self._long.pop(i, None)
                else:
                    yield env.timeout(d)
            finally:
                self._gen_load -= c_g
                fleet.add_exec_load(host, -c_e)
            g_all += g0 * x_l
            o_all += o0 * x_e
            work_time += d
            done += du
        if tail is not None:  # the lost sandbox's last step, up to the failing call
            x_l, x_e = self._multipliers(host)
            t_tail = env.now
            ok = yield from self._until(tail[0] * x_l + tail[1] * x_e + tail[2], deadline)
            spent = env.now - t_tail
            g_all += min(tail[0] * x_l, spent)
            o_all += min(tail[1] * x_e, max(spent - tail[0] * x_l, 0.0))
            work_time += spent
            if not ok:
                return TIMEOUT, g_all, int(units), work_time, o_all
        if status == OK and reward and not (yield from self._until(reward, deadline)):
            return TIMEOUT, g_all, int(units), work_time, o_all
        return status, g_all, int(done + 1e-9), work_time, o_all

    def _until(self, dur: float, deadline: float):
        """Wait ``dur`` or until the deadline; True when the wait completed."""
        left = deadline - self.env.now
        if dur > left:
            yield self.env.timeout(max(left, 0.0))
            return False
        yield self.env.timeout(dur)
        return True

    def _await(self, event: simpy.Event, deadline: float):
        """Wait for ``event`` or until the deadline; True when it fired."""
        left = deadline - self.env.now
        if math.isinf(left):
            yield event
            return True
        yield event | self.env.timeout(max(left, 0.0))
        return event.triggered

    def _turn(self, ctx: int, w: Work, i: int, s: int, x: float) -> tuple[int, bool, int, int]:
        """Step ``s``'s request in tokens: ``(context, fresh, reusable, output)``. The context
        grows by the appended tokens; past ``max_context`` the harness compacts it to the prompt
        and this turn's append (nothing cached serves it: ``fresh``)."""
        append = int(w.step_append[s])
        out = max(int(round(int(w.step_output[s]) * x)), 1)
        # a context that would not fit one engine's KV cache is compacted too
        top = min(self.scn.workload.tokens.max_context or math.inf, self._kv - out)
        if ctx == 0:  # the first turn: the prompt
            return int(min(w.prompt[i] + append, top)), False, 0, out
        if ctx + append > top:
            return int(min(w.prompt[i] + append, top)), True, 0, out
        return ctx + append, False, ctx, out

    def _body_steps(self, i: int, host: int, deadline: float, fail_call: int, t_begin: float):
        out = yield from self._steps(i, host, deadline, fail_call)
        if isinstance(self.tier, ServingTier):
            self.tier.close(i)
        status, llm, steps, over = out
        return status, llm, steps, self.env.now - t_begin, over

    def _steps(self, i: int, host: int, deadline: float, fail_call: int):
        w, env, fleet, tier = self.work, self.env, self.fleet, self.tier
        st = self._chunks[i // CHUNK]
        overhead = st.draws.call_overhead
        first_call = int(w.call_off[st.lo])  # calls are numbered from the chunk's first
        f_e = fleet.factor["exec"]
        llm, steps, over_all = 0.0, 0, 0.0  # over_all: exec overhead spent
        x = 1.0 if self.task_scale is None else float(self.task_scale[i])
        gate, cancelled, on_gen = self.llm_gate, self.cancelled, self.on_generate
        if w.setup[i] and not (yield from self._until(w.setup[i], deadline)):
            return TIMEOUT, llm, steps, over_all
        call = int(w.call_off[i])
        k = 0  # calls made so far
        tokens = w.step_output is not None
        ctx = 0  # tokens of context before this turn's append (token workload)
        for s in range(int(w.step_off[i]), int(w.step_off[i + 1])):
            if gate is not None:
                closed = gate()
                if closed is not None:  # the engines train: generation waits for the new weights
                    yield closed
            if i in cancelled:
                return CANCELLED, llm, steps, over_all
            if on_gen is not None:
                on_gen(i)
            t0 = env.now
            if tokens:
                ctx, fresh, reusable, out = self._turn(ctx, w, i, s, x)
                ok = yield from self._until(self._overhead, deadline)
                if ok:
                    req = tier.request(i, ctx, out, reusable, fresh)
                    ok = yield from self._await(req.done, deadline)
                    if not ok:
                        tier.cancel(req)
                    elif self.turn_log is not None:
                        self.turn_log.append((i, self.bodies, env.now - t0, float(w.step_llm[s])))
                ctx += out
            else:
                engine, dur = tier.duration(float(w.step_llm[s]) * x)
                ok = yield from self._until(dur, deadline)
                tier.done(engine)
            llm += env.now - t0
            if not ok:
                return TIMEOUT, llm, steps, over_all
            for _ in range(int(w.step_calls[s])):
                k += 1
                if k == fail_call:
                    return LOST, llm, steps, over_all
                if i in cancelled:
                    return CANCELLED, llm, steps, over_all
                fleet.begin(host, "exec")
                over = overhead[call - first_call] * f_e(fleet.load(host, "exec"))
                t_over = env.now
                ok = yield from self._until(over, deadline)
                over_all += env.now - t_over
                fleet.end(host, "exec")
                if not ok or not (yield from self._until(w.call_tool[call] * x, deadline)):
                    return TIMEOUT, llm, steps, over_all
                call += 1
            steps += 1
        if w.reward[i] and not (yield from self._until(w.reward[i], deadline)):
            return TIMEOUT, llm, steps, over_all
        return OK, llm, steps, over_all

    # ------------------------------------------------------------ GPU
    def gpu_busy_seconds(self) -> float:
        """Engine busy time: exact in step fidelity; in trajectory fidelity, engines busy under
        Poisson occupancy at the time-binned number of generating requests."""
        inf = self.scn.cluster.inference
        if inf is None:
            return 0.0
        if self.step:
            return self.tier.busy_seconds
        if self.pilot is not None:  # the pilot's busy fraction over time, at the bodies running
            return busy_integral(self._on, self._off, self._busy_at)
        load, width = self.acc.load.mean_load(self.acc.end)
        return float((expected_busy_engines(np.maximum(load, 0.0), inf.engines) * width).sum())


def busy_integral(on, off, busy_at: list[float]) -> float:
    """Engine busy seconds from time 0 to the last change: ``busy_at[n]`` engines busy while
    ``n`` bodies run, bodies starting at the times ``on`` and ending at ``off``."""
    t = np.concatenate([np.asarray(on, dtype=np.float64), np.asarray(off, dtype=np.float64)])
    if not t.size:
        return 0.0
    change = np.concatenate([np.ones(len(on), dtype=np.int64), -np.ones(len(off), dtype=np.int64)])
    order = np.argsort(t, kind="stable")
    t = np.concatenate([[0.0], t[order]])
    running = np.concatenate([[0], np.cumsum(change[order])])[:-1]
    at = np.asarray(busy_at)[np.minimum(running, len(busy_at) - 1)]
    return float((at * np.diff(t)).sum())
