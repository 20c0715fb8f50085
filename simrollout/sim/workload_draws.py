"""Per-trajectory work, drawn in vectorized chunks (never a Python loop per step).

Common random numbers: trajectory ``i`` of replication ``r`` always draws its workload from the
stream ``(seed, r, "workload", i // CHUNK)``, so it is the same on every substrate, every
concurrency level, in both fidelities and in any process. Substrate draws (exec overhead per call,
cold start, teardown, first failures) come from ``(seed, r, "substrate", name, ...)``.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import threading
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from ..distributions import Capped, Component, Mixture, Scaled
from ..distributions.nfold import nfold
from ..rng import stream
from ..scenario import Scenario, Substrate, Tool
from . import reserved
from .route import resolved_engine, resolved_fidelity
from .token_draws import _counts, _tokens, constant_count, drawn_turn_sums, unloaded_turns

CHUNK = 32_768
LEAD = 8  # chunks a workload drawn in the background runs ahead of its reader
KEEP = 0.5  # keep the per-step detail of bodies longer unloaded than this share of the timeout
# a token workload's generation is its unloaded time times the engines' load, not known when the
# work is drawn: keep detail as if the load made it this many times longer (else a body near its
# deadline redraws its chunk)
TOKEN_LOAD = 3.0
_NO_TOOL = Tool(weight=1.0, latency=0.0)  # a workload without tools draws no call


@dataclass
class Work:
    """Workload of all trajectories; per-step detail only when ``detail`` was asked for."""

    steps: np.ndarray  # int, per trajectory
    calls: np.ndarray  # int, tool calls per trajectory
    llm: np.ndarray  # sum of unloaded generation time per trajectory, s
    tool: np.ndarray  # sum of tool latency per trajectory, s
    setup: np.ndarray
    reward: np.ndarray
    # per-step detail (step fidelity): flat arrays with offsets per trajectory
    step_llm: np.ndarray | None = None
    step_calls: np.ndarray | None = None
    call_tool: np.ndarray | None = None
    step_off: np.ndarray | None = field(default=None)
    call_off: np.ndarray | None = field(default=None)
    # per-step detail of the trajectories long enough to near the timeout (trajectory fidelity
    # cuts them exactly): index -> (step_llm, step_calls, call_tool)
    kept: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    # token workload (step fidelity): prompt per trajectory, appended and output tokens per step
    prompt: np.ndarray | None = None
    step_append: np.ndarray | None = None
    step_output: np.ndarray | None = None

    # a workload still being drawn (``draw_work(..., background=True)``): its chunks as they fill
    filling: Filling | None = field(default=None, repr=False)
    # drawn for one streamed cell: the pages of the chunks it folded are handed back (``spent``)
    single: bool = False
    spent: bool = False

    @property
    def n(self) -> int:
        return len(self.steps)

    def wait(self, c: int) -> None:
        """Block until chunk ``c`` is in the arrays (at once for a workload drawn whole)."""
        if self.filling is not None:
            self.filling.wait(c)

    def release(self, lo: int, hi: int) -> None:
        """Trajectories ``lo:hi`` (and all before) are done with: a workload drawn for one cell
        hands back their pages and drops their kept detail."""
        if not self.single:
            return
        self.spent = True
        for k in ("steps", "calls", "llm", "tool", "setup", "reward"):
            reserved.release(getattr(self, k), lo, hi)
        for i in [i for i in self.kept if i < hi]:  # only the few bodies near their deadline
            del self.kept[i]


class Filling:
    """How far a thread has filled a workload's arrays with chunks drawn in the background."""

    def __init__(self, total: int) -> None:
        self.total = total  # chunks
        self.done = 0  # chunks filled, in order
        self.asked = 0  # the latest chunk its reader waited for
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None  # the one filling them
        self._cond = threading.Condition()

    @property
    def complete(self) -> bool:
        return self.done == self.total

    def filled(self, c: int) -> None:
        with self._cond:
            self.done = c + 1
            self._cond.notify_all()

    def failed(self, exc: BaseException) -> None:
        with self._cond:
            self.error = exc
            self._cond.notify_all()

    def room(self, c: int) -> None:
        """Block while chunk ``c`` is more than :data:`LEAD` chunks ahead of the reader."""
        with self._cond:
            while c - self.asked > LEAD and self.error is None:  # (stopped: on, to fail fast)
                self._cond.wait()

    def wait(self, c: int) -> None:
        with self._cond:
            self.asked = max(self.asked, c)
            self._cond.notify_all()
            while self.done <= c and self.error is None:
                self._cond.wait()
            if self.done <= c:
                raise self.error


def tool_mixture(scn: Scenario) -> Mixture:
    tools = scn.workload.tools.values() or [_NO_TOOL]
    return Mixture(components=[Component(weight=t.weight, dist=t.latency) for t in tools])


def call_law(scn: Scenario, speed: np.ndarray | None) -> Mixture | Capped:
    """The law of one tool call's latency: the tools' mixture, each tool's latency times the
    substrate's speed factor for it, cut at the tool timeout."""
    tools = list(scn.workload.tools.values()) or [_NO_TOOL]
    comps = [Component(weight=t.weight, dist=t.latency if speed is None or speed[k] == 1.0
                       else Scaled(factor=float(speed[k]), dist=t.latency))
             for k, t in enumerate(tools)]  # fmt: skip
    law = Mixture(components=comps)
    return Capped(cap=scn.workload.tool_timeout, dist=law) if scn.workload.tool_timeout else law


def sums_at_once(scn: Scenario, step: bool) -> bool:
    """Whether a cell's trajectories draw their exec overhead and tool latency sums at once, from
    their m-fold laws (:mod:`simrollout.distributions.nfold`): where nothing reads their calls
    one by one (not the step engine, nor the training loop's bodies, nor the fidelity matrix's
    per-call comparisons)."""
    return not (step or scn.training or scn._overhead_per_call)


def tool_sums_at_once(scn: Scenario, step: bool) -> bool:
    """Whether a cell's tool latency sums are drawn at once (as its exec overhead sums, unless
    the tools are asked for call by call)."""
    return sums_at_once(scn, step) and not scn._tools_per_call


def _calls(scn: Scenario, rng: np.random.Generator, n: int, speed: np.ndarray | None) -> np.ndarray:
    """``n`` tool calls' latencies, one by one."""
    return _as_run(scn, *tool_mixture(scn).sample_which(rng, n), speed)


def _as_run(scn: Scenario, call_tool: np.ndarray, which: np.ndarray, speed: np.ndarray | None) -> np.ndarray:
    """Calls' latencies (each of tool or category ``which``) as this substrate and harness run them."""
    if speed is not None:  # this substrate runs each category's commands faster or slower
        call_tool = call_tool * speed[which]
    if scn.workload.tool_timeout:  # the harness cuts a tool call here and returns an error to the agent
        call_tool = np.minimum(call_tool, scn.workload.tool_timeout)
    return call_tool


def scaled_to(values: np.ndarray, counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """``values`` (consecutive runs of the given lengths) scaled so each run adds up to its sum."""
    have = _sum_by(values, counts)
    return values * np.repeat(np.divide(sums, have, out=np.ones_like(have), where=have > 0), counts)


def _sum_by(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sum consecutive runs of ``values`` of the given lengths (lengths may be zero), in float64."""
    if not values.size:
        return np.zeros(len(counts))
    starts = np.cumsum(counts) - counts
    some = counts > 0
    if some.all():
        return np.add.reduceat(values, starts, dtype=np.float64)
    out = np.zeros(len(counts))
    out[some] = np.add.reduceat(values, starts[some], dtype=np.float64)  # the runs cover ``values``
    return out


def tool_speeds(scn: Scenario, sub: Substrate | None) -> np.ndarray | None:
    """The substrate's tool speed factor per tool (or, replaying, per trace category); None
    when every factor is 1."""
    if sub is None or not sub.tool_speed:
        return None
    wl = scn.workload
    if wl.replay is not None:
        from ..traces.replay import load

        return sub.speed_of(list(load(wl.replay).categories))
    return sub.speed_of([t.category or name for name, t in wl.tools.items()])


def _replayed(scn: Scenario, rep: int, c: int, m: int, rng) -> dict[str, np.ndarray]:
    """A chunk's per-step arrays from the trace (:mod:`simrollout.traces.replay`); fields set
    beside ``replay`` (``draw``) are drawn from ``rng`` instead."""
    from ..traces.replay import gather, load, pick

    wl, rp = scn.workload, scn.workload.replay
    data = load(rp)
    part = gather(data, pick(rp, data, scn.seed, rep, c, c * CHUNK, m), wl.max_turns)
    if "llm_time" in rp.draw:
        part["step_llm"] = wl.llm_time.sample(rng, int(part["steps"].sum()))
    for f in ("setup", "reward"):
        if f in rp.draw:
            part[f] = getattr(wl, f).sample(rng, m)
    return part


def _draw_chunk(
    scn: Scenario, rep: int, detail: bool, c: int, speed: np.ndarray | None = None, summed: bool = False
) -> dict[str, np.ndarray]:
    """Workload of trajectories ``c * CHUNK ...`` from the chunk's own stream (or, replaying a
    trace, the trace's trajectories); ``speed``: tool latency factors per tool (tool_speeds);
    ``summed``: each trajectory's tool latency drawn as one sum from the m-fold law of its calls
    (its own stream; the calls of a body near its deadline drawn too, scaled to that sum)."""
    wl = scn.workload
    m = min(CHUNK, scn.trajectories - c * CHUNK)
    rng = stream(scn.seed, rep, "workload", c)
    tok = per_step = None  # per_step: each step's calls, a constant nothing reads step by step
    if wl.replay is not None:
        part = _replayed(scn, rep, c, m, rng)
        steps, step_llm, step_calls = part["steps"], part["step_llm"], part["step_calls"]
        call_tool, which = part["call_tool"], part["call_category"]
        if wl.tokens is not None:
            tok = {k: part[k] for k in ("prompt", "step_append", "step_output")}
            if wl.tokens.max_tokens:
                tok["step_output"] = np.minimum(tok["step_output"], wl.tokens.max_tokens)
            step_llm = unloaded_turns(tok, steps, scn.cluster.inference.engine, wl.tokens.max_context)
        setup, reward = part["setup"], part["reward"]
    else:
        steps = _counts(wl.steps, rng, m, 1)
        if wl.max_turns:  # the harness's turn limit
            steps = np.minimum(steps, wl.max_turns)
        n_steps = int(steps.sum())
        # with a token workload, a turn's time alone on an engine (the serving engines add the load)
        step_llm = wl.llm_time.sample(rng, n_steps) if wl.llm_time is not None else None
        if wl.tokens is not None:  # own stream: the other draws stay as they are
            trng, engine = stream(scn.seed, rep, "tokens", c), scn.cluster.inference.engine
            if detail:
                tok = _tokens(wl.tokens, trng, m, n_steps)
                step_llm = unloaded_turns(tok, steps, engine, wl.tokens.max_context)
            else:  # the same turns summed where their counts are rounded and their seconds computed
                step_llm = None
                llm, turns = drawn_turn_sums(wl.tokens, trng, steps, n_steps, engine)
        per_step = None if detail else constant_count(wl.calls_per_step, 0)
        if per_step is not None:  # draws nothing: each trajectory's calls without a step's
            step_calls, calls = None, steps * per_step
        else:
            step_calls = _counts(wl.calls_per_step, rng, n_steps, 0)
        summed = summed and not detail
        n_calls = int((calls if step_calls is None else step_calls).sum())
        call_tool = None if summed else _calls(scn, rng, n_calls, speed)
        setup = wl.setup.sample(rng, m) if wl.setup else np.zeros(m)
        reward = wl.reward.sample(rng, m) if wl.reward else np.zeros(m)
    if wl.replay is not None:
        summed = False
        call_tool = _as_run(scn, call_tool, which, speed)
    if step_calls is not None:
        calls = _sum_by(step_calls, steps).astype(np.int64)
    if step_llm is not None:
        llm = _sum_by(step_llm, steps)
    if summed:
        tool = nfold(call_law(scn, speed)).sample(stream(scn.seed, rep, "tools", c), calls)
    else:
        tool = _sum_by(call_tool, calls)
    out = {
        "steps": steps,
        "calls": calls,
        "llm": llm,
        "tool": tool,
        "setup": setup,
        "reward": reward,
    }
    if detail:
        out.update(step_llm=step_llm, step_calls=step_calls, call_tool=call_tool)
        if tok is not None:
            out.update(tok)
    out["kept"] = {}
    if scn.policy.timeout and not detail:
        so, co = np.concatenate([[0], np.cumsum(steps)]), np.concatenate([[0], np.cumsum(calls)])
        gen = llm * (TOKEN_LOAD if wl.tokens is not None else 1.0)
        near = np.flatnonzero(gen + tool > KEEP * scn.policy.timeout)
        if summed:  # their calls, from their own stream, scaled to the drawn sum
            each = _calls(scn, stream(scn.seed, rep, "tools_kept", c), int(calls[near].sum()), speed)
            own = np.split(scaled_to(each, calls[near], tool[near]), np.cumsum(calls[near])[:-1])
        else:
            own = [call_tool[co[k] : co[k + 1]].copy() for k in near.tolist()]
        if step_llm is None:  # a token workload's turns, computed again for these few
            llms = turns(near)
        else:
            llms = [step_llm[so[k] : so[k + 1]].copy() for k in near.tolist()]  # copies: the chunk is freed
        for k, mine, own_llm in zip(near.tolist(), own, llms):
            if per_step is None:
                own_calls = step_calls[so[k] : so[k + 1]].copy()
            else:
                own_calls = np.full(steps[k], per_step, dtype=np.int64)
            out["kept"][c * CHUNK + k] = (own_llm, own_calls, mine)
    return out


def work_bytes(scn: Scenario) -> float:
    """Bytes of one replication's workload arrays (per-step detail at step fidelity)."""
    wl, n = scn.workload, scn.trajectories
    per = 40.0  # steps, calls (int32) and four float64 sums
    if resolved_engine(scn).draws_steps(scn):
        steps = min(wl.steps.mean(), wl.max_turns or math.inf)
        per += 16 + steps * (16 + wl.calls_per_step.mean() * 16)  # offsets; per step; per call
    return n * per


def check_memory(scn: Scenario) -> None:
    """Refuse, before drawing anything, a workload whose arrays would not fit in memory."""
    import os

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    need = work_bytes(scn)
    if need > 0.8 * total:
        from ..errors import InputError

        raise InputError(
            f"{scn._source}: field 'workload.trajectories' ({scn.trajectories:,}) needs about "
            f"{need / 2**30:,.1f} GiB for its workload arrays at {resolved_fidelity(scn)} fidelity, "
            f"more than this machine's memory ({total / 2**30:,.1f} GiB); run fewer trajectories "
            "(results scale linearly) or use fidelity: trajectory."
        )


def draw_work(
    scn: Scenario,
    rep: int,
    detail: bool = False,
    jobs: int = 1,
    sub: Substrate | None = None,
    summed: bool = False,
    pool=None,
    background: bool = False,
) -> Work:
    """Draw every trajectory's workload for replication ``rep`` (chunks in ``jobs`` processes,
    or in ``pool``, an executor already running), filling preallocated arrays as chunks arrive so
    the peak is the result plus a few chunks. ``sub``: apply its tool speed factors (the other
    draws are the same on every substrate); ``summed``: tool latency sums drawn at once
    (:func:`sums_at_once`); ``background`` (with ``pool``, without detail): return at once, the
    chunks filled by a thread as they come (:meth:`Work.wait`)."""
    n = scn.trajectories
    chunks = range(-(-n // CHUNK))
    draw = partial(_draw_chunk, scn, rep, detail, speed=tool_speeds(scn, sub), summed=summed)
    kinds = {"steps": np.int32, "calls": np.int32}
    sums = ("steps", "calls", "llm", "tool", "setup", "reward")
    out = {k: np.empty(n, dtype=kinds.get(k, np.float64)) for k in sums}
    details: dict[str, list] = {"step_llm": [], "step_calls": [], "call_tool": []}
    if detail and scn.workload.tokens is not None:
        details.update(prompt=[], step_append=[], step_output=[])
    kept: dict = {}

    def take(c: int, part: dict) -> None:
        lo = c * CHUNK
        for k in sums:
            out[k][lo : lo + len(part[k])] = part[k]
        for k in details if detail else ():
            details[k].append(part[k])
        kept.update(part["kept"])

    if pool is not None and background and not detail:
        # one cell reads it as it comes: reserved arrays, drawn at most LEAD chunks ahead
        out = {k: reserved.zeros(n, dtype=kinds.get(k, np.float64)) for k in sums}
        work = Work(**out, kept=kept, filling=Filling(len(chunks)), single=True)

        def fill() -> None:
            try:
                drawing: deque = deque()
                for c in chunks:
                    work.filling.room(c)
                    while len(drawing) <= LEAD and c + len(drawing) < len(chunks):
                        drawing.append(pool.submit(draw, c + len(drawing)))
                    take(c, drawing.popleft().result())
                    work.filling.filled(c)
            except BaseException as exc:  # the reader raises it
                work.filling.failed(exc)

        work.filling.thread = threading.Thread(target=fill, daemon=True)
        work.filling.thread.start()
        return work
    if len(chunks) > 1 and (pool is not None or jobs > 1):
        own = pool is None  # a pool of its own, ended here; a pool given is left running
        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork")) if own else nullcontext(pool) as p:
            for c, part in zip(chunks, p.map(draw, chunks)):
                take(c, part)
    else:
        for c in chunks:
            take(c, draw(c))
    work = Work(**out, kept=kept)
    if detail:
        for k, parts in details.items():
            setattr(work, k, np.concatenate(parts))
        work.step_off = np.concatenate([[0], np.cumsum(work.steps, dtype=np.int64)])
        work.call_off = np.concatenate([[0], np.cumsum(work.calls, dtype=np.int64)])
    return work
