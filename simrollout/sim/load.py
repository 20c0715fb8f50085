"""The load a cell's bodies put on the inference tier and the hosts, as the trajectory engine
reads it: the bodies running (with a serving pilot, the pilot's load curve at that count and each
body's luck), the sum of their expected shares in generation, the one-wait bodies' starts and ends
applied in time order, and the engines' busy time (docs/model.md, "Two fidelities")."""

from __future__ import annotations

import heapq
from array import array

import numpy as np

from .inference import expected_busy_engines

_JSQ = 0.5  # a request joins the least-loaded engine: about half a request below the mean


class BodyLoad:
    """The bodies' load of a :class:`simrollout.sim.model.Cell` (a part of it)."""

    def _init_load(self) -> None:
        inf, pilot = self.scn.cluster.inference, self.pilot
        # serving engines at trajectory fidelity (a pilot): a body's generation is its unloaded
        # time x its luck x the pilot's load curve at the bodies running (re-read per segment)
        self.bodies = 0  # trajectories running their body
        self._x: dict[int, float] = {}  # luck of each running body
        # the pilot's load ratio and engines busy at each count of bodies
        curve = [pilot.at(b / inf.engines) for b in range(self.concurrency + 2)] if pilot else []
        self.curve = [x for x, _ in curve]  # the load ratio at each count of bodies
        self._busy_at = [inf.engines * f for _, f in curve]  # engines busy at each count
        # when bodies start and end (every one, full or one-wait): engine busy time is integrated
        # over them once, at the end (gpu_busy_seconds)
        self.bodies_on, self.bodies_off = array("d"), array("d")
        self.busy_fold: BusyFold | None = None  # or the integral folded as they came
        self._lean_on: list[float] = []  # heaps: one-wait bodies' starts and ends not yet counted
        self._lean_off: list[float] = []
        self.turn_log: list | None = None  # a pilot's turns: (trajectory, bodies, seconds, unloaded)
        # trajectory fidelity: the load as the sum of every running body's expected share of
        # its current segment in generation (the tier) and in exec overhead (per host)
        self.gen_load = 0.0
        # a loaded tier without a pilot: one-wait bodies' starts and ends to come, with their share
        # in generation (a pilot's are in _lean_on / _lean_off)
        self._pending: list[tuple[float, int, float]] = []
        self.heads = bool(inf and inf.slowdown)  # a segment's first generation waited on its own
        self._slowdown = inf.slowdown if self.heads else 0.0
        self._engines = inf.engines if inf else 1
        self._f_exec = self.fleet.factor["exec"]

    def _count_bodies(self, change: int) -> None:
        """A body starts (+1) or ends (-1) now."""
        self.bodies += change
        if self.curve:
            (self.bodies_on if change > 0 else self.bodies_off).append(self.env.now)

    def later(self, start: float, end: float, c_g: float) -> None:
        """A one-wait trajectory's body runs from ``start`` to ``end`` generating ``c_g`` of the
        time: counted when the bodies or the tier's load are next read (no events)."""
        if self.curve:
            heapq.heappush(self._lean_on, start)
            heapq.heappush(self._lean_off, end)
            self.bodies_on.append(start)
            self.bodies_off.append(end)
        elif self.heads:
            heapq.heappush(self._pending, (start, 1, c_g))
            heapq.heappush(self._pending, (end, -1, -c_g))

    def _catch_up(self, now: float) -> None:
        """Apply the one-wait bodies' starts and ends up to ``now``."""
        on, off = self._lean_on, self._lean_off
        while on and on[0] <= now:
            heapq.heappop(on)
            self.bodies += 1
        while off and off[0] <= now:
            heapq.heappop(off)
            self.bodies -= 1
        pending = self._pending
        while pending and pending[0][0] <= now:
            _, change, c_g = heapq.heappop(pending)
            self.bodies += change
            self.gen_load += c_g

    def multipliers(self, host: int) -> tuple[float, float]:
        """Generation and exec-overhead multipliers for a body on ``host`` at the current load of
        the other bodies (a request joins the least-loaded engine, about half a request below
        the mean; an exec counts itself, as in the step engine)."""
        x_l = 1.0
        if self._pending or self._lean_on or self._lean_off:
            self._catch_up(self.env.now)
        if self.curve:  # serving engines: the pilot's load curve at the bodies running
            x_l = self.curve[min(self.bodies, len(self.curve) - 1)]
        elif self.heads:  # a loaded tier
            x_l = 1.0 + self._slowdown * max(self.gen_load / self._engines - _JSQ, 0.0)
        fleet = self.fleet
        return x_l, self._f_exec(1.0 + fleet.load(host, "exec"))

    def gpu_busy_seconds(self) -> float:
        """Engine busy time: exact in step fidelity; in trajectory fidelity, engines busy under
        Poisson occupancy at the time-binned number of generating requests."""
        inf = self.scn.cluster.inference
        if inf is None:
            return 0.0
        if self.exact_tier:
            return self.tier.busy_seconds
        if self.pilot is not None:  # the pilot's busy fraction over time, at the bodies running
            if self.busy_fold is not None:  # folded as the run went (the compiled engine)
                return self.busy_fold.value()
            return busy_integral(self.bodies_on, self.bodies_off, self._busy_at)
        load, width = self.acc.load.mean_load(self.acc.end)
        return float((expected_busy_engines(np.maximum(load, 0.0), inf.engines) * width).sum())


def busy_integral(on, off, busy_at: list[float]) -> float:
    """Engine busy seconds from time 0 to the last change: ``busy_at[n]`` engines busy while
    ``n`` bodies run, bodies starting at the times ``on`` and ending at ``off``."""
    t = np.concatenate([np.asarray(on, dtype=np.float64), np.asarray(off, dtype=np.float64)])
    if not t.size:
        return 0.0
    change = np.concatenate([np.ones(len(on), dtype=np.int64), -np.ones(len(off), dtype=np.int64)])
    order = np.argsort(t, kind="stable")
    t = np.concatenate([[0.0], t[order]])
    running = np.concatenate([[0], np.cumsum(change[order])])[:-1]
    at = np.asarray(busy_at)[np.minimum(running, len(busy_at) - 1)]
    return float((at * np.diff(t)).sum())


class BusyFold:
    """:func:`busy_integral` folded as the starts and ends come, in time order, so they need not
    be kept: each :meth:`add` brings every start and end before some time (each list in time
    order) and none after it. Its terms are summed by numpy a block of ``block`` at a time, the
    blocks' sums added in order, so up to ``block`` starts and ends (a cell of two million
    trajectories) the value is :func:`busy_integral`'s to the bit."""

    def __init__(self, busy_at: list[float], block: int = 1 << 22):
        self.busy_at = np.asarray(busy_at, dtype=np.float64)
        self.terms = np.zeros(block)
        self.k = 0  # terms in the block
        self.total = 0.0  # the full blocks' sums
        self.t, self.running = 0.0, 0  # the last change folded, and the bodies running after it

    def add(self, on: np.ndarray, off: np.ndarray) -> None:
        t = np.concatenate([on, off])
        if not t.size:
            return
        change = np.concatenate([np.ones(len(on), dtype=np.int64), -np.ones(len(off), dtype=np.int64)])
        order = np.argsort(t, kind="stable")
        t = np.concatenate([[self.t], t[order]])
        running = self.running + np.concatenate([[0], np.cumsum(change[order])])
        self.t, self.running = float(t[-1]), int(running[-1])
        terms = self.busy_at[np.minimum(running[:-1], len(self.busy_at) - 1)] * np.diff(t)
        while terms.size:
            m = min(terms.size, self.terms.size - self.k)
            self.terms[self.k : self.k + m] = terms[:m]
            self.k += m
            terms = terms[m:]
            if self.k == self.terms.size:
                self.total += float(self.terms.sum())
                self.k = 0

    def value(self) -> float:
        return self.total + float(self.terms[: self.k].sum())
