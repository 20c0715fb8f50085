"""A cell's trajectories a chunk at a time: their inputs, drawn when the first of the chunk is
needed, their output rows, and the records each finished chunk folds into the cell's accumulator
(so memory does not grow with the number of trajectories)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..rng import stream
from .records import INPUTS as _IN
from .records import ROW_DTYPE, STATUS, Row, records_of
from .serving_pilot import phases
from .substrate_draws import ChunkDetail, SubstrateDraws, arrival_gaps, chunk_detail, draw_substrate
from .workload_draws import CHUNK, sums_at_once


class Chunk:
    """Inputs and outputs of one chunk of trajectories while any of them is in flight."""

    def __init__(self, lo: int, inputs: np.ndarray, draws: SubstrateDraws, arrival: np.ndarray):
        self.lo, self.inputs, self.draws, self.arrival = lo, inputs, draws, arrival
        self.rows = np.zeros(len(inputs), dtype=ROW_DTYPE)  # each trajectory's row, by name
        self.gen = np.zeros((len(inputs), 3))  # body start, end, generating share (GPU estimate)
        self.left = len(inputs)
        self.ran = np.zeros(len(inputs), dtype=bool)  # rows written (the training loop starts a subset)
        self.detail: ChunkDetail | None = None  # per-step detail, drawn when a body needs it
        self.scale: np.ndarray | None = None  # per trajectory: its luck (serving pilot)
        # the steady state's one-wait trajectories (simrollout.sim.steady): their plan, which
        # rows they wrote, when each could start its create, and how their rows are filled
        self.plan: dict | None = None
        self.one_wait: np.ndarray | None = None
        self.t0: np.ndarray | None = None
        self.times: np.ndarray | None = None
        self.fill: Callable[[], None] | None = None


class ChunkRows:
    """The chunks of a :class:`simrollout.sim.model.Cell` (a part of it): drawn on demand, each
    trajectory's row written when it ends, a chunk folded into ``acc`` (and handed to ``sink``,
    or kept when ``keep``) once its last trajectory ended."""

    def _init_chunks(self) -> None:
        self.chunks: dict[int, Chunk] = {}
        # exec overhead and tool latency sums drawn at once (trajectory fidelity; the training
        # loop's bodies read every step, so its cells draw the calls, as does the fidelity matrix)
        self._summed = sums_at_once(self.scn, self.step)
        self._last_arrival = 0.0  # of the latest chunk whose arrivals were drawn
        self._drawn_ahead: dict = {}  # chunks being drawn ahead in a thread (their futures)

    def chunk(self, c: int) -> Chunk:
        """The chunk's state, drawn when its first trajectory is needed (or ahead of it:
        :meth:`draw_ahead`)."""
        st = self.chunks.get(c)
        if st is None:
            ahead = self._drawn_ahead.pop(c, None)
            d, inputs, scale = ahead.result() if ahead is not None else self._draw_chunk(c)
            arrival = np.zeros(len(inputs))
            if self.scn.arrivals.kind == "poisson":  # in chunk order: each continues the last
                gaps = arrival_gaps(self.scn, self.rep, c, len(inputs))
                arrival = self._last_arrival + np.cumsum(gaps)
                self._last_arrival = float(arrival[-1])
            st = self.chunks[c] = Chunk(c * CHUNK, inputs, d, arrival)
            st.scale = scale
        return st

    def _draw_chunk(self, c: int) -> tuple[SubstrateDraws, np.ndarray, np.ndarray | None]:
        """Chunk ``c``'s substrate draws, its inputs' columns and its trajectories' serving luck:
        each from the chunk's own streams, so drawn in any order or thread, the same."""
        w, lo = self.work, c * CHUNK
        d = draw_substrate(self.scn, self.sub, self.rep, w, c, detail=not self._summed)
        sl = slice(lo, lo + len(d.cold))
        cols = {"cold": d.cold, "warm": d.warm, "teardown": d.teardown, "u_create": d.u_create,
                "u_exec": d.u_exec, "u_teardown": d.u_teardown, "calls": w.calls[sl], "llm": w.llm[sl],
                "overhead": d.overhead, "tool": w.tool[sl], "setup": w.setup[sl],
                "reward": w.reward[sl], "steps": w.steps[sl]}  # fmt: skip
        inputs = np.column_stack([cols[k] for k in _IN])
        scale = None
        if self.pilot is not None:
            n = len(inputs)
            phase = phases(w.n, self.concurrency, self.scn, lo, lo + n)
            rng = stream(self.scn.seed, self.rep, "serving", self.sub.name, self.concurrency, c)
            scale = self.pilot.draw(rng, w.llm[sl], phase)
        return d, inputs, scale

    def draw_ahead(self, c: int, pool) -> None:
        """Draw chunk ``c`` in ``pool`` (a thread) while the run goes on, once its workload is in."""
        if c in self.chunks or c in self._drawn_ahead or c * CHUNK >= self.work.n:
            return

        def draw():
            self.work.wait(c)
            return self._draw_chunk(c)

        self._drawn_ahead[c] = pool.submit(draw)

    def arrival(self, i: int) -> float:
        return float(self.chunk(i // CHUNK).arrival[i % CHUNK])

    def finish_chunk(self, c: int) -> None:
        st = self.chunks.pop(c)
        if st.fill is not None:
            st.fill()
        ran = slice(None) if st.ran.all() else st.ran
        rec = records_of(st.rows[ran], st.arrival[ran])
        self.metrics.add(rec, None if self.step else st.gen)
        if self.sink is not None:
            self.sink(rec, st.lo)
        if self.keep:
            self.kept.append(rec)

    def close(self) -> None:
        """Fold in the chunks whose every trajectory was not started (the training loop stops
        before its budget): their rows that ran."""
        for c in sorted(self.chunks):
            if self.chunks[c].ran.any():
                self.finish_chunk(c)
        self.chunks.clear()

    def record(self, i: int, st: Chunk, row: Row | None) -> None:
        """Trajectory ``i`` ended: its row (None: a one-wait trajectory's, filled with its chunk)."""
        if row is not None:
            st.rows[i - st.lo] = row
            if self.trace is not None:
                self._trace(i, row)
        st.ran[i - st.lo] = True
        st.left -= 1
        if st.left == 0:
            self.finish_chunk(i // CHUNK)

    def _trace(self, i: int, row: Row) -> None:
        """Spans of a timeline (simrollout.run.timeline): the trajectory, and its sandbox's create."""
        start, end, cold, waited = row.start, row.end, row.cold, row.acquire_wait
        status, steps, attempts = int(row.status), int(row.steps_done), int(row.attempts)
        args = {"status": STATUS.get(status, "lost"), "steps": steps, "attempts": attempts}
        if cold > 0 and attempts == 1:
            self.trace.append(("trajectories", i, "sandbox create", start + waited, cold, {}))
        self.trace.append(("trajectories", i, f"trajectory {i}", start, end - start, args))

    # ------------------------------------------------------------ per-step detail
    def detail_of(self, c: int) -> ChunkDetail:
        st = self.chunks[c]
        if st.detail is None:
            st.detail = chunk_detail(self.scn, self.sub, self.rep, self.work, c, summed=self._summed)
        return st.detail

    def span(self, i: int) -> tuple[ChunkDetail, int]:
        """Trajectory ``i``'s per-step detail and its index within it: kept when the workload
        was drawn if the body is long, else the chunk drawn again."""
        st = self.chunks[i // CHUNK]
        if i in st.draws.kept and st.detail is None:
            return ChunkDetail.one(*self.work.kept[i], st.draws.kept[i]), 0
        return self.detail_of(i // CHUNK), i - st.lo
