"""One simulated cell (substrate x concurrency x replication) as SimPy processes.

Rollout workers are plain generators pulling trajectories; a trajectory acquires a sandbox
(warm pool, or quota -> create-rate token -> cold start), runs its body, and tears down.
The body is either every LLM call and tool call as events (``step`` fidelity, the reference) or
one timeout per trajectory whose length sums its pre-drawn steps (``trajectory`` fidelity), with
the load on the inference tier and on the host taken as a fixed point at the body's start.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import simpy

from ..metrics import Accumulator
from ..rng import stream
from ..scenario import Scenario, Substrate
from ..workload import CHUNK, SubstrateDraws, Work, draw_substrate, first_failure
from .fleet import Fleet
from .inference import InferenceTier, expected_busy_engines
from .records import FAILED, OK, TIMEOUT, Records

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
)


class _Chunk:
    """Inputs and outputs of one chunk of trajectories while any of them is in flight."""

    def __init__(self, lo: int, inputs: np.ndarray, draws: SubstrateDraws, arrival: np.ndarray):
        self.lo, self.inputs, self.draws, self.arrival = lo, inputs, draws, arrival
        self.out = np.zeros((len(inputs), len(_OUT)))
        self.gen = np.zeros((len(inputs), 3))  # body start, end, generating share (GPU estimate)
        self.left = len(inputs)


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
    ):
        self.scn, self.sub, self.work = scn, sub, work
        self.concurrency, self.rep = concurrency, rep
        self.step = fidelity == "step"
        self.env = simpy.Environment()
        self.rng = stream(scn.seed, rep, "substrate", sub.name, "run", concurrency)
        inf, c, f = scn.cluster.inference, sub.contention, sub.failures
        curves = any(isinstance(getattr(f, ph), dict) for ph in ("create", "exec", "teardown"))
        self._loaded = bool((inf and inf.slowdown) or c.create or c.exec or c.teardown or curves)
        defer = not self.step and not self._loaded
        self.fleet = Fleet(self.env, sub, self.rng, most=concurrency + scn.policy.warm_pool, defer=defer)
        self.tier = InferenceTier(self.env, scn.cluster.inference)
        self.acc = Accumulator()
        self.sink, self.keep, self.kept = sink, keep, []
        self.active = 0
        self.progress = progress
        self._done = 0
        self._chunks: dict[int, _Chunk] = {}
        self._last_arrival = 0.0  # of the latest chunk whose arrivals were drawn
        # population means for the trajectory-fidelity load fixed point
        first = self._chunk(0)
        self._L = float(work.llm.mean())
        self._O = float(first.draws.overhead.mean())
        self._R = float((work.tool + work.setup + work.reward).mean())
        self._fixed_points: dict[tuple, tuple[float, float, float]] = {}

    def _chunk(self, c: int) -> _Chunk:
        """The chunk's state, drawn when its first trajectory is needed."""
        st = self._chunks.get(c)
        if st is None:
            w, lo = self.work, c * CHUNK
            d = draw_substrate(self.scn, self.sub, self.rep, w, c, detail=self.step)
            sl = slice(lo, lo + len(d.cold))
            inputs = np.column_stack(
                [d.cold, d.warm, d.teardown, d.u_create, d.u_exec, w.calls[sl],
                 w.llm[sl], d.overhead, w.tool[sl], w.setup[sl], w.reward[sl], w.steps[sl]]
            )  # fmt: skip
            arrival = np.zeros(len(inputs))
            if self.scn.arrivals.kind == "poisson":
                gaps = stream(self.scn.seed, self.rep, "arrivals", c).exponential(
                    1.0 / self.scn.arrivals.rate, len(inputs)
                )
                arrival = self._last_arrival + np.cumsum(gaps)
                self._last_arrival = float(arrival[-1])
            st = self._chunks[c] = _Chunk(lo, inputs, d, arrival)
        return st

    def arrival(self, i: int) -> float:
        return float(self._chunk(i // CHUNK).arrival[i % CHUNK])

    def _finish(self, c: int) -> None:
        st = self._chunks.pop(c)
        cols = dict(zip(_OUT, st.out.T))
        ints = {"attempts": np.int8, "status": np.int8, "warm": bool, "steps_done": np.int32}
        rec = Records(arrival=st.arrival, **{k: v.astype(ints.get(k, np.float64)) for k, v in cols.items()})
        self.acc.add(rec, None if self.step else st.gen)
        if self.sink is not None:
            self.sink(rec, st.lo)
        if self.keep:
            self.kept.append(rec)

    # ------------------------------------------------------------ drivers
    def run(self) -> Records | None:
        """Simulate; returns the per-trajectory records when ``keep``, else None (see ``acc``)."""
        pol, n = self.scn.policy, self.work.n
        if pol.warm_pool:
            self.fleet.start_pool(pol.warm_pool)
        if pol.mode == "sync":
            main = self.env.process(self._sync(pol.batch_size))
        else:
            main = self.env.process(self._workers(iter(range(n)), self.concurrency))
        self.env.run(until=main)
        self.fleet.close_pool(self.env.now)
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
                    st = self._chunk(c)
                    st.arrival[max(lo - st.lo, 0) : hi - st.lo] = self.env.now
            yield from self._workers(iter(range(lo, hi)), min(self.concurrency, hi - lo))

    def _worker(self, todo):
        env, timed = self.env, self.scn.arrivals.kind == "poisson"
        for i in todo:
            if timed and self.arrival(i) > env.now:
                yield env.timeout(self.arrival(i) - env.now)
            yield from self.trajectory(i)
            self._done += 1
            if self.progress is not None and self._done % 4096 == 0:
                self.progress(4096)

    # ------------------------------------------------------------ one trajectory
    def trajectory(self, i: int):
        env, sub, fleet = self.env, self.sub, self.fleet
        min_bill = sub.billing.minimum_seconds
        st = self._chunk(i // CHUNK)
        cold0, warm0, td0, u_create0, u_exec0, calls = st.inputs[i - st.lo, :6].tolist()
        start = env.now
        deadline = start + (self.scn.policy.timeout or math.inf)
        attempt, waited_all, worker, sandbox, llm_all, steps, warm_hit = 0, 0.0, 0.0, 0.0, 0.0, 0, False
        while True:
            attempt += 1
            first = attempt == 1
            warm = fleet.claim_warm()
            if warm is not None:
                host, billed = warm
                latency = warm0 if first else float(sub.warm_start.sample(self.rng, 1)[0])
                yield env.timeout(latency)
                billed += latency
                warm_hit = True
            else:
                base = cold0 if first else float(sub.cold_start.sample(self.rng, 1)[0])
                u = u_create0 if first else self.rng.random()
                host, waited, latency, fails = yield from fleet.create(base, u)
                waited_all += waited
                warm_hit = False
                billed = latency
                if fails:
                    worker += latency
                    sandbox += max(latency, min_bill)
                    if (yield from self._again(attempt)):
                        continue
                    status = FAILED
                    break
            worker += latency
            lag = latency if fleet.defer else 0.0  # a deferred create is waited with the body
            p_exec = fleet.fail["exec"](fleet.load(host) + 1.0)
            fail_call = first_failure(u_exec0 if first else self.rng.random(), p_exec, int(calls))
            body = self._body_steps if self.step else self._body_fast
            status, llm, steps, busy = yield from body(i, host, deadline, fail_call, env.now + lag)
            if fleet.defer:
                lag += busy
            td_base = td0 if first else float(sub.teardown.sample(self.rng, 1)[0])
            td = yield from fleet.teardown(host, td_base, lag)
            llm_all += llm
            worker += busy - llm + td
            sandbox += max(billed + busy + td, min_bill)
            if status == LOST:
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
        )  # noqa: E501
        st.out[i - st.lo] = row
        st.left -= 1
        if st.left == 0:
            self._finish(i // CHUNK)

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
        """Generation and exec-overhead multipliers at the current load (a fixed point, cached
        per load state), with the expected share of a body spent in exec overhead."""
        key = (self.active, self.fleet.bodies[host], self.fleet.ops[host])
        hit = self._fixed_points.get(key)
        if hit is None:
            hit = self._fixed_points[key] = self._solve(*key)
        x_l, x_e, self.fleet.exec_share = hit
        return x_l, x_e

    def _solve(self, others: int, on_host: int, in_flight: int) -> tuple[float, float, float]:
        inf, f_e = self.scn.cluster.inference, self.fleet.factor["exec"]
        s_l = inf.slowdown if inf else 0.0
        L, O, R = self._L, self._O, self._R
        x_l = x_e = 1.0
        for _ in range(100):
            total = L * x_l + O * x_e + R
            nx_l = 1.0 + s_l * others * (L * x_l / total) / (inf.engines if inf else 1)
            nx_e = f_e(1.0 + on_host * (O * x_e / total) + in_flight)
            if abs(nx_l - x_l) < 1e-9 and abs(nx_e - x_e) < 1e-9:
                break
            x_l, x_e = nx_l, nx_e
        return x_l, x_e, O * x_e / (L * x_l + O * x_e + R)

    def _body_fast(self, i: int, host: int, deadline: float, fail_call: int, t0: float):
        """One timeout for the whole body (none when the fleet defers: the caller waits it)."""
        st = self._chunks[i // CHUNK]
        calls, llm, over, tool, setup, reward, steps = st.inputs[i - st.lo, 5:].tolist()
        x_l, x_e = self._multipliers(host) if self._loaded else (1.0, 1.0)
        llm *= x_l
        steps_part = llm + over * x_e + tool
        frac, status = 1.0, OK
        if fail_call:
            frac, status = (fail_call - 1) / calls, LOST
        dur = setup + steps_part * frac + (reward if status == OK else 0.0)
        if t0 + dur > deadline:
            cut = max(deadline - t0, 0.0)
            frac *= cut / dur if dur > 0 else 0.0
            dur, status = cut, TIMEOUT
        st.gen[i - st.lo] = (t0, t0 + dur, llm / steps_part if steps_part > 0 else 0.0)
        if not self.fleet.defer:
            self.fleet.bodies[host] += 1
            self.active += 1
            yield self.env.timeout(dur)
            self.fleet.bodies[host] -= 1
            self.active -= 1
        return status, llm * frac, int(steps * frac), dur

    def _until(self, dur: float, deadline: float):
        """Wait ``dur`` or until the deadline; True when the wait completed."""
        left = deadline - self.env.now
        if dur > left:
            yield self.env.timeout(max(left, 0.0))
            return False
        yield self.env.timeout(dur)
        return True

    def _body_steps(self, i: int, host: int, deadline: float, fail_call: int, t_begin: float):
        out = yield from self._steps(i, host, deadline, fail_call)
        return (*out, self.env.now - t_begin)

    def _steps(self, i: int, host: int, deadline: float, fail_call: int):
        w, env, fleet, tier = self.work, self.env, self.fleet, self.tier
        st = self._chunks[i // CHUNK]
        overhead = st.draws.call_overhead
        first_call = int(w.call_off[st.lo])  # calls are numbered from the chunk's first
        f_e = fleet.factor["exec"]
        llm, steps = 0.0, 0
        if w.setup[i] and not (yield from self._until(w.setup[i], deadline)):
            return TIMEOUT, llm, steps
        call = int(w.call_off[i])
        k = 0  # calls made so far
        for s in range(int(w.step_off[i]), int(w.step_off[i + 1])):
            t0 = env.now
            engine, dur = tier.duration(float(w.step_llm[s]))
            ok = yield from self._until(dur, deadline)
            tier.done(engine)
            llm += env.now - t0
            if not ok:
                return TIMEOUT, llm, steps
            for _ in range(int(w.step_calls[s])):
                k += 1
                if k == fail_call:
                    return LOST, llm, steps
                fleet.ops[host] += 1
                over = overhead[call - first_call] * f_e(fleet.ops[host])
                ok = yield from self._until(over, deadline)
                fleet.ops[host] -= 1
                if not ok or not (yield from self._until(w.call_tool[call], deadline)):
                    return TIMEOUT, llm, steps
                call += 1
            steps += 1
        if w.reward[i] and not (yield from self._until(w.reward[i], deadline)):
            return TIMEOUT, llm, steps
        return OK, llm, steps

    # ------------------------------------------------------------ GPU
    def gpu_busy_seconds(self) -> float:
        """Engine busy time: exact in step fidelity; in trajectory fidelity, engines busy under
        Poisson occupancy at the time-binned number of generating requests."""
        inf = self.scn.cluster.inference
        if inf is None:
            return 0.0
        if self.step:
            return self.tier.busy_seconds
        load, width = self.acc.load.mean_load(self.acc.end)
        return float((expected_busy_engines(np.maximum(load, 0.0), inf.engines) * width).sum())
