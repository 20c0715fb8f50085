"""The serving pilot with its bodies and engines compiled: the same run as the SimPy step engine's,
for about a twentieth of its time.

A pilot (:mod:`.pilot_run`) runs a sliced scenario at step fidelity. Nearly all its events are the
bodies' waits and the engines' iterations; the sandbox lifecycle around each body (quota, create,
teardown, failures, retries) is a few events a trajectory. So the lifecycle stays in SimPy and
each body runs compiled (:mod:`.pilot_bodies`, :mod:`.pilot_serving`): SimPy hands a body over as
it starts, the compiled events before SimPy's next event run, and a body's end hands it back at
that instant. Both sides share the fleet's counts of operations in flight (a body's execs load the
creates it contends with, and the other way round). The two transcriptions compute every time the
same way, so the pilot's numbers equal the SimPy pilot's (tests/sim/test_pilot_compiled.py).

:func:`gaps` says what keeps a pilot on SimPy: a shared contention domain (its operations re-read
their rate at every change of load), a measured exec contention curve (the compiled side takes a
slope), more than one chunk of trajectories."""

from __future__ import annotations

import math

import numpy as np

from .pilot_state import *  # the state's names
from .records import BodyResult
from .workload_draws import CHUNK

FIELDS = ("step_off", "step_calls", "step_append", "step_output", "step_llm", "call_tool", "call_off",
          "prompt", "setup", "reward")  # fmt: skip


def gaps(cell) -> str | None:
    """Why this pilot cell's bodies cannot run compiled, or None."""
    fleet, scn = cell.fleet, cell.scn
    if fleet.shared:
        return "operations share their contention domain"
    if isinstance(scn.substrates[0].contention.exec, dict):
        return "a measured exec contention curve"
    if scn.training is not None or cell.trace is not None:
        return "a training loop or a timeline"
    if cell.work.n > CHUNK or cell.work.step_output is None:
        return "more than one chunk of trajectories, or no token workload"
    return None


def attach(cell) -> CoSim:
    """Run ``cell``'s bodies and serving engines compiled (``gaps(cell)`` is None)."""
    co = CoSim(cell)
    old = cell.tier
    cell.tier = co.tier
    cell.metrics.reports = [co.tier.report if f == old.report else f for f in cell.metrics.reports]
    cell.cosim = co
    return co


def engine_params(scn) -> np.ndarray:
    """The engines' and the token workload's parameters (``P_*``) of scenario ``scn``."""
    inf, tok = scn.cluster.inference, scn.workload.tokens
    spec, it = inf.engine, inf.engine.iteration
    P = np.zeros(NP)
    P[[P_BASE, P_PPT, P_PPA, P_PD, P_PCT]] = it.base, it.per_prefill_token, it.per_prefill_attention, \
        it.per_decode, it.per_context_token  # fmt: skip
    if it.per_cached_attention is not None:
        P[P_PCA], P[P_HAS_PCA] = it.per_cached_attention, 1.0
    P[P_BELOW] = it.cached_attention_below or 0
    P[P_KV], P[P_MAX_RUN], P[P_MAX_BATCH] = spec.kv_capacity_tokens, spec.max_running, spec.max_batch_tokens
    P[P_OVERHEAD], P[P_MAX_CTX], P[P_MAX_TOK] = spec.overhead, tok.max_context or 0, tok.max_tokens or 0
    P[P_STICKY], P[P_PREFIX] = inf.routing == "sticky", inf.prefix_cache
    return P


def work_arrays(w, cover: np.ndarray) -> tuple:
    """The workload's per-step detail (``FIELDS``, then the calls' exec overheads ``cover``)."""
    floats = ("step_llm", "call_tool", "setup", "reward")
    return (*(np.ascontiguousarray(getattr(w, f), dtype=np.float64 if f in floats else np.int64)
              for f in FIELDS), cover)  # fmt: skip


def build_state(P, E, n, nr, qc, heap, work, domains, metrics, loop) -> tuple:
    """The compiled serving state ``S`` (:mod:`.pilot_state`): ``E`` engines, ``n`` bodies, ``nr``
    request ids, engine queues of ``qc``, a heap of ``heap``, the per-step detail ``work``, the
    fleet's arrays per domain ``domains``, ``metrics`` requests' figures; ``loop``: a training
    loop's arrays (S_LLI to S_WORKER), else one-element ones."""
    GI = np.zeros(NJ, dtype=np.int64)
    EI = np.zeros((E, NEI), dtype=np.int64)
    EI[:, E_HEAD] = EI[:, E_TAIL] = -1
    i1 = np.zeros(1, dtype=np.int64)
    if loop is None:
        loop = (i1, np.zeros((1, 5), dtype=np.int64), np.zeros(2), np.ones(1), i1, i1, i1)
    tl = np.zeros((metrics if P[P_LOOP] == 0.0 else 1, 4))
    return (
        np.zeros(4), GI, P,
        np.zeros(heap), np.zeros(heap, dtype=np.int64), np.zeros(heap, dtype=np.int64),
        np.zeros(heap, dtype=np.int64),
        EI, np.zeros((E, NEF)),
        *(np.zeros((E, qc), dtype=np.int64) for _ in range(5)),
        np.full((E, n), -1, dtype=np.int64), np.full((E, n), -1, dtype=np.int64),
        np.zeros((E, n), dtype=np.int64),
        np.full(n, -1, dtype=np.int64), np.zeros(E, dtype=np.int64),
        np.zeros((nr, NRI), dtype=np.int64), np.zeros((nr, NRF)),
        np.zeros((n, NBI), dtype=np.int64), np.zeros((n, NBF)),
        *work,
        *domains,
        np.zeros(metrics), np.zeros(metrics), np.zeros(metrics), np.zeros(metrics), tl,
        *loop,
    )  # fmt: skip


class CoSim:
    """The compiled side of a pilot cell: its state, the bodies' handover and the run's loop."""

    def __init__(self, cell):
        self.cell, self.env = cell, cell.env
        scn, w, fleet = cell.scn, cell.work, cell.fleet
        inf = scn.cluster.inference
        n, E = w.n, inf.engines
        # the fleet's counts become arrays both sides change in place
        fleet.ops = np.array(fleet.ops, dtype=np.int64)
        fleet.by_phase = {ph: np.array(v, dtype=np.int64) for ph, v in fleet.by_phase.items()}
        fleet.exec_load = np.array(fleet.exec_load, dtype=np.float64)
        P = engine_params(scn)
        c = scn.substrates[0].contention
        P[P_SLOPE] = float(c.exec)
        if fleet._w is not None:
            P[P_WEIGHTED] = 1.0
            P[P_WC], P[P_WE], P[P_WT] = fleet._w["exec"]
        P[P_BG], P[P_N] = fleet.bg, n
        steps = int(np.asarray(w.steps).sum())
        nr = steps * (1 + scn.policy.retries) + 1
        work = work_arrays(w, np.zeros(1))  # the chunk's call overheads, set when its first body starts
        domains = (fleet.ops, fleet.by_phase["create"], fleet.by_phase["exec"], fleet.by_phase["teardown"],
                   fleet.exec_load)  # fmt: skip
        self.S = build_state(P, E, n, nr, n + 1, 8 * n + 64 * E + 1024, work, domains, nr, None)
        self.waiting: dict[int, tuple] = {}  # body -> (its SimPy event, its start)
        self._cover = False
        self.tier = CompiledTier(self)

    # ------------------------------------------------------------ the body, as SimPy sees it
    def body(self, i: int, dom: int, deadline: float, fail_call: int, t_begin: float):
        """A generator in place of ``StepBody._body_steps``: the body runs compiled."""
        from .pilot_bodies import start_body

        st = self.cell.chunks[0]
        if not self._cover:  # the chunk's call overheads, drawn when it was loaded
            self._cover = True
            cover = np.ascontiguousarray(st.draws.call_overhead, dtype=np.float64)
            self.S = self.S[:S_COVER] + (cover,) + self.S[S_COVER + 1 :]
        first = int(self.cell.work.call_off[st.lo])
        if start_body(self.S, i, dom, deadline, fail_call, first, self.env.now):
            return self._result(i, t_begin)
        event = self.env.event()
        self.waiting[i] = (event, t_begin)
        return (yield event)

    def _result(self, i: int, t_begin: float) -> BodyResult:
        TI, TF = self.S[S_TI], self.S[S_TF]
        return BodyResult(int(TI[i, B_STATUS]), float(TF[i, BF_LLM]), int(TI[i, B_STEPS]),
                          self.env.now - t_begin, float(TF[i, BF_OVER]))  # fmt: skip

    # ------------------------------------------------------------ the run
    def run(self, main) -> None:
        """``env.run(until=main)``, the compiled events taking their turns with SimPy's."""
        from .pilot_bodies import advance

        env = self.env
        while not main.processed:
            before = env.peek()
            got = advance(self.S, before, -1)
            if got == 1:
                i = int(self.S[S_GI][J_ENDED])
                env._now = float(self.S[S_GF][G_NOW])
                event, t_begin = self.waiting.pop(i)
                event.succeed(self._result(i, t_begin))
            elif got == 2:
                self._grow_heap()
            elif got < 0:
                if self.S[S_GI][J_ERR] == 2:
                    raise RuntimeError("the compiled pilot made more requests than its arrays hold")
                raise RuntimeError("a waiting request can never fit this engine's KV cache")
            elif math.isinf(before):
                raise RuntimeError("the pilot's events ran out before its trajectories did")
            else:
                env.step()

    def _grow_heap(self) -> None:
        S, size = self.S, self.S[S_HT].size
        grown = tuple(np.concatenate([S[k], np.zeros(size, S[k].dtype)]) for k in (S_HT, S_HS, S_HW, S_HK))
        self.S = S[:S_HT] + grown + S[S_HK + 1 :]

    def turn_log(self) -> np.ndarray:
        return self.S[S_TL][: self.S[S_GI][J_NTL]]


class CompiledTier:
    """The pilot cell's ``tier``: what :class:`.serving.ServingTier` reports, read off the
    compiled engines."""

    trace = None

    def __init__(self, co: CoSim):
        self.co = co
        self.spec = co.cell.scn.cluster.inference

    @property
    def busy_seconds(self) -> float:
        return sum(self.co.S[S_EF][:, EF_BUSY].tolist())

    @property
    def utilised_seconds(self) -> float:
        """``ServingTier.utilised_seconds``: the KV cache held by running requests, integrated."""
        from .pilot_bodies import mark_all

        S = self.co.S
        mark_all(S, self.co.env.now)
        return sum(S[S_EF][:, EF_AH].tolist()) / self.spec.engine.kv_capacity_tokens

    @property
    def requests(self) -> int:
        return int(self.co.S[S_GI][J_REQUESTS])

    def report(self, store, out: dict) -> None:
        out.update(self.summary(store.acc.end))

    def summary(self, makespan: float) -> dict[str, float]:
        """``ServingTier.summary``, the same figures."""
        from .pilot_bodies import mark_all

        S = self.co.S
        mark_all(S, self.co.env.now)
        GI, EI, EF = S[S_GI], S[S_EI], S[S_EF]
        nan = float("nan")
        spec = self.spec.engine
        engines = EI.shape[0]
        cap = spec.kv_capacity_tokens * engines
        busy = self.busy_seconds
        requests = int(GI[J_REQUESTS])
        reusable = int(GI[J_REUSABLE])

        def pct(x: np.ndarray, q: float) -> float:
            return float(np.percentile(x, q)) if x.size else nan

        kvw, lat = S[S_KVW][:requests], S[S_LAT][: GI[J_NFIN]]
        ttft, tpot = S[S_TTFT][: GI[J_NFIN]], S[S_TPOT][: GI[J_NTPOT]]
        held, used = sum(EF[:, EF_AH].tolist()), sum(EF[:, EF_AU].tolist())
        tokens = int(GI[J_PREFILL]) + int(GI[J_DECODE])
        return {
            "engine_busy_fraction": busy / (engines * makespan) if makespan else nan,
            "engine_tokens_per_busy_second": tokens / busy if busy else nan,
            "llm_requests": requests,
            "kv_queued_fraction": int(GI[J_QUEUED]) / requests if requests else nan,
            "admission_wait_p50": pct(kvw, 50),
            "admission_wait_p99": pct(kvw, 99),
            "kv_held_mean": held / (cap * makespan) if makespan else nan,
            "kv_used_mean": used / (cap * makespan) if makespan else nan,
            "kv_used_peak": int(EI[:, E_PEAK].max()) / spec.kv_capacity_tokens,
            "prefix_hit_rate": int(GI[J_REUSED]) / reusable if reusable else nan,
            "prefix_evictions": int(GI[J_EVICTED]),
            "compactions": int(GI[J_COMPACTED]),
            "reprefilled_tokens": int(GI[J_REPREFILLED]),
            "reprefill_gpu_hours": float(S[S_GF][G_REPREFILL_S]) * spec.gpus / 3600,
            "prefill_tokens": int(GI[J_PREFILL]),
            "output_tokens": int(GI[J_DECODE]) + requests,
            "llm_request_p50": pct(lat, 50),
            "llm_request_p99": pct(lat, 99),
            "ttft_p50": pct(ttft, 50),
            "ttft_p99": pct(ttft, 99),
            "tpot_p50": pct(tpot, 50),
            "tpot_p99": pct(tpot, 99),
        }
