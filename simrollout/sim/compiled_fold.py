"""A compiled cell's finished trajectories folded into its metrics while the loop runs, so that
what it holds is what is in flight: each chunk, once its every trajectory ended (and every chunk
before it was folded), goes into the metrics store (and the records' Parquet file) and its rows'
pages are handed back (:mod:`.reserved`); the bodies' starts and ends before the loop's current
time go into the engines' busy time (:class:`.load.BusyFold`). The chunks are folded in their
order, as they would be at the run's end, so the numbers are the same."""

from __future__ import annotations

import numpy as np

from . import compiled_loop as L
from .load import BusyFold
from .records import R_ATTEMPTS
from .reserved import release


class Folding:
    """The folds of one :class:`.compiled.CompiledRun`: :meth:`step` at the loop's returns,
    :meth:`finish` at its end."""

    def __init__(self, run) -> None:
        self.run = run
        cell = run.cell
        self.next = 0  # the first chunk not folded
        self.on = self.off = 0  # body starts and ends folded
        self.busy = BusyFold(cell._busy_at) if cell.curve else None
        self.free = not cell.keep  # kept records read the arrays after the run
        self.during = run.training is None  # the training loop's chunks fold at its end

    def step(self) -> None:
        """Fold what is finished: the chunks whose trajectories all ended, in order; the bodies'
        starts and ends before now (the loop's events to come are not earlier)."""
        if not self.during:
            return
        run, cell = self.run, self.run.cell
        while self.next in cell.chunks:
            st = cell.chunks[self.next]
            hi = st.lo + len(st.ran)
            if not (run.out[st.lo : hi, R_ATTEMPTS] > 0).all():  # a trajectory not ended
                break
            self._chunk(self.next)
            self.next += 1
        self._bodies(float(run.S[L.S_G][L.G_NOW]))

    def _chunk(self, k: int) -> None:
        run, cell = self.run, self.run.cell
        st = cell.chunks[k]
        lo, hi = st.lo, st.lo + len(st.ran)
        st.ran[:] = True
        st.left = 0
        cell.finish_chunk(k)
        if self.free:
            for a in (run.inputs, run.rows, run.gen, run.arrival, run.scale):
                release(a, lo, hi)
            cell.work.release(lo, hi)

    def _bodies(self, until: float) -> None:
        """Fold the bodies' starts and ends before ``until`` (all of them: ``inf``)."""
        gi, on, off = self.run.S[L.S_GI], self.run.S[L.S_ON], self.run.S[L.S_OFF]
        a, c = self.on, self.off
        b = a + int(np.searchsorted(on[a : gi[L.J_NON]], until, side="left"))
        d = c + int(np.searchsorted(off[c : gi[L.J_NOFF]], until, side="left"))
        if self.busy is not None:
            self.busy.add(on[a:b], off[c:d])
        if self.free:
            release(on, a, b)
            release(off, c, d)
        self.on, self.off = b, d

    def finish(self) -> None:
        """After the loop: every chunk left (the training loop's: those that started), then
        every body's start and end."""
        run, cell = self.run, self.run.cell
        started = run.S[L.S_TI][:, L.T_STARTED] if run.training is not None else None
        for k in sorted(cell.chunks):
            st = cell.chunks[k]
            st.ran[:] = True if started is None else started[st.lo : st.lo + len(st.ran)]
            st.left = 0
            if st.ran.any() and started is None:
                self._chunk(k)
            elif st.ran.any():
                cell.finish_chunk(k)
            else:  # the training loop stopped before its budget: none of these started
                del cell.chunks[k]
        self._bodies(np.inf)
        cell.busy_fold = self.busy
