"""The training loop's trajectory bodies at trajectory fidelity.

A body waits its steps in segments (all of them at once when nothing contends; one step at first
and doubling while the load holds still on a loaded tier or host), each step at its own drawn
latencies (per-step detail) times the prompt's task factor. The loop's events re-read the bodies:

- a *barrier* (colocated engines start training, or the engines pause to load new weights) and a
  *version switch* interrupt every body waiting a segment: it finishes the step it is in, then
  waits at the gate while it is closed, re-reads the load and goes on;
- a *cancel* (its group was discarded: over-sampled, stale, filtered, weight update, end)
  interrupts the body, which stops where the step engine checks: before its step's next tool
  call, or at the start of its next step (after the gate).

Generated steps are counted under the version they start in (``steps_under_newer_version``).
Compared with the step engine mode by mode in the fidelity matrix (docs/fidelity.md, the
training rows).
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING

import numpy as np
import simpy

from .records import CANCELLED, LOST, OK, TIMEOUT, BodyResult
from .segments import _STILL  # multipliers that moved less than this: double the segment
from .workload_draws import CHUNK

if TYPE_CHECKING:
    from .cell_view import CellView, LoopView

_CANCEL, _BARRIER = "cancel", "barrier"


class _Steps:
    """Per-step generation, exec overhead and tool time of one chunk, and each step's calls."""

    def __init__(self, cell: CellView, c: int):
        d = cell.detail_of(c)
        self.d = d
        n_steps = len(d.step_llm)
        calls = d.step_calls.astype(np.int64)
        first = np.concatenate([[0], np.cumsum(calls)[:-1]])  # each step's first call
        has = calls > 0
        over = np.zeros(n_steps)
        tool = np.zeros(n_steps)
        if len(d.call_tool):
            over[has] = np.add.reduceat(d.call_overhead, first[has])
            tool[has] = np.add.reduceat(d.call_tool, first[has])
        self.gen, self.over, self.tool, self.first = d.step_llm, over, tool, first


class LoopBodies:
    """The running bodies of one cell's training loop (trajectory fidelity)."""

    def __init__(self, cell: CellView, loop: LoopView):
        self.cell, self.loop, self.env = cell, loop, cell.env
        self.waiting: dict[int, simpy.Process] = {}  # bodies waiting a segment (interruptible)
        self._steps: dict[int, _Steps] = {}
        cell.fleet.defer = False  # the loop's gate and cancels act on bodies in time
        self.loaded = cell.loaded

    # ------------------------------------------------------------ the loop's events
    def barrier(self) -> None:
        """The gate closed or the version changed: every body re-reads at its step's end."""
        for proc in list(self.waiting.values()):
            proc.interrupt(_BARRIER)
        self.waiting.clear()

    def cancel(self, members) -> None:
        """These trajectories' group was discarded: their bodies stop at the next check."""
        for i in members:
            proc = self.waiting.pop(i, None)
            if proc is not None:
                proc.interrupt(_CANCEL)

    # ------------------------------------------------------------ one body
    def _of(self, i: int) -> tuple[_Steps, int, int]:
        c = i // CHUNK
        s = self._steps.get(c)
        if s is None:
            s = self._steps[c] = _Steps(self.cell, c)
            if len(self._steps) > 4:  # chunks long done
                self._steps.pop(min(self._steps))
        j = i - c * CHUNK
        return s, int(s.d.step_off[j]), int(s.d.step_off[j + 1])

    def _wait(self, dur: float, deadline: float):
        """Wait ``dur`` (not interruptible) or until the deadline; True when it completed."""
        env = self.env
        ok = env.now + dur <= deadline
        end = min(env.now + dur, deadline)
        while env.now < end:
            try:
                yield env.timeout(end - env.now)
            except simpy.Interrupt:
                pass
        return ok

    def _piece(self, i: int, host: int, d: float, deadline: float, c_g: float, c_e: float):
        """Wait ``d`` seconds generating ``c_g`` and in exec overhead ``c_e`` of the time (the load
        the others read), until the deadline or an interrupt: ``(why interrupted, seconds)``."""
        env, cell = self.env, self.cell
        t = env.now
        cell.gen_load += c_g
        cell.fleet.add_exec_load(host, c_e)
        why = None
        self.waiting[i] = env.active_process
        try:
            yield env.timeout(min(d, max(deadline - env.now, 0.0)))
        except simpy.Interrupt as e:
            why = e.cause
        finally:
            self.waiting.pop(i, None)
            cell.gen_load -= c_g
            cell.fleet.add_exec_load(host, -c_e)
        spent = env.now - t
        return why, (d if why is None and spent >= d - 1e-9 else spent)

    def _stop(self, i, S, a, q, units, x, x_l, x_e, into, why, deadline, g_q=None):
        """Stopped ``into`` seconds into step ``q`` by the deadline (``why`` None) or an interrupt:
        the body's end ``(status, generation, steps, overhead)`` from here, or ``[generation,
        overhead]`` of step ``q`` when the body goes on with the next step."""
        if why is None:  # the deadline: cut where the step engine would
            k_cut, g_c, o_c = _cut(S, a, q, x, x_l, x_e, into, g_q)
            return TIMEOUT, g_c, q + k_cut, o_c
        # interrupted in step q: run on to the step engine's next check
        out = yield from self._finish(i, S, a, q, x, x_l, x_e, into, why, deadline, g_q)
        ok, into, g_s, o_s, stop, why = out
        if not ok:
            k_cut, g_c, o_c = _cut(S, a, q, x, x_l, x_e, into, g_q)
            return TIMEOUT, g_c, q + k_cut, o_c
        if why == _CANCEL and stop:
            return CANCELLED, g_s, q, o_s
        if why == _CANCEL and q + 1 < units:
            yield from self._gate()  # past the step's last call: stopped at the next step's start
            return CANCELLED, g_s, q + 1, o_s
        return [g_s, o_s]

    def _finish(self, i, S, a, q, x, x_l, x_e, into, why, deadline, g_q=None):
        """Interrupted ``into`` seconds into step ``q``: run on to the step engine's next check (a
        cancel that comes meanwhile moves it earlier). Returns ``(within the deadline, seconds
        into the step, its generation and overhead spent, stopped before a call, why)``."""
        env = self.env
        while True:
            rest, g_s, o_s, stop = _to_check(S, a, q, x, x_l, x_e, into, why == _CANCEL, g_q)
            left, t = max(deadline - env.now, 0.0), env.now
            if why != _CANCEL:
                self.waiting[i] = env.active_process
            done = True
            try:
                yield env.timeout(min(rest, left))
            except simpy.Interrupt as e:
                done = False
                why = _CANCEL if e.cause == _CANCEL else why
            finally:
                self.waiting.pop(i, None)
            into += env.now - t
            if done:
                return rest <= left, into, g_s, o_s, stop, why

    def _gate(self):
        """At a step's start: wait while the engines train or load weights."""
        gate = self.cell.llm_gate
        if gate is None:
            return
        while (closed := gate()) is not None:
            try:
                yield closed
            except simpy.Interrupt:
                pass

    def body(self, i: int, host: int, deadline: float, fail_call: int, t_begin: float):
        """Trajectory ``i``'s body: its :class:`~.records.BodyResult`."""
        cell, env = self.cell, self.env
        w, st = cell.work, cell.chunks[i // CHUNK]
        j = i - st.lo
        x = float(cell.task_scale[i]) if cell.task_scale is not None else 1.0
        S, a, b = self._of(i)
        units, tail = b - a, None
        status = OK
        if fail_call:
            status = LOST
            s_lost, (g, o, t) = S.d.lost_at(i - st.lo, fail_call)
            units, tail = s_lost, (g * x, o, t * x)
        gen, over, tool = (S.gen[a:b] * x).tolist(), S.over[a:b].tolist(), (S.tool[a:b] * x).tolist()
        t0 = env.now
        out = yield from self._run(i, host, deadline, status, units, tail, gen, over, tool, S, a, x, w)
        status, g_all, done, o_all = out
        busy = env.now - t0
        st.gen[j] = (t0, env.now, g_all / busy if busy > 0 else 0.0)
        return BodyResult(status, g_all, done, env.now - t_begin, o_all)

    def _run(self, i, host, deadline, status, units, tail, gen, over, tool, S, a, x, w):
        cell, loop = self.cell, self.loop
        count = cell.on_generate is not None
        setup, reward = float(w.setup[i]), float(w.reward[i])
        g_all = o_all = 0.0
        if setup and not (yield from self._wait(setup, deadline)):
            return TIMEOUT, 0.0, 0, 0.0
        s, seg, prev = 0, 1, None
        while s < units:
            yield from self._gate()
            if i in cell.cancelled:
                return CANCELLED, g_all, s, o_all
            x_l, x_e = cell.multipliers(host)
            if self.loaded:
                if prev is not None:
                    moved = max(abs(x_l / prev[0] - 1.0), abs(x_e / prev[1] - 1.0))
                    seg = seg * 2 if moved <= _STILL else max(1, seg // 2)
                prev = (x_l, x_e)
                k = min(seg, units - s)
            else:
                k = units - s
            version = loop.version
            head = None  # a loaded tier: the segment's first generation waited on its own, counted
            if cell.heads:  # as generating, so bodies in step (after a barrier) load the tier together
                head = float(gen[s]) * x_l
                why, spent = yield from self._piece(i, host, head, deadline, 1.0, 0.0)
                if why is not None or spent < head:  # interrupted, or the deadline, in the head
                    if count:
                        loop.gen_steps[0 if version == loop.v0[i] else 1] += 1
                    out = yield from self._stop(i, S, a, s, units, x, x_l, x_e, spent, why, deadline, head)
                    if isinstance(out, tuple):
                        st_, g_, k_, o_ = out
                        return st_, g_all + g_, k_, o_all + o_
                    g_all, o_all, s = g_all + out[0], o_all + out[1], s + 1
                    continue
                x_l, x_e = cell.multipliers(host)
            g = [v * x_l for v in gen[s : s + k]]  # per step, in plain floats (short lists)
            o = [v * x_e for v in over[s : s + k]]
            if head is not None:
                g[0] = 0.0
            ends = list(accumulate(map(_add3, g, o, tool[s : s + k])))
            d, g_seg, o_seg = ends[-1], sum(g), sum(o)
            c_g, c_e = (g_seg / d, o_seg / d) if d > 0 else (0.0, 0.0)
            why, spent = yield from self._piece(i, host, d, deadline, c_g, c_e)
            if why is None and spent >= d:  # the segment completed
                if count:
                    loop.gen_steps[0 if version == loop.v0[i] else 1] += k
                s += k
                g_all += g_seg + (head or 0.0)
                o_all += o_seg
                continue
            m = min(bisect_right(ends, spent), k - 1)  # whole steps done
            if count:
                loop.gen_steps[0 if version == loop.v0[i] else 1] += m + 1
            g_all += sum(g[:m]) + (head if head is not None and m else 0.0)
            o_all += sum(o[:m])
            into = spent - (ends[m - 1] if m else 0.0)  # seconds into step s + m
            g_q = None
            if m == 0 and head is not None:  # step s's generation was its head
                into, g_q = into + head, head
            out = yield from self._stop(i, S, a, s + m, units, x, x_l, x_e, into, why, deadline, g_q)
            if isinstance(out, tuple):
                st_, g_, k_, o_ = out
                return st_, g_all + g_, k_, o_all + o_
            g_all, o_all, s = g_all + out[0], o_all + out[1], s + m + 1
        if tail is not None:  # the lost sandbox's last step, up to the failing call
            yield from self._gate()
            if i in cell.cancelled:
                return CANCELLED, g_all, units, o_all
            x_l, x_e = cell.multipliers(host)
            g_t, o_t = tail[0] * x_l, tail[1] * x_e
            if not (yield from self._wait(g_t + o_t + tail[2], deadline)):
                return TIMEOUT, g_all + g_t, units, o_all
            return LOST, g_all + g_t, units, o_all + o_t
        if status == OK and reward and not (yield from self._wait(reward, deadline)):
            return TIMEOUT, g_all, units, o_all
        return status, g_all, units, o_all


def _add3(a: float, b: float, c: float) -> float:
    return a + b + c


def _calls(S: _Steps, a: int, q: int, x: float, x_l: float, x_e: float, g_q: float | None = None):
    """Step ``q``'s generation (``g_q`` when waited already) and its calls' (overhead, tool)
    seconds at these multipliers."""
    n = int(S.d.step_calls[a + q])
    c0 = int(S.first[a + q])
    o = S.d.call_overhead[c0 : c0 + n] * x_e
    t = S.d.call_tool[c0 : c0 + n] * x
    return (float(S.gen[a + q]) * x * x_l if g_q is None else g_q), o, t


def _to_check(S: _Steps, a: int, q: int, x, x_l, x_e, into: float, cancel: bool, g_q=None):
    """Interrupted ``into`` seconds into step ``q``: the seconds to its next check, the step's
    generation and overhead spent by then, and whether the body stops there (a cancel before one
    of the step's calls). A barrier runs the step to its end."""
    g, o, t = _calls(S, a, q, x, x_l, x_e, g_q)
    if cancel and into < g:  # the check before the step's first call
        return g - into, g, 0.0, len(o) > 0
    edge = g
    for n in range(len(o)):
        edge += float(o[n] + t[n])
        if cancel and into < edge and n + 1 < len(o):  # the check before call n + 1
            return edge - into, g, float(o[: n + 1].sum()), True
    return max(edge - into, 0.0), g, float(o.sum()), False


def _cut(S: _Steps, a: int, q: int, x, x_l, x_e, into: float, g_q=None) -> tuple[int, float, float]:
    """Step ``q`` stopped ``into`` seconds in (the deadline): steps completed (0 or 1) and the
    generation and overhead spent (a call's overhead runs before its tool)."""
    g, o, t = _calls(S, a, q, x, x_l, x_e, g_q)
    if into <= g:
        return 0, into, 0.0
    left, spent = into - g, 0.0
    for n in range(len(o)):
        if o[n] + t[n] >= left:
            return 0, g, spent + min(float(o[n]), left)
        left -= float(o[n] + t[n])
        spent += float(o[n])
    return 1, g, spent
