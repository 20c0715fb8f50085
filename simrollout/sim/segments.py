"""The trajectory engine's segments: a body's steps waited a segment at a time, the
multipliers re-read from the load at each boundary, one step at first and doubling while the load
holds still; a body that may reach its deadline runs its own steps' latencies (per-step detail),
so the cut falls where it would in the step engine. Also the segment control: the load is steady
in an async batch run once every worker has started a body and until the queue runs dry."""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from .records import OK, TIMEOUT, BodyResult
from .waits import until

AT_RISK = 1.25  # a body whose estimated end times this passes its deadline runs exact steps
_STILL = 0.01  # multipliers that moved less than this (relative) since the last segment: double it


@dataclass(slots=True)
class _Progress:
    """A body's progress through its steps: steps done, generation, time in steps, exec overhead."""

    done: float
    g: float
    time: float
    o: float

    def timeout(self, steps: int) -> tuple:
        return BodyResult(TIMEOUT, self.g, steps, self.time, self.o)


class Segments:
    """The segments of a :class:`simrollout.sim.model.Cell` (a part of it)."""

    def _init_segments(self) -> None:
        scn, concurrency = self.scn, self.concurrency
        self.steady_run = scn.policy.mode == "async" and scn.arrivals.kind == "batch"
        self._ramp = min(concurrency, self.work.n)
        self._ramped = self._draining = False
        self._long: dict[int, simpy.Process] = {}  # bodies in one long wait, cut short by the drain

    def settled(self) -> bool:
        """The load is steady: an async batch run whose every worker is busy and whose queue is
        not yet empty. Then a body waits its remainder at once instead of in segments."""
        return self.steady_run and self._ramped and not self._draining

    def _drain(self) -> None:
        """The queue ran dry: the load falls from here on, so long waits go back to segments."""
        if self._draining:
            return
        self._draining = True
        for proc in list(self._long.values()):
            proc.interrupt("drain")

    def _segments(
        self, i, host, deadline, status, units, per, setup, reward, tail=None, start=(0.0, 0.0, 0.0, 0.0)
    ):
        """The body's steps in segments: a :class:`~.records.BodyResult` (its ``seconds``: the time
        in steps)."""
        env = self.env
        p = _Progress(*start)
        if setup and not (yield from until(env, setup, deadline)):
            return BodyResult(TIMEOUT, 0.0, 0, 0.0, p.o)
        if not self._ramped:
            self._ramp -= 1
            self._ramped = self._ramp <= 0
        x_l, x_e = self.multipliers(host)
        rate = per[0] * x_l + per[1] * x_e + per[2]
        exact = tail is not None or env.now + (units - p.done) * rate * AT_RISK > deadline
        seg, prev = 1.0, None
        while p.done < units - 1e-9:
            x_l, x_e = self.multipliers(host)
            if prev is not None:
                moved = max(abs(x_l / prev[0] - 1.0), abs(x_e / prev[1] - 1.0))
                seg = seg * 2 if moved <= _STILL else max(1.0, seg / 2)
            prev = (x_l, x_e)
            long = self.settled() and not exact
            du = units - p.done if long else min(seg, units - p.done)
            if exact and p.done + du < units:  # whole steps
                du = max(1.0, float(int(du)))
            x = (x_l, x_e)
            ended, seg = yield from self._segment(i, host, deadline, p, du, seg, per, units, exact, long, x)
            if ended is not None:
                return ended
        return (yield from self._last_step(i, host, deadline, status, units, tail, reward, p))

    def _segment(self, i, host, deadline, p: _Progress, du, seg, per, units, exact, long, x):
        """``du`` steps from ``p.done``: ``(None, next segment length)``, or the body's result
        first when the deadline fell in them."""
        env = self.env
        done = p.done
        g0, o0, t0 = self._segment_sums(i, done, du, per, units, exact)
        x_l, x_e = x
        headed = False
        if self.heads and not long and done == int(done) and du >= 1.0:
            # the segment opens with a generation: wait it on its own, counted as generating,
            # so bodies in step with each other (a sync batch, a burst) load the tier together
            head = self._sums(i, int(done), int(done) + 1)[0] if exact else per[0]
            t_gen = env.now
            self.gen_load += 1.0
            ok = yield from until(env, head * x_l, deadline)
            self.gen_load -= 1.0
            headed = True
            p.g += env.now - t_gen
            p.time += env.now - t_gen
            if not ok:
                return p.timeout(int(done)), seg
            g0 = max(g0 - head, 0.0)
            x_l, x_e = self.multipliers(host)
        d = g0 * x_l + o0 * x_e + t0
        left = deadline - env.now
        if d > left:  # the deadline falls in this segment
            left = max(left, 0.0)
            if exact and done == int(done):
                k, g, o = self._cut(i, int(done), min(int(done + du) + 1, int(units)), x_l, x_e, left,
                                     skip=headed)  # fmt: skip
            else:
                k, g, o = int(du * left / d), g0 * x_l * left / d, o0 * x_e * left / d
            yield env.timeout(left)
            return BodyResult(TIMEOUT, p.g + g, int(done) + k, p.time + left, p.o + o), seg
        d, du, g0, o0, seg = yield from self._wait_segment(i, host, d, du, g0, o0, x_l, x_e, seg, long)
        p.g += g0 * x_l
        p.o += o0 * x_e
        p.time += d
        p.done += du
        return None, seg

    def _segment_sums(self, i, done, du, per, units, exact) -> tuple[float, float, float]:
        """Generation, exec overhead and tool time of ``du`` steps from ``done``, unloaded: the
        steps' own (per-step detail) when exact, else the body's mean step."""
        if exact and done == int(done) and int(done + du) > int(done):
            k1 = min(int(done + du), int(units))
            g0, o0, t0 = self._sums(i, int(done), k1)
            rem = (done + du) - k1  # a lost sandbox's partial last step, proportional
            return g0 + per[0] * rem, o0 + per[1] * rem, t0 + per[2] * rem
        return per[0] * du, per[1] * du, per[2] * du

    def _wait_segment(self, i, host, d, du, g0, o0, x_l, x_e, seg, long):
        """Wait the segment, its shares counted in the load; a long wait is cut short by the
        drain: ``(time, steps, generation, exec overhead, next segment length)`` waited."""
        env, fleet = self.env, self.fleet
        t_seg = env.now
        c_g, c_e = (g0 * x_l / d, o0 * x_e / d) if d > 0 else (0.0, 0.0)
        self.gen_load += c_g
        fleet.add_exec_load(host, c_e)
        try:
            if long and du > seg:  # a long wait: the start of the drain cuts it short
                self._long[i] = env.active_process
                try:
                    yield env.timeout(d)
                except simpy.Interrupt:
                    part = (env.now - t_seg) / d if d > 0 else 1.0
                    d, du, g0, o0 = env.now - t_seg, du * part, g0 * part, o0 * part
                    seg = 1.0
                finally:
                    self._long.pop(i, None)
            else:
                yield env.timeout(d)
        finally:
            self.gen_load -= c_g
            fleet.add_exec_load(host, -c_e)
        return d, du, g0, o0, seg

    def _last_step(self, i, host, deadline, status, units, tail, reward, p: _Progress):
        """After the whole steps: a lost sandbox's last step up to the failing call, or the reward."""
        env = self.env
        if tail is not None:  # the lost sandbox's last step, up to the failing call
            x_l, x_e = self.multipliers(host)
            t_tail = env.now
            ok = yield from until(env, tail[0] * x_l + tail[1] * x_e + tail[2], deadline)
            spent = env.now - t_tail
            p.g += min(tail[0] * x_l, spent)
            p.o += min(tail[1] * x_e, max(spent - tail[0] * x_l, 0.0))
            p.time += spent
            if not ok:
                return p.timeout(int(units))
        if status == OK and reward and not (yield from until(env, reward, deadline)):
            return p.timeout(int(units))
        return BodyResult(status, p.g, int(p.done + 1e-9), p.time, p.o)
