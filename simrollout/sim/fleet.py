"""The sandbox fleet of one substrate: quota, create-rate limit, hosts, warm pool.

Lifecycle operations (create, exec overhead, teardown) on a host take ``base x m(n)``, ``n`` the
operations in flight on that host (itself included; with operation weights in the profile, each
other phase's operations count at their weight) and ``m`` the phase's contention curve. With
``contention.shared`` creates and teardowns share the host instead: each progresses at
``1 / m(n)`` of its base per second, ``n`` re-read whenever an operation there starts or ends;
with ``contention.creates: in_order`` the creates' capacity (``k / m(n)`` for ``k`` creates in
flight) goes to the oldest create alone, the others waiting their turn.
"""

from __future__ import annotations

import numpy as np
import simpy

from ..scenario import PHASES, Substrate
from .images import HostImages


class Fleet:
    def __init__(
        self,
        env: simpy.Environment,
        sub: Substrate,
        rng: np.random.Generator,
        most: int | None = None,
        defer: bool = False,
        refill_rng=None,
        scn_images=None,
        clients: int = 1,
    ):
        """``most``: the most sandboxes the run can ever hold at once (a quota above it never binds).
        ``defer``: nothing observes operations in flight (no contention), so a create's latency is
        returned for the caller to wait together with the body and the teardown (fewer events).
        ``scn_images``: the task images' sizes (GB), when the workload has task images.
        ``clients``: rollout clients issuing the operations (contention scope ``client``)."""
        self.defer = defer
        # the k-th warm-pool refill draws from refill_rng(k): the same in both fidelities
        self._refill_rng = refill_rng or (lambda k: rng)
        self._refills = 0
        self.env = env
        self.sub = sub
        self.rng = rng
        cap = sub.capacity
        binds = cap.total is not None and (most is None or cap.total < most)
        self.quota = simpy.Container(env, cap.total, init=cap.total) if binds else None
        self.hosts = cap.hosts
        self.sandboxes = np.zeros(cap.hosts, dtype=np.int64)  # alive per host
        self.alive = 0
        # contention domains: where operations in flight slow each other (contention.scope)
        self.scope, self.clients = sub.contention.scope, clients
        domains = {"host": cap.hosts, "service": 1, "client": clients}[self.scope]
        self.ops = [0] * domains  # lifecycle ops in flight per domain
        self.by_phase = {ph: [0] * domains for ph in PHASES}  # the same, per phase
        self._w = sub.contention.weight_rows()  # per phase, the weights of each phase's ops
        # expected exec operations in flight per host from running bodies (trajectory fidelity):
        # each body adds the share of its current segment spent in exec overhead
        self.exec_load = [0.0] * domains
        self.bg = 0.0  # per domain: the load of trajectories that wait their lifecycle at once (sim.steady)
        self.shared = sub.contention.shared  # creates and teardowns share their domain
        self.in_order = sub.contention.creates == "in_order"  # ... creates served oldest first
        self._sharing: dict[int, _Sharing] = {}  # per domain: its shared operations in flight
        self._next_token = 0.0
        self.factor = {ph: sub.contention.factor(ph) for ph in ("create", "exec", "teardown")}
        self.fail = {ph: sub.failures.rate(ph) for ph in ("create", "exec", "teardown")}
        self.pool: simpy.Store | None = None
        self.pool_idle_seconds = 0.0
        self.pool_sandbox_seconds = 0.0  # lifetime of pool sandboxes before they were claimed
        self.peak_sandboxes = 0
        img, cache = scn_images, sub.image_cache
        self.images = (
            HostImages(cap.hosts, img, cache.pull_mb_s, cache.cache_gb)
            if img is not None and cache is not None
            else None
        )
        self.parked: dict[int, list[tuple[int, float]]] = {}  # task -> [(host, parked at)]
        self.parked_seconds = 0.0  # sandbox-seconds of reusable sandboxes waiting for their task
        self.reuses = 0

    # ------------------------------------------------------------ its metrics
    def totals(self) -> dict:
        """What the cell's base metrics need of the fleet (a :class:`~.metrics.MetricsStore` part):
        sandbox-seconds outside the trajectories (pool sandboxes before their claim, parked
        reusable ones), the peak of sandboxes alive, the pool's idle seconds."""
        extra = self.pool_sandbox_seconds + self.parked_seconds
        return {"extra_sandbox_seconds": extra, "peak_sandboxes": self.peak_sandboxes,
                "pool_idle_seconds": self.pool_idle_seconds}  # fmt: skip

    def report(self, store, out: dict) -> None:
        """Task images' and reuse's metrics, when the scenario has them."""
        if self.images is not None:
            out.update(self.images.summary())
        if store.scn.policy.reuse:
            out.update(sandboxes_reused=self.reuses, reuse_idle_hours=self.parked_seconds / 3600)

    # ------------------------------------------------------------ operations on a host

    def dom(self, host: int, client: int) -> int:
        """The contention domain of an operation on ``host`` issued by rollout client ``client``
        (a trajectory's client is its index modulo the clients)."""
        if self.scope == "host":
            return host
        return 0 if self.scope == "service" else client % self.clients

    def load(self, d: int, phase: str | None = None) -> float:
        """Operations in flight in domain ``d``, counting expected execs of running bodies; as
        ``phase`` sees them when the profile weighs operations (else each counts one)."""
        if phase is None or self._w is None:
            return self.ops[d] + self.exec_load[d] + self.bg
        wc, we, wt = self._w[phase]
        by = self.by_phase
        execs = by["exec"][d] + self.exec_load[d]
        return wc * by["create"][d] + we * execs + wt * by["teardown"][d] + self.bg

    def begin(self, d: int, phase: str) -> None:
        """An operation of ``phase`` starts in domain ``d``."""
        self._change(d, phase, 1)

    def end(self, d: int, phase: str) -> None:
        self._change(d, phase, -1)

    def add_exec_load(self, d: int, amount: float) -> None:
        """Running bodies' expected execs in flight in domain ``d`` change by ``amount``."""
        self._change(d, None, 0, amount)

    def _change(self, d: int, phase: str | None, by: int, exec_by: float = 0.0) -> None:
        """The load in domain ``d`` changes; operations sharing it progress up to now at their old
        rates first and are re-read after."""
        sh = self._sharing.get(d) if self.shared else None
        if sh is not None:
            sh.advance(self.env.now)
        if phase is not None:
            self.ops[d] += by
            self.by_phase[phase][d] += by
        self.exec_load[d] += exec_by
        if sh is not None:
            self._reshare(d, sh)

    def op(self, d: int, base: float, phase: str):
        """Run one lifecycle operation of ``phase`` in domain ``d``; returns its latency."""
        if self.shared and phase != "exec":
            return (yield from self._shared_op(d, base, phase))
        self.begin(d, phase)
        latency = base * self.factor[phase](self.load(d, phase))
        yield self.env.timeout(latency)
        self.end(d, phase)
        return latency

    def _shared_op(self, d: int, base: float, phase: str):
        """An operation that shares domain ``d``: done once its progress at ``1 / m(load now)``
        reaches ``base``."""
        t0 = self.env.now
        sh = self._sharing.get(d)
        if sh is None:
            sh = self._sharing[d] = _Sharing(t0)
        sh.advance(t0)  # the others progress up to now before this one joins them
        done = self.env.event()
        sh.ops.append([phase, base, 1.0, done])
        self.begin(d, phase)  # counts it and re-reads every rate, its own included
        yield done
        return self.env.now - t0

    def _reshare(self, d: int, sh: _Sharing) -> None:
        """Re-read every shared operation's rate at the load now; wake at the next to finish."""
        if not sh.ops:
            return
        for op in sh.ops:
            op[2] = 1.0 / self.factor[op[0]](self.load(d, op[0]))
        if self.in_order:  # the creates' capacity to the oldest create (ops are in arrival order)
            creates = [op for op in sh.ops if op[0] == "create"]
            for k, op in enumerate(creates):
                op[2] = op[2] * len(creates) if k == 0 else 0.0
        sh.gen += 1
        gen = sh.gen
        wake = self.env.timeout(min(max(op[1], 0.0) / op[2] for op in sh.ops if op[2] > 0))
        wake.callbacks.append(lambda _, d=d, sh=sh, gen=gen: self._finish_shared(d, sh, gen))

    def _finish_shared(self, d: int, sh: _Sharing, gen: int) -> None:
        if gen != sh.gen:  # the load changed since this wake was set
            return
        sh.advance(self.env.now)
        moving = [op for op in sh.ops if op[2] > 0]
        done = [op for op in moving if op[1] <= 1e-9] or [min(moving, key=lambda o: o[1] / o[2])]
        for op in done:
            sh.ops.remove(op)
            self.ops[d] -= 1
            self.by_phase[op[0]][d] -= 1
        self._reshare(d, sh)
        for op in done:
            op[3].succeed()

    # ------------------------------------------------------------ sandboxes
    def _rate_delay(self) -> float:
        rate = self.sub.create_rate
        if rate is None:
            return 0.0
        t = max(self.env.now, self._next_token)
        self._next_token = t + 1.0 / rate
        return t - self.env.now

    def _place(self, image: int) -> int:
        """The host with the fewest sandboxes; among those, one that holds the task's image."""
        if self.hosts == 1:
            return 0
        if image < 0 or self.images is None:
            return int(np.argmin(self.sandboxes))
        fewest = np.flatnonzero(self.sandboxes == self.sandboxes.min())
        return next((int(h) for h in fewest if self.images.has(h, image)), int(fewest[0]))

    def create(self, base: float, u: float, image: int = -1, client: int = 0):
        """Quota, then a create-rate token, then the task image on the host (pulled on a miss),
        then the create itself, which fails when the uniform ``u`` falls below the failure
        probability at the host's load.

        Returns ``(host, waited, latency, failed)``; a failed create has released its quota.
        """
        t0 = self.env.now
        if self.quota is not None:
            yield self.quota.get(1)
        delay = self._rate_delay()
        if delay > 0:
            yield self.env.timeout(delay)
        host = self._place(image)
        self.sandboxes[host] += 1
        self.alive += 1
        if self.alive > self.peak_sandboxes:
            self.peak_sandboxes = self.alive
        waited = self.env.now - t0
        pull = self.images.ready(host, image, self.env.now) if image >= 0 and self.images else 0.0
        d = self.dom(host, client)
        fails = u < self.fail["create"](self.load(d) + 1.0)
        if self.defer:
            latency = pull + base
            if fails:
                yield self.env.timeout(latency)
        else:
            if pull:
                yield self.env.timeout(pull)
            latency = pull + (yield from self.op(d, base, "create"))
        if fails:
            yield from self.release(host)
        return host, waited, latency, fails

    def teardown(self, host: int, base: float, lag: float = 0.0, u: float = 1.0, client: int = 0):
        """Wait ``lag`` (deferred work), tear the sandbox down (it fails when the uniform ``u`` falls
        below the failure probability, and is retried once) and release it; returns its time."""
        d = self.dom(host, client)
        p = self.fail["teardown"](self.load(d) + 1.0)
        again = u < p
        if self.defer:
            td = base * (2 if again else 1)
            yield self.env.timeout(lag + td)
        else:
            t0 = self.env.now
            yield from self.op(d, base, "teardown")
            if again:
                yield from self.op(d, base, "teardown")
            td = self.env.now - t0
        yield from self.release(host)
        return td

    def release(self, host: int):
        self.sandboxes[host] -= 1
        self.alive -= 1
        if self.quota is not None:
            yield self.quota.put(1)

    # ------------------------------------------------------------ reuse within a task
    def park(self, task: int, host: int) -> None:
        """Keep a finished sandbox for the next sample of ``task`` (it keeps its slot)."""
        self.parked.setdefault(task, []).append((host, self.env.now))

    def claim_parked(self, task: int) -> int | None:
        """The host of a sandbox parked for ``task`` (the longest waiting), or None."""
        waiting = self.parked.get(task)
        if not waiting:
            return None
        host, since = waiting.pop(0)
        if not waiting:
            del self.parked[task]
        self.parked_seconds += self.env.now - since
        self.reuses += 1
        return host

    def close_parked(self, now: float) -> None:
        """Bill the sandboxes still parked at the end (their tasks' later samples never started)."""
        for waiting in self.parked.values():
            self.parked_seconds += sum(now - since for _, since in waiting)
        self.parked.clear()

    # ------------------------------------------------------------ warm pool
    def start_pool(self, size: int):
        """Keep ``size`` ready sandboxes; each claim triggers a replacement."""
        self.pool = simpy.Store(self.env)
        for _ in range(size):
            self.env.process(self._refill())

    def _refill(self):
        self._refills += 1
        rng = self._refill_rng(self._refills)
        while True:
            t0 = self.env.now
            base = float(self.sub.cold_start.sample(rng, 1)[0])
            host, _, latency, fails = yield from self.create(base, rng.random(), client=self._refills)
            if not fails:
                if self.defer:  # a deferred create returns before its latency has passed
                    yield self.env.timeout(latency)
                break
        self.pool.put((host, t0, self.env.now))

    def claim_warm(self):
        """A ready sandbox from the pool, if one is waiting: ``(host, billed_so_far)`` or None."""
        if self.pool is None or not self.pool.items:
            return None
        host, created, ready = self.pool.items.pop(0)
        self.pool_idle_seconds += self.env.now - ready
        self.env.process(self._refill())
        return host, self.env.now - created

    def close_pool(self, now: float) -> None:
        """Bill the sandboxes still idle in the pool at the end of the run."""
        if self.pool is None:
            return
        for _host, created, ready in self.pool.items:
            self.pool_idle_seconds += now - ready
            self.pool_sandbox_seconds += now - created


class _Sharing:
    """The shared operations in flight in one domain: ``[phase, base seconds left, rate, done]``."""

    def __init__(self, now: float):
        self.ops: list[list] = []
        self.last = now
        self.gen = 0

    def advance(self, now: float) -> None:
        """Progress every operation at its rate since the last change."""
        dt = now - self.last
        if dt > 0:
            for op in self.ops:
                op[1] -= dt * op[2]
        self.last = now
