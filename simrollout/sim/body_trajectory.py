"""The body at ``trajectory`` fidelity: the pre-drawn steps' sums waited as few timeouts. Alone
on an unloaded cell, one wait (none when the fleet defers: the caller waits it); once the load is
steady, one wait at the steady load, cut short by the drain; else segments of steps
(:mod:`simrollout.sim.segments`). A body that loses its sandbox runs exactly up to the failing
call (per-step detail)."""

from __future__ import annotations

import simpy

from .records import LOST, OK, TIMEOUT, BodyResult
from .segments import AT_RISK
from .workload_draws import CHUNK


class TrajectoryBody:
    """The trajectory engine's body of a :class:`simrollout.sim.model.Cell` (a part of it)."""

    def _body_trajectory(self, i: int, host: int, deadline: float, fail_call: int, t0: float):
        """The body as few timeouts: its :class:`~.records.BodyResult`."""
        env, st = self.env, self.chunks[i // CHUNK]
        j = i - st.lo
        *_, llm, over, tool, setup, reward, steps = st.inputs[j].tolist()  # _IN
        llm *= self._x.get(i, 1.0)
        status, units, tail = OK, steps, None
        if fail_call:
            status = LOST
            units, tail = self._lost_at(i, fail_call)
        if not self.loaded:
            sums = (llm, over, tool, setup, reward, steps)
            return (yield from self._body_alone(i, st, deadline, t0, status, units, tail, sums))
        per = (llm / steps, over / steps, tool / steps) if steps else (0.0, 0.0, 0.0)
        start = (0.0, 0.0, 0.0, 0.0)  # steps done, generation, body time, exec overhead
        steady = (
            self._steady(host, deadline, units, per, setup, reward)
            if tail is None and self.settled()
            else None
        )
        if steady is not None:  # one wait; the start of the drain cuts it short
            ended, spent = yield from self._one_wait(i, st, host, t0, steady, per, units)
            if ended is not None:
                return ended
            d, x_l, x_e, rate = steady[:4]
            done = min(max(spent - setup, 0.0) / rate, units) if rate > 0 else units
            start = (done, per[0] * x_l * done, spent, per[1] * x_e * done)
            setup, reward = max(setup - spent, 0.0), min(reward, d - spent)
        out = yield from self._segments(i, host, deadline, status, units, per, setup, reward, tail, start)
        st.gen[j] = (t0, env.now, out.llm / out.seconds if out.seconds > 0 else 0.0)
        return out._replace(seconds=env.now - t0)

    def _body_alone(self, i, st, deadline, t0, status, units, tail, sums):
        """Nothing contends: the body's sums as one wait, cut at the deadline."""
        llm, over, tool, setup, reward, steps = sums
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
        st.gen[i - st.lo] = (t0, t0 + dur, g / part if part > 0 else 0.0)
        if not self.fleet.defer:
            yield self.env.timeout(dur)
        return BodyResult(status, g, done, dur, o)

    def _one_wait(self, i, st, host, t0, steady, per, units):
        """The body as one wait at the steady load: ``(its result, None)``, or ``(None, time
        spent)`` when the start of the drain cut it short."""
        env, fleet = self.env, self.fleet
        d, x_l, x_e, rate, c_g, c_e = steady
        if self.steady is not None:
            self.steady.body(i, x_l, x_e, host)
        self.gen_load += c_g
        fleet.add_exec_load(host, c_e)
        self._long[i] = env.active_process
        try:
            yield env.timeout(d)
            st.gen[i - st.lo] = (t0, env.now, per[0] * x_l / rate if rate > 0 else 0.0)
            return BodyResult(OK, per[0] * x_l * units, int(units), d, per[1] * x_e * units), None
        except simpy.Interrupt:
            spent = env.now - t0
        finally:
            self._long.pop(i, None)
            self.gen_load -= c_g
            fleet.add_exec_load(host, -c_e)
        return None, spent

    def _steady(self, host, deadline, units, per, setup, reward):
        """The whole body as one wait at the steady load: ``(duration, x_l, x_e, seconds per step,
        generating share, exec share)``, or None for a body that may reach its deadline (the
        segments cut it exactly)."""
        x_l, x_e = self.multipliers(host)
        rate = per[0] * x_l + per[1] * x_e + per[2]
        d = setup + units * rate + reward
        if self.env.now + (d - reward) * AT_RISK > deadline or d <= 0:
            return None
        return d, x_l, x_e, rate, per[0] * x_l * units / d, per[1] * x_e * units / d

    # per-step detail of a body, its generation scaled by the body's own multiplier (serving pilot)
    def _cut(self, i, s0, s1, x_l, x_e, left, skip=False) -> tuple[int, float, float]:
        d, j = self.span(i)
        return d.cut(j, s0, s1, x_l * self._x.get(i, 1.0), x_e, left, skip)

    def _sums(self, i: int, s0: int, s1: int) -> tuple[float, float, float]:
        d, j = self.span(i)
        g, o, t = d.sums(j, s0, s1)
        return g * self._x.get(i, 1.0), o, t

    def _lost_at(self, i: int, fail_call: int) -> tuple[int, tuple[float, float, float]]:
        d, j = self.span(i)
        s, (g, o, t) = d.lost_at(j, fail_call)
        return s, (g * self._x.get(i, 1.0), o, t)
