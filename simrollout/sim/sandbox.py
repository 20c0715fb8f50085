"""A trajectory's sandbox lifecycle in a cell: each attempt acquires a sandbox (its own,
prefetched by the warm pool with its task image; a parked sandbox of an earlier sample of its
task, reset; a warm-pool sandbox; or a cold create through quota and create-rate tokens), runs its
body in the cell's engine, and releases it (parked for a later sample of the task, or torn down);
a failed create or a lost sandbox is retried after a backoff while retries remain."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..rng import stream
from .records import CANCELLED, FAILED, LOST, OK, BodyResult, Row
from .substrate_draws import first_failure
from .workload_draws import CHUNK


@dataclass(slots=True)
class Attempts:
    """What a trajectory's attempts add up to: the fields of its row in Records."""

    start: float
    deadline: float
    task: int
    image: int
    first_draws: tuple  # the first attempt's pre-drawn inputs (records.INPUTS)
    attempt: int = 0
    rng: np.random.Generator | None = None  # a retry draws from its own stream
    waited: float = 0.0  # acquire_wait
    worker: float = 0.0
    sandbox: float = 0.0
    llm: float = 0.0
    steps: int = 0
    warm: bool = False
    over: float = 0.0
    td: float = 0.0
    lost: float = 0.0
    latency: float = 0.0  # the acquisition latency of the last attempt (``cold``)
    status: int = OK

    @property
    def first(self) -> bool:
        return self.attempt == 1

    def row(self, end: float) -> Row:
        """The trajectory's row (a failed one's overhead and teardown are its lost work's)."""
        failed = self.status == FAILED
        return Row(start=self.start, end=end, cold=self.latency, acquire_wait=self.waited,
                   worker=self.worker, sandbox=self.sandbox, llm=self.llm, attempts=self.attempt,
                   status=self.status, warm=self.warm, steps_done=self.steps,
                   overhead=0.0 if failed else self.over, teardown=0.0 if failed else self.td,
                   lost=self.lost)  # fmt: skip


class SandboxLifecycle:
    """The sandbox lifecycle of a :class:`simrollout.sim.model.Cell` (a part of it)."""

    def _init_sandboxes(self) -> None:
        scn = self.scn
        img = scn.workload.images
        # task images and reuse: trajectory i runs task i // G, image task % count
        self._G = scn.samples_per_task()
        self._images = img.count if img is not None else 0
        self._reuse = scn.policy.reuse
        self.started = 0  # trajectories are started in index order: the next one to start
        # with task images the warm pool prefetches: when trajectory i starts, the sandbox of
        # trajectory i + warm_pool is created with its image, and that trajectory takes it
        self._ahead = scn.policy.warm_pool if self._images else 0
        self._prefetched: dict = {}  # trajectory -> its prefetch (a simpy.Process)

    def trajectory(self, i: int):
        """Run trajectory ``i`` (every attempt); returns and records its row."""
        env = self.env
        st = self.chunk(i // CHUNK)
        draws = st.inputs[i - st.lo].tolist()  # _IN
        deadline = env.now + (self.scn.policy.timeout or math.inf)
        a = Attempts(env.now, deadline, i // self._G, self._image(i), tuple(draws))
        self.started = max(self.started, i + 1)
        if self._ahead and i + self._ahead < self.work.n and i + self._ahead not in self._prefetched:
            j = i + self._ahead
            self._prefetched[j] = env.process(self._prefetch(j))
        while True:
            a.attempt += 1
            a.rng = None if a.first else stream(self.scn.seed, self.rep, "retry", self.sub.name, i, a.attempt)
            got = yield from self._acquire(i, a)
            if got is not None:
                host, billed, ahead = got
                if not (yield from self._use(i, st, a, host, billed, ahead)):
                    break
            elif not (yield from self._again(a.attempt)):
                a.status = FAILED
                break
        row = a.row(env.now)
        cold0, td0 = draws[0], draws[2]
        if self.steady is not None:
            if a.status == OK and a.attempt == 1 and not a.warm:
                self.steady.done(i, a.latency / cold0 if cold0 > 0 else 1.0, a.td / td0 if td0 > 0 else 1.0)
            else:
                self.steady.forget(i)
        self.record(i, st, row)
        return row

    def _acquire(self, i: int, a: Attempts):
        """This attempt's sandbox: ``(host, billed so far, time waited for its prefetch)``, or
        None when its create failed (counted as lost)."""
        env, sub, fleet, first = self.env, self.sub, self.fleet, a.first
        cold0, warm0, _, u_create0 = a.first_draws[:4]
        warm, ahead = fleet.claim_warm(), 0.0
        if first and i in self._prefetched:  # its own sandbox, created ahead (waited if not ready)
            t_ask = env.now
            got = yield self._prefetched.pop(i)
            if got is not None:
                host, created, ready = got
                fleet.pool_idle_seconds += env.now - ready
                warm, ahead = (host, env.now - created), env.now - t_ask
            else:  # the prefetch failed: it waited for a sandbox it did not get
                a.waited += env.now - t_ask
        reused = fleet.claim_parked(a.task) if self._reuse else None
        if reused is not None:  # the sandbox of an earlier sample of this task, reset
            host, billed = reused, 0.0
            rng = stream(self.scn.seed, self.rep, "reset", sub.name, i, a.attempt)
            base = float(sub.reset.sample(rng, 1)[0])
            # a deferred reset is waited with the body, like a deferred create
            latency = base if fleet.defer else (yield from fleet.op(fleet.dom(host, i), base, "exec"))
            billed += latency
            a.warm = True
        elif warm is not None:
            host, billed = warm
            start_warm = warm0 if first else float(sub.warm_start.sample(a.rng, 1)[0])
            if not fleet.defer:  # a deferred warm start is waited with the body
                yield env.timeout(start_warm)
            latency = ahead + start_warm  # with a prefetch still being created, its rest too
            billed += latency
            a.warm = True
        else:
            base = cold0 if first else float(sub.cold_start.sample(a.rng, 1)[0])
            u = u_create0 if first else a.rng.random()
            host, waited, latency, fails = yield from fleet.create(base, u, a.image, i)
            a.waited += waited
            a.warm = False
            billed = latency
            if fails:
                a.latency = latency
                a.worker += latency
                a.lost += latency
                a.sandbox += max(latency, sub.billing.minimum_seconds)
                return None
        a.latency = latency
        a.worker += latency
        return host, billed, ahead

    def _use(self, i: int, st, a: Attempts, host: int, billed: float, ahead: float):
        """Run the body on the acquired sandbox and release it; True when the attempt lost its
        sandbox and is to be retried."""
        env, fleet = self.env, self.fleet
        lag = a.latency - ahead if fleet.defer else 0.0  # a deferred create is waited with the body
        if i in self.cancelled:  # cancelled by the training loop while it waited for a sandbox
            status, llm, busy, a.over = CANCELLED, 0.0, 0.0, 0.0
        else:
            body = yield from self._body(i, st, a, host, lag)
            status, llm, busy = body.status, body.llm, body.seconds
        a.status = status
        if fleet.defer:
            lag += busy
        if self._reuse and status != LOST:
            if lag:  # decide at the body's end, not when a deferred body was drawn
                yield env.timeout(lag)
                lag = 0.0
            if self.started < min((a.task + 1) * self._G, self.work.n):
                # a later sample of this task has not started: it takes this sandbox
                fleet.park(a.task, host)
                a.llm += llm
                a.worker += busy - llm
                a.sandbox += billed + busy
                a.td = 0.0
                return False
        return (yield from self._release(i, a, host, billed, llm, busy, lag))

    def _body(self, i: int, st, a: Attempts, host: int, lag: float):
        """The body in the cell's engine: its :class:`~.records.BodyResult` (its steps and exec
        overhead kept in the attempt)."""
        env, fleet = self.env, self.fleet
        dom = fleet.dom(host, i)  # where its operations contend (contention.scope)
        p_exec = fleet.fail["exec"](fleet.load(dom) + 1.0)
        u_exec0, calls = a.first_draws[4], a.first_draws[6]
        fail_call = first_failure(u_exec0 if a.first else a.rng.random(), p_exec, int(calls))
        body = self._body_steps if self.step else self._body_trajectory
        if self.cosim is not None:  # a pilot's, compiled (.pilot_compiled)
            body = self.cosim.body
        if self.loop is not None and self.loop.bodies is not None:  # the loop's (sim.loop_body)
            body = self.loop.bodies.body
        self._count_bodies(+1)
        if self.pilot is not None:
            self._x[i] = float(st.scale[i - st.lo])
        out: BodyResult = yield from body(i, dom, a.deadline, fail_call, env.now + lag)
        a.steps, a.over = out.steps, out.overhead
        self._x.pop(i, None)
        self._count_bodies(-1)
        return out

    def _release(self, i: int, a: Attempts, host: int, billed: float, llm: float, busy: float, lag: float):
        """Tear the sandbox down; True when the attempt lost its sandbox and is to be retried."""
        sub, first, rng = self.sub, a.first, a.rng
        td_base = a.first_draws[2] if first else float(sub.teardown.sample(rng, 1)[0])
        u_td = a.first_draws[5] if first else rng.random()
        a.td = yield from self.fleet.teardown(host, td_base, lag, u_td, i)
        a.llm += llm
        a.worker += busy - llm + a.td
        a.sandbox += max(billed + busy + a.td, sub.billing.minimum_seconds)
        if a.status != LOST:
            return False
        a.lost += a.latency + busy - llm + a.td
        if (yield from self._again(a.attempt)):
            return True
        a.status = FAILED
        return False

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

    def _close_prefetched(self) -> None:
        """Bill the sandboxes created ahead for trajectories that never started."""
        for proc in self._prefetched.values():
            if proc.triggered and proc.value is not None:
                self.fleet.pool_sandbox_seconds += self.env.now - proc.value[1]

    def _again(self, attempt: int):
        """After a failed attempt: wait the backoff and say True, or False when retries are spent."""
        pol = self.scn.policy
        if attempt > pol.retries:
            return False
        if pol.retry_backoff:
            yield self.env.timeout(pol.retry_backoff * 2 ** (attempt - 1))
        return True
