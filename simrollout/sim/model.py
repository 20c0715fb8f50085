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

from ..rng import stream
from ..scenario import Scenario, Substrate
from ..workload import SubstrateDraws, Work, first_failure
from .fleet import Fleet
from .inference import InferenceTier, expected_busy_engines
from .records import FAILED, OK, TIMEOUT, Records

LOST = 3  # the sandbox was lost mid-trajectory (exec failure): retried when retries remain


class Cell:
    def __init__(
        self,
        scn: Scenario,
        sub: Substrate,
        concurrency: int,
        rep: int,
        work: Work,
        draws: SubstrateDraws,
        fidelity: str,
        progress: Callable[[int], None] | None = None,
    ):
        self.scn, self.sub, self.work, self.draws = scn, sub, work, draws
        self.concurrency, self.rep = concurrency, rep
        self.step = fidelity == "step"
        self.env = simpy.Environment()
        self.rng = stream(scn.seed, rep, "substrate", sub.name, "run", concurrency)
        self.fleet = Fleet(self.env, sub, self.rng)
        self.tier = InferenceTier(self.env, scn.cluster.inference)
        self.rec = Records.empty(work.n)
        self.gen_start = np.zeros(work.n)  # body interval and generating share (GPU estimate)
        self.gen_end = np.zeros(work.n)
        self.gen_share = np.zeros(work.n)
        self.active = 0
        self.progress = progress
        self._done = 0
        # population means for the trajectory-fidelity load fixed point
        self._L = float(work.llm.mean())
        self._O = float(draws.overhead.mean())
        self._R = float((work.tool + work.setup + work.reward).mean())

    # ------------------------------------------------------------ drivers
    def run(self) -> Records:
        pol, n = self.scn.policy, self.work.n
        if self.scn.arrivals.kind == "poisson":
            gaps = stream(self.scn.seed, self.rep, "arrivals").exponential(1.0 / self.scn.arrivals.rate, n)
            self.rec.arrival[:] = np.cumsum(gaps)
        if pol.warm_pool:
            self.fleet.start_pool(pol.warm_pool)
        if pol.mode == "sync":
            main = self.env.process(self._sync(pol.batch_size))
        else:
            main = self.env.process(self._workers(iter(range(n)), self.concurrency))
        self.env.run(until=main)
        self.fleet.close_pool(self.env.now)
        return self.rec

    def _workers(self, todo, count: int):
        yield self.env.all_of([self.env.process(self._worker(todo)) for _ in range(count)])

    def _sync(self, batch: int):
        n = self.work.n
        for lo in range(0, n, batch):
            hi = min(lo + batch, n)
            ready = self.rec.arrival[hi - 1]  # a batch starts once all its members have arrived
            if ready > self.env.now:
                yield self.env.timeout(ready - self.env.now)
            for i in range(lo, hi):
                self.rec.arrival[i] = (
                    self.env.now if self.scn.arrivals.kind == "batch" else self.rec.arrival[i]
                )
            yield from self._workers(iter(range(lo, hi)), min(self.concurrency, hi - lo))

    def _worker(self, todo):
        for i in todo:
            wait = self.rec.arrival[i] - self.env.now
            if wait > 0:
                yield self.env.timeout(wait)
            yield from self.trajectory(i)
            self._done += 1
            if self.progress is not None and self._done % 4096 == 0:
                self.progress(4096)

    # ------------------------------------------------------------ one trajectory
    def trajectory(self, i: int):
        env, rec, sub, fleet, d = self.env, self.rec, self.sub, self.fleet, self.draws
        retries, backoff = self.scn.policy.retries, self.scn.policy.retry_backoff
        min_bill = sub.billing.minimum_seconds
        rec.start[i] = env.now
        deadline = env.now + (self.scn.policy.timeout or math.inf)
        attempt = 0
        while True:
            attempt += 1
            first = attempt == 1
            warm = fleet.claim_warm()
            if warm is not None:
                host, billed = warm
                latency = float(d.warm[i] if first else sub.warm_start.sample(self.rng, 1)[0])
                yield env.timeout(latency)
                billed += latency
                rec.warm[i] = True
            else:
                base = float(d.cold[i] if first else sub.cold_start.sample(self.rng, 1)[0])
                fails = bool(d.fail_create[i] if first else self.rng.random() < sub.failures.create)
                host, waited, latency = yield from fleet.create(base, fails)
                rec.acquire_wait[i] += waited
                rec.warm[i] = False
                billed = latency
                if fails:
                    rec.worker[i] += latency
                    rec.sandbox[i] += max(latency, min_bill)
                    if attempt > retries:
                        status = FAILED
                        break
                    if backoff:
                        yield env.timeout(backoff * 2 ** (attempt - 1))
                    continue
            rec.cold[i] = latency
            rec.worker[i] += latency
            calls = int(self.work.calls[i])
            if first:
                fail_call = int(d.fail_call[i])
            else:
                fail_call = int(first_failure(self.rng, sub.failures.exec, np.array([calls]))[0])
            t0 = env.now
            body = self._body_steps if self.step else self._body_fast
            status, llm, steps = yield from body(i, host, deadline, fail_call)
            busy = env.now - t0
            td_base = float(d.teardown[i] if first else sub.teardown.sample(self.rng, 1)[0])
            td = yield from fleet.teardown(host, td_base)
            rec.llm[i] += llm
            rec.worker[i] += busy - llm + td
            rec.sandbox[i] += max(billed + busy + td, min_bill)
            rec.steps_done[i] = steps
            if status == LOST:
                if attempt > retries:
                    status = FAILED
                    break
                if backoff:
                    yield env.timeout(backoff * 2 ** (attempt - 1))
                continue
            break
        rec.status[i] = status
        rec.attempts[i] = attempt
        rec.end[i] = env.now

    # ------------------------------------------------------------ bodies
    def _multipliers(self, host: int) -> tuple[float, float]:
        """Generation and exec-overhead multipliers at the current load (a fixed point)."""
        inf, f_e = self.scn.cluster.inference, self.fleet.factor["exec"]
        s_l = inf.slowdown if inf else 0.0
        if s_l == 0 and not self.sub.contention.exec:
            return 1.0, 1.0
        others = self.active  # bodies already running, excluding this one
        on_host = self.fleet.bodies[host]
        creates = self.fleet.ops[host]
        L, O, R = self._L, self._O, self._R
        x_l = x_e = 1.0
        for _ in range(30):
            total = L * x_l + O * x_e + R
            nx_l = 1.0 + s_l * others * (L * x_l / total) / (inf.engines if inf else 1)
            nx_e = f_e(1.0 + on_host * (O * x_e / total) + creates)
            if abs(nx_l - x_l) < 1e-9 and abs(nx_e - x_e) < 1e-9:
                break
            x_l, x_e = nx_l, nx_e
        self.fleet.exec_share = O * x_e / (L * x_l + O * x_e + R)
        return x_l, x_e

    def _body_fast(self, i: int, host: int, deadline: float, fail_call: int):
        w, d, env = self.work, self.draws, self.env
        x_l, x_e = self._multipliers(host)
        llm = w.llm[i] * x_l
        steps_part = llm + d.overhead[i] * x_e + w.tool[i]
        frac, status = 1.0, OK
        if fail_call:
            frac, status = (fail_call - 1) / w.calls[i], LOST
        dur = w.setup[i] + steps_part * frac + (w.reward[i] if status == OK else 0.0)
        if env.now + dur > deadline:
            cut = max(deadline - env.now, 0.0)
            frac *= cut / dur if dur > 0 else 0.0
            dur, status = cut, TIMEOUT
        self.fleet.bodies[host] += 1
        self.active += 1
        self.gen_start[i], self.gen_end[i] = env.now, env.now + dur
        self.gen_share[i] = llm / steps_part if steps_part > 0 else 0.0
        yield env.timeout(dur)
        self.fleet.bodies[host] -= 1
        self.active -= 1
        return status, float(llm * frac), int(w.steps[i] * frac)

    def _until(self, dur: float, deadline: float):
        """Wait ``dur`` or until the deadline; True when the wait completed."""
        left = deadline - self.env.now
        if dur > left:
            yield self.env.timeout(max(left, 0.0))
            return False
        yield self.env.timeout(dur)
        return True

    def _body_steps(self, i: int, host: int, deadline: float, fail_call: int):
        w, d, env, fleet, tier = self.work, self.draws, self.env, self.fleet, self.tier
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
                over = d.call_overhead[call] * f_e(fleet.ops[host])
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
    def gpu_busy_seconds(self, bins: int = 4096) -> float:
        """Engine busy time: exact in step fidelity; in trajectory fidelity, engines busy under
        Poisson occupancy at the time-binned number of generating requests."""
        inf = self.scn.cluster.inference
        if inf is None:
            return 0.0
        if self.step:
            return self.tier.busy_seconds
        end = float(self.gen_end.max()) if self.work.n else 0.0
        if end <= 0:
            return 0.0
        edges = np.linspace(0.0, end, bins + 1)
        area = _ramp(edges, self.gen_start, self.gen_share) - _ramp(edges, self.gen_end, self.gen_share)
        width = edges[1] - edges[0]
        load = np.maximum(np.diff(area) / width, 0.0)  # mean generating requests per bin
        return float(expected_busy_engines(load, inf.engines).sum() * width)


def _ramp(edges: np.ndarray, t: np.ndarray, w: np.ndarray) -> np.ndarray:
    """sum_i w_i * max(edge - t_i, 0) at every edge, in O(n log n)."""
    order = np.argsort(t, kind="stable")
    ts, ws = t[order], w[order]
    cw = np.concatenate([[0.0], np.cumsum(ws)])
    cwt = np.concatenate([[0.0], np.cumsum(ws * ts)])
    k = np.searchsorted(ts, edges, side="left")
    return edges * cw[k] - cwt[k]
