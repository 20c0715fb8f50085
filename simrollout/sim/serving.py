"""Serving engines in tokens: continuous batching, KV-cache capacity and a prefix cache.

Each engine runs iterations. An iteration serves one output token of every running request whose
prefill is done (a decode) and, first come first served, up to ``max_batch_tokens`` minus the
decodes of prefill tokens of the others (chunked prefill); it lasts the profile's
``base + per_prefill_token x P + per_decode x D + per_context_token x C`` (``C``: the tokens of
context the decodes attend to). The iteration that completes a prefill yields the request's first
token. While the batch does not change, its iterations are summed in closed form (each adds one
token to every decode's context), so an engine costs a few events per request, not one per token;
a request that arrives meanwhile joins at the next iteration boundary. An idle engine starts on
the first request that reaches it (others of the same instant join at the next boundary).

KV cache: a request holds its context plus its output from admission to completion (the model
reserves up front and never preempts). When it completes, its context stays cached for the
trajectory's next turn until evicted, least recently used first, to admit another request; a
request that does not fit waits, first come first served. A turn whose prefix is still cached
prefills only what was appended; after an eviction the whole context is prefilled again.

Routing: ``sticky`` sends a turn to the engine that holds its trajectory's prefix (else the least
loaded); ``least_loaded`` always to the engine with the fewest running and waiting requests. Ties
go to the engine that is home to the fewest running trajectories (whose latest turn it cached).

>>> import simpy
>>> from simrollout.scenario import Inference
>>> env = simpy.Environment()
>>> spec = {"iteration": {"base": 0.01, "per_prefill_token": 0.0001}, "kv_capacity_tokens": 10_000}
>>> tier = ServingTier(env, Inference(engines=1, engine=spec))
>>> req = tier.request(0, context=1000, output=11)
>>> _ = env.run(req.done)
>>> round(req.end, 4)  # one prefill iteration (0.01 + 0.1) then 10 decode iterations of 0.01
0.21
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque

import numpy as np
import simpy

from ..scenario import Engine, Inference
from .waits import first_of


class Request:
    """One LLM turn of trajectory ``traj``: ``context`` tokens in, ``output`` tokens out."""

    __slots__ = ("traj", "arrival", "context", "output", "fresh", "reusable", "reuse", "prefill_left",
                 "decode_left", "ctx", "admitted", "first", "end", "done", "engine", "blocked",
                 "aborted")  # fmt: skip

    def __init__(
        self, env: simpy.Environment, traj: int, context: int, output: int, reusable: int, fresh: bool
    ):
        self.traj, self.context, self.output = traj, max(context, 1), output  # at least one token in
        self.reusable, self.fresh = reusable, fresh  # tokens a cached prefix could serve
        self.arrival = env.now
        self.reuse = self.prefill_left = self.decode_left = self.ctx = 0
        self.admitted = self.first = self.end = math.nan
        self.done = env.event()
        self.engine = -1
        self.blocked = False  # waited for KV-cache space or a running slot
        self.aborted = False  # interrupted at a weight sync (the training loop's partial rollouts)

    @property
    def generated(self) -> int:
        """Output tokens generated so far (the prefill's iteration yields the first)."""
        return 0 if math.isnan(self.first) else self.output - self.decode_left


class ServingEngine:
    """One engine: a SimPy process that runs iterations while it has requests (see module)."""

    def __init__(
        self, env: simpy.Environment, spec: Engine, prefix_cache: bool, tier: ServingTier, index: int
    ):
        self.env, self.spec, self.tier, self.index = env, spec, tier, index
        self.it = spec.iteration
        self.prefix_cache = prefix_cache
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.cache: OrderedDict[int, int] = OrderedDict()  # idle prefixes, least recently used first
        self.cached = 0  # tokens in idle prefixes
        self.held = 0  # tokens held by running requests
        self.busy = 0.0  # seconds spent in iterations
        self.iterations = 0  # iterations run (a closed-form run of decodes counts each)
        self.aborts = 0  # requests aborted on this engine, ever
        self._wake = env.event()
        self._t = 0.0  # KV occupancy integrals since the last change
        self.area_held = self.area_used = 0.0
        self.peak_used = 0
        env.process(self._run())

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    def holds(self, traj: int) -> bool:
        return traj in self.cache

    # ------------------------------------------------------------ requests in and out
    def submit(self, req: Request) -> None:
        self.waiting.append(req)
        self._trace()
        if not self._wake.triggered:
            self._wake.succeed()

    def cancel(self, req: Request) -> None:
        """A trajectory stopped (timeout, cancellation): its request leaves, its tokens are freed."""
        if req in self.waiting:
            self.waiting.remove(req)
        elif req in self.running:
            self._mark()
            self.running.remove(req)
            self.held -= req.context + req.output
            req.engine = -1  # an iteration in progress leaves it alone
            if not self._wake.triggered:  # freed tokens may admit a waiting request
                self._wake.succeed()

    def abort(self, req: Request) -> None:
        """Interrupt ``req`` (a weight sync): a waiting one leaves at once, a running one at the
        end of the iteration in progress, its tokens freed and nothing cached (the KV was
        computed with the old weights); ``req.done`` fires with ``req.aborted`` set."""
        req.aborted = True
        self.aborts += 1
        if req in self.waiting:
            self.waiting.remove(req)
            req.end = self.env.now
            req.done.succeed(req)
        elif not self._wake.triggered:  # a run of decodes stops at the next iteration boundary
            self._wake.succeed()

    def _reap(self) -> None:
        """After an iteration: the running requests aborted meanwhile leave."""
        if not self.aborts:  # none ever (only the training loop's weight syncs abort)
            return
        for req in [r for r in self.running if r.aborted]:
            self._mark()
            self.running.remove(req)
            self.held -= req.context + req.output
            req.end = self.env.now
            self.tier.decode_tokens += max(req.generated - 1, 0)  # its tokens out are kept
            self._trace()
            req.done.succeed(req)

    def clear_cache(self) -> None:
        """Drop every idle prefix (new weights: nothing cached serves them)."""
        self._mark()
        self.cache.clear()
        self.cached = 0

    def _trace(self) -> None:
        if self.tier.trace is not None:
            self.tier.trace.append((self.env.now, self.index, self.load))

    def _mark(self) -> None:
        """Accumulate KV occupancy up to now (call before every change of held or cached)."""
        dt = self.env.now - self._t
        self.area_held += self.held * dt
        self.area_used += (self.held + self.cached) * dt
        self._t = self.env.now

    def _drop(self, traj: int) -> None:
        self.cached -= self.cache.pop(traj)

    def _admit(self, limit: int | None = None) -> None:
        """Admit waiting requests in order while they fit (at most ``limit``), evicting idle
        prefixes LRU."""
        cap, start = self.spec.kv_capacity_tokens, len(self.running)
        while self.waiting and (limit is None or len(self.running) - start < limit):
            if len(self.running) >= self.spec.max_running:
                return self._block()
            req = self.waiting[0]
            own = self.cache.get(req.traj, 0)
            # a cached prefix serves all but the last token, which is computed again for its logits
            reuse = 0 if (req.fresh or not self.prefix_cache) else min(own, req.context - 1)
            hold = req.context + req.output
            if hold > cap - self.held:  # not even with every idle prefix evicted
                return self._block()  # waits for running requests to finish
            self._mark()
            if own:  # the trajectory's own prefix becomes part of what it holds
                self._drop(req.traj)
            while hold > cap - self.held - self.cached:  # evict idle prefixes, least recent first
                _, tokens = self.cache.popitem(last=False)
                self.cached -= tokens
                self.tier.evicted += 1
            self.waiting.popleft()
            self.held += hold
            self.peak_used = max(self.peak_used, self.held + self.cached)
            req.reuse, req.prefill_left = reuse, req.context - reuse
            req.admitted = self.env.now
            self.running.append(req)
            self.tier.admitted(req)

    def _block(self) -> None:
        """The head of the queue does not fit: it and everything behind it wait for KV space."""
        for r in self.waiting:
            r.blocked = True

    def _finish(self, req: Request) -> None:
        self._mark()
        self.running.remove(req)
        self.held -= req.context + req.output
        if self.prefix_cache:
            if req.traj in self.cache:
                self._drop(req.traj)
            self.cache[req.traj] = req.ctx
            self.cached += req.ctx
            self.tier.rehome(req.traj, self.index)
        req.end = self.env.now
        self._trace()
        self.tier.finished(req)
        req.done.succeed(req)

    # ------------------------------------------------------------ iterations
    def _run(self):
        env, it = self.env, self.it
        woke = True  # idle at the start
        while True:
            # an idle engine starts on the first request that reaches it: requests of the same
            # instant join at the next iteration boundary (a real server wakes on the first)
            self._admit(1 if woke else None)
            woke = False
            if not self.running:
                self._wake = env.event()
                if self.waiting:
                    raise RuntimeError("a waiting request can never fit this engine's KV cache")
                yield self._wake
                woke = True
                continue
            decodes = [r for r in self.running if r.prefill_left == 0]
            prefills = [r for r in self.running if r.prefill_left > 0]
            d, ctx = len(decodes), sum([r.ctx for r in decodes])
            if prefills:  # one iteration with a chunk of prefill
                budget, alloc, pairs, cached = max(self.spec.max_batch_tokens - d, 0), [], 0.0, 0.0
                for r in prefills:
                    take = min(r.prefill_left, budget)
                    if take <= 0:
                        break
                    alloc.append((r, take))
                    budget -= take
                    pairs += take * (r.context - r.prefill_left + take / 2)  # causal attention
                    cached += it.cached_pairs(take, r.reuse)  # of which with the cached prefix
                dt = it(sum(t for _, t in alloc), d, ctx, pairs, cached)
                yield env.timeout(dt)
                self._step(decodes, 1, dt)
                for r, take in alloc:
                    if r.engine < 0:
                        continue
                    r.prefill_left -= take
                    if r.prefill_left == 0:  # the prefill's iteration yields the first token
                        r.first, r.ctx, r.decode_left = env.now, r.context + 1, r.output - 1
                        if r.decode_left == 0:
                            self._finish(r)
                self._reap()
                continue
            # decode only: k iterations until the first decode completes, in closed form
            k = min(r.decode_left for r in decodes)
            t0, slope = it(0, d, ctx), it.per_context_token * d
            start = env.now
            self._wake = env.event()
            run = _run_time(k, t0, slope)
            yield first_of(env, env.timeout(run), self._wake)
            done = k
            if env.now < start + run:  # a request came: stop at the next boundary
                done = min(_iterations_by(env.now - start, t0, slope) + 1, k)
                yield env.timeout(max(start + _run_time(done, t0, slope) - env.now, 0.0))
            self._step(decodes, done, env.now - start)
            self._reap()

    def _step(self, decodes: list[Request], n: int, seconds: float) -> None:
        """``n`` iterations lasting ``seconds`` in all: every decode gains ``n`` tokens."""
        self.busy += seconds
        self.iterations += n
        for r in decodes:
            if r.engine < 0:  # cancelled meanwhile
                continue
            r.decode_left -= n
            r.ctx += n
            if r.decode_left == 0:
                self._finish(r)


def _run_time(m: int, t0: float, slope: float) -> float:
    """Seconds of ``m`` decode iterations, the first lasting ``t0``, each next ``slope`` longer."""
    return m * t0 + slope * m * (m - 1) / 2


def _iterations_by(elapsed: float, t0: float, slope: float) -> int:
    """Whole iterations completed ``elapsed`` seconds into a run of them (``m t0 + slope m(m-1)/2``)."""
    a, b = slope / 2, t0 - slope / 2
    m = int(elapsed / t0) if a <= 0 else int((-b + math.sqrt(b * b + 4 * a * elapsed)) / (2 * a))
    while m > 0 and _run_time(m, t0, slope) > elapsed:
        m -= 1
    return m


class ServingTier:
    """``engines`` serving engines with routing, and the metrics of every request."""

    def __init__(self, env: simpy.Environment, spec: Inference):
        self.env, self.spec = env, spec
        self.engines = [
            ServingEngine(env, spec.engine, spec.prefix_cache, self, k) for k in range(spec.engines)
        ]
        self.sticky = spec.routing == "sticky"
        self.home: dict[int, int] = {}  # trajectory -> the engine that cached its latest turn
        self.homed = [0] * spec.engines  # running trajectories whose latest turn each engine cached
        self.trace: list | None = None  # (time, engine, requests on it) when a timeline is asked for
        self.requests = self.queued = self.evicted = self.compacted = 0
        self.prefill_tokens = self.decode_tokens = 0
        self.reusable_tokens = self.reused_tokens = self.reprefilled_tokens = 0
        self.reprefill_seconds = 0.0  # engine seconds spent prefilling them again
        self.ttft: list[float] = []
        self.tpot: list[float] = []
        self.kv_wait: list[float] = []
        self.latency: list[float] = []  # request to last token, with the per-request overhead

    def request(
        self, traj: int, context: int, output: int, reusable: int = 0, fresh: bool = False
    ) -> Request:
        """Send a turn to an engine; ``req.done`` fires when its last token is out. ``reusable``:
        tokens of the context a cached prefix from the trajectory's previous turn could serve."""
        req = Request(self.env, traj, context, output, reusable, fresh)
        engines = self.engines
        e = self.home.get(traj) if self.sticky else None
        if e is None or not engines[e].holds(traj):  # (sticky: only that engine can hold it)
            homed = self.homed
            e = min(range(len(engines)), key=lambda k: (engines[k].load, homed[k]))
        req.engine = e
        engines[e].submit(req)
        return req

    def rehome(self, traj: int, engine: int) -> None:
        old = self.home.get(traj)
        if old is not None:
            self.homed[old] -= 1
        self.home[traj] = engine
        self.homed[engine] += 1

    def close(self, traj: int) -> None:
        """Trajectory ``traj`` ended: it no longer counts where its prefix is (its blocks stay
        cached until evicted)."""
        old = self.home.pop(traj, None)
        if old is not None:
            self.homed[old] -= 1

    def cancel(self, req: Request) -> None:
        if req.engine >= 0 and not req.done.triggered:
            self.engines[req.engine].cancel(req)

    def abort(self, req: Request) -> None:
        """Interrupt a request at a weight sync (:meth:`ServingEngine.abort`)."""
        if req.engine >= 0 and not req.done.triggered and not req.aborted:
            self.engines[req.engine].abort(req)

    def clear_prefix_cache(self) -> None:
        """New weights: every engine's cached prefixes are dropped (vLLM and SGLang reset the
        prefix cache on a weight update), so each trajectory's next turn prefills it again."""
        for e in self.engines:
            e.clear_cache()

    # ------------------------------------------------------------ metrics
    def admitted(self, req: Request) -> None:
        self.requests += 1
        self.kv_wait.append(req.admitted - req.arrival)
        self.queued += req.blocked
        self.compacted += req.fresh
        self.prefill_tokens += req.prefill_left
        if req.reusable and not req.fresh:
            self.reusable_tokens += req.reusable
            self.reused_tokens += min(req.reuse, req.reusable)
            lost = max(req.reusable - req.reuse, 0)
            self.reprefilled_tokens += lost
            self.reprefill_seconds += self.spec.engine.iteration.prefill_seconds(lost, req.reuse)

    def finished(self, req: Request) -> None:
        self.decode_tokens += req.output - 1
        self.latency.append(req.end - req.arrival + self.spec.engine.overhead)
        self.ttft.append(req.first - req.arrival + self.spec.engine.overhead)
        if req.output > 1:
            self.tpot.append((req.end - req.first) / (req.output - 1))

    @property
    def busy_seconds(self) -> float:
        return sum(e.busy for e in self.engines)

    @property
    def utilised_seconds(self) -> float:
        """Engine-seconds at full use: the KV cache held by running requests, integrated over
        time, in units of one engine's cache (an engine running one short request is mostly idle)."""
        for e in self.engines:
            e._mark()
        return sum(e.area_held for e in self.engines) / self.spec.engine.kv_capacity_tokens

    def report(self, store, out: dict) -> None:
        """Its metrics in a cell's summary (a :class:`~.metrics.MetricsStore` part)."""
        out.update(self.summary(store.acc.end))

    def summary(self, makespan: float) -> dict[str, float]:
        """Per-run engine metrics (docs/model.md, "Serving engines")."""
        nan = float("nan")
        spec, engines = self.spec.engine, self.engines
        for e in engines:
            e._mark()
        cap = spec.kv_capacity_tokens * len(engines)
        busy = self.busy_seconds

        def pct(x: list[float], q: float) -> float:
            return float(np.percentile(x, q)) if x else nan

        return {
            "engine_busy_fraction": busy / (len(engines) * makespan) if makespan else nan,
            "engine_tokens_per_busy_second": (self.prefill_tokens + self.decode_tokens) / busy
            if busy
            else nan,
            "llm_requests": self.requests,
            "kv_queued_fraction": self.queued / self.requests if self.requests else nan,
            "admission_wait_p50": pct(self.kv_wait, 50),
            "admission_wait_p99": pct(self.kv_wait, 99),
            "kv_held_mean": sum(e.area_held for e in engines) / (cap * makespan) if makespan else nan,
            "kv_used_mean": sum(e.area_used for e in engines) / (cap * makespan) if makespan else nan,
            "kv_used_peak": max(e.peak_used for e in engines) / spec.kv_capacity_tokens,
            "prefix_hit_rate": self.reused_tokens / self.reusable_tokens if self.reusable_tokens else nan,
            "prefix_evictions": self.evicted,
            "compactions": self.compacted,
            "reprefilled_tokens": self.reprefilled_tokens,
            "reprefill_gpu_hours": self.reprefill_seconds * spec.gpus / 3600,
            "prefill_tokens": self.prefill_tokens,
            "output_tokens": self.decode_tokens + self.requests,
            "llm_request_p50": pct(self.latency, 50),
            "llm_request_p99": pct(self.latency, 99),
            "ttft_p50": pct(self.ttft, 50),
            "ttft_p99": pct(self.ttft, 99),
            "tpot_p50": pct(self.tpot, 50),
            "tpot_p99": pct(self.tpot, 99),
        }
