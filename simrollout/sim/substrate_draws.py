"""A substrate's draws for a chunk of trajectories (exec overhead, lifecycle, first failures) and a
chunk's per-step detail, from the streams ``(seed, r, "substrate", name, ...)`` (see
:mod:`simrollout.sim.workload_draws` for the common random numbers).

A trajectory's exec overhead is one draw per tool call at step fidelity. At trajectory fidelity
nothing reads the calls one by one, so each sum is drawn from its m-fold law
(:mod:`simrollout.distributions.nfold`), but for the trajectories whose per-call detail is kept
when the workload is drawn (``Work.kept``: long enough to near the timeout), which draw their calls.
When a body needs its per-call detail later (it lost its sandbox at a call, or its load made it
near its deadline), its chunk's calls are drawn and each trajectory's are scaled to its sum."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..distributions.nfold import nfold
from ..rng import stream
from ..scenario import Scenario, Substrate
from .workload_draws import CHUNK, Work, _draw_chunk, _sum_by, scaled_to, tool_speeds


@dataclass
class SubstrateDraws:
    """First-attempt lifecycle draws of one substrate for a chunk of trajectories."""

    overhead: np.ndarray  # sum of exec overhead over the trajectory's calls, s (unloaded)
    cold: np.ndarray
    warm: np.ndarray
    teardown: np.ndarray
    u_create: np.ndarray  # uniform: the first create fails when below the failure probability
    u_exec: np.ndarray  # uniform: sets the first failing tool call (see first_failure)
    u_teardown: np.ndarray  # uniform: the first teardown fails when below the failure probability
    call_overhead: np.ndarray | None = None  # per call (step fidelity)
    kept: dict[int, np.ndarray] = field(default_factory=dict)  # per call, of Work.kept's trajectories


def arrival_gaps(scn: Scenario, rep: int, chunk: int, m: int) -> np.ndarray:
    """Poisson inter-arrival gaps of trajectories ``chunk * CHUNK ...`` (``m`` of them), s."""
    return stream(scn.seed, rep, "arrivals", chunk).exponential(1.0 / scn.arrivals.rate, m)


def first_failure(u: float, p: float, calls: int) -> int:
    """1-based index of the first failing call among ``calls`` with per-call probability ``p``,
    from a uniform ``u`` (inverse of the geometric CDF); 0 when none fails."""
    if p <= 0:
        return 0
    if p >= 1:
        return 1 if calls else 0
    k = math.floor(math.log1p(-u) / math.log1p(-p)) + 1
    return k if k <= calls else 0


def fails_within(u: np.ndarray, p: float, calls: np.ndarray) -> np.ndarray:
    """Vectorised :func:`first_failure`: whether each first failing call is among ``calls``."""
    if p <= 0:
        return np.zeros(len(u), dtype=bool)
    if p >= 1:
        return calls > 0
    return np.floor(np.log1p(-u) / math.log1p(-p)) + 1 <= calls


@dataclass
class ChunkDetail:
    """Per-step workload and per-call exec overhead of one chunk, with offsets local to it."""

    step_llm: np.ndarray
    step_calls: np.ndarray
    call_tool: np.ndarray
    call_overhead: np.ndarray
    step_off: np.ndarray  # trajectory j's steps are step_off[j]:step_off[j + 1]
    call_off: np.ndarray

    @classmethod
    def one(cls, step_llm, step_calls, call_tool, call_overhead) -> ChunkDetail:
        """The detail of a single trajectory (index 0)."""
        off = np.array([0, len(step_llm)]), np.array([0, len(call_tool)])
        return cls(step_llm, step_calls, call_tool, call_overhead, *off)

    def _at(self, j: int, s: int) -> tuple[int, int]:
        """Flat indices of trajectory ``j``'s step ``s`` and of that step's first call."""
        a = int(self.step_off[j])
        return a + s, int(self.call_off[j]) + int(self.step_calls[a : a + s].sum())

    def sums(self, j: int, s0: int, s1: int) -> tuple[float, float, float]:
        """Generation, exec overhead and tool time of steps ``s0 <= s < s1`` of trajectory ``j``."""
        (a, c0), (b, c1) = self._at(j, s0), self._at(j, s1)
        return (float(self.step_llm[a:b].sum()), float(self.call_overhead[c0:c1].sum()),
                float(self.call_tool[c0:c1].sum()))  # fmt: skip

    def lost_at(self, j: int, call: int) -> tuple[int, tuple[float, float, float]]:
        """Where losing the sandbox at ``call`` (1-based) stops trajectory ``j``: its whole steps
        before, and the generation, overhead and tool time of its step up to that call."""
        a, b = int(self.step_off[j]), int(self.step_off[j + 1])
        s = int(np.searchsorted(np.cumsum(self.step_calls[a:b]), call - 1, side="right"))
        c0, c1 = self._at(j, s)[1], int(self.call_off[j]) + call - 1
        return s, (float(self.step_llm[a + s]), float(self.call_overhead[c0:c1].sum()),
                   float(self.call_tool[c0:c1].sum()))  # fmt: skip

    def cut(self, j, s0, s1, x_l, x_e, left, skip=False) -> tuple[int, float, float]:
        """Steps ``s0 <= s < s1`` of trajectory ``j`` at multipliers ``x_l`` (generation) and
        ``x_e`` (exec overhead), stopped after ``left`` seconds: the steps they complete and the
        generation and exec-overhead time they spend (a call's overhead runs before its tool).
        ``skip``: step ``s0``'s generation is already done."""
        step, call = self._at(j, s0)
        llm = over = 0.0
        for s in range(s0, s1):
            g = 0.0 if skip and s == s0 else float(self.step_llm[step]) * x_l
            if g >= left:
                return s - s0, llm + left, over
            llm, left = llm + g, left - g
            for _ in range(int(self.step_calls[step])):
                o = float(self.call_overhead[call]) * x_e
                t = o + float(self.call_tool[call])
                if t >= left:
                    return s - s0, llm, over + min(o, left)
                left -= t
                over += o
                call += 1
            step += 1
        return s1 - s0, llm, over


def chunk_detail(
    scn: Scenario, sub: Substrate, rep: int, work: Work, chunk: int, summed: bool = False
) -> ChunkDetail:
    """Redraw one chunk with its per-step detail (the same streams, so the same totals). At
    trajectory fidelity (``summed``) each trajectory's calls are scaled to its drawn sum, and the
    kept trajectories' calls are their own."""
    part = _draw_chunk(scn, rep, True, chunk, tool_speeds(scn, sub))
    over = draw_substrate(scn, sub, rep, work, chunk, detail=True).call_overhead
    tool = part["call_tool"]
    zero = np.zeros(1, dtype=np.int64)
    call_off = np.concatenate([zero, np.cumsum(part["calls"])])
    if summed:
        d = draw_substrate(scn, sub, rep, work, chunk)
        calls, lo = part["calls"], chunk * CHUNK
        over = scaled_to(over, calls, d.overhead)
        tool = scaled_to(tool, calls, work.tool[lo : lo + calls.size])  # its tool sums, drawn at once
        for i, own in d.kept.items():
            over[call_off[i - lo] : call_off[i - lo + 1]] = own
            tool[call_off[i - lo] : call_off[i - lo + 1]] = work.kept[i][2]
    return ChunkDetail(
        part["step_llm"], part["step_calls"], tool, over,
        np.concatenate([zero, np.cumsum(part["steps"])]), call_off,
    )  # fmt: skip


def draw_substrate(
    scn: Scenario, sub: Substrate, rep: int, work: Work, chunk: int, detail: bool = False
) -> SubstrateDraws:
    """One chunk (trajectories ``chunk * CHUNK ...``) of a substrate's first-attempt draws: the
    exec overhead per call with ``detail`` (step fidelity), else each sum drawn at once."""
    lo = chunk * CHUNK
    calls = work.calls[lo : lo + CHUNK]
    m = calls.size
    exec_rng = stream(scn.seed, rep, "substrate", sub.name, "exec", chunk)
    own = sorted(i for i in list(work.kept) if lo <= i < lo + m)  # a snapshot: a thread may be adding
    if detail:
        per_call = sub.exec_overhead.sample(exec_rng, int(calls.sum()))
        overhead = _sum_by(per_call, calls)
        offs = np.concatenate([[0], np.cumsum(calls)])
        kept = {i: per_call[offs[i - lo] : offs[i - lo + 1]].copy() for i in own}
    else:
        per_call = None
        overhead = nfold(sub.exec_overhead).sample(exec_rng, calls)
        if own:  # these keep their calls: drawn one by one from their own stream
            n = calls[np.array(own) - lo]
            rng = stream(scn.seed, rep, "substrate", sub.name, "exec_kept", chunk)
            each = np.split(sub.exec_overhead.sample(rng, int(n.sum())), np.cumsum(n)[:-1])
            kept = dict(zip(own, each))
            overhead[np.array(own) - lo] = [float(x.sum()) for x in each]
        else:
            kept = {}
    rng = stream(scn.seed, rep, "substrate", sub.name, "lifecycle", chunk)
    return SubstrateDraws(
        overhead=overhead,
        cold=sub.cold_start.sample(rng, m),
        warm=sub.warm_start.sample(rng, m),
        teardown=sub.teardown.sample(rng, m),
        u_create=rng.random(m),
        u_exec=rng.random(m),
        u_teardown=rng.random(m),
        call_overhead=per_call,
        kept=kept,
    )
