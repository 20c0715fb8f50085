"""A training loop on a token workload through the compiled loop: the run of
:mod:`.compiled` with its bodies on compiled serving engines (:mod:`.compiled_tokens`), the
serving side's state built from the cell, its arrays grown as the run needs, and the engines'
figures reported as the step engine's tier reports them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from . import compiled_loop as L
from . import compiled_tokens as T
from . import pilot_state as PV
from .compiled import CompiledRun
from .pilot_compiled import CompiledTier, build_state, engine_params, work_arrays
from .workload_draws import CHUNK


class TokenRun(CompiledRun):
    """One cell of a training loop on a token workload through the compiled loop."""

    def __init__(self, cell, training):
        super().__init__(cell, training)
        S, scn, w, c = self.S, cell.scn, cell.work, cell.concurrency
        S[L.S_P][L.P_TOKENS] = 1.0
        n, E = w.n, scn.cluster.inference.engines
        P = engine_params(scn)
        P[PV.P_LOOP], P[PV.P_N] = 1.0, n
        P[PV.P_SLOPE] = float(cell.sub.contention.exec)
        P[PV.P_WEIGHTED] = 1.0  # the loop's load of an exec: its phase's weights (ones without)
        P[PV.P_WC], P[PV.P_WE], P[PV.P_WT] = S[L.S_W][L.PH_EXEC]
        # every chunk's exec overheads, one per call in the workload's order (the chunks are in)
        cover = np.concatenate([cell.chunk(k).draws.call_overhead for k in range((n + CHUNK - 1) // CHUNK)])
        by = S[L.S_BY]
        domains = (np.zeros(by.shape[1]), by[L.PH_CREATE], by[L.PH_EXEC], by[L.PH_TEARDOWN], S[L.S_EXL])
        nr = c + 8  # a body awaits one request at a time; ids are reused once it is done with one
        i1 = np.zeros(n, dtype=np.int64)
        loop = (S[L.S_LI], S[L.S_TI], S[L.S_GENC], S[L.S_TASK], i1, np.zeros(nr, dtype=np.int64),
                np.full(n, -1, dtype=np.int64))  # fmt: skip
        turns = int(np.asarray(w.steps).sum())
        work = work_arrays(w, cover.astype(np.float64))
        self.V = build_state(P, E, n, nr, c + 1, 8 * c + 64 * E + 1024, work, domains, turns + 4096, loop)
        cell.tier = CompiledTier(SimpleNamespace(S=self.V, env=self, cell=cell))
        cell.metrics.attach(cell.tier.report)
        cell.cosim = self

    @property
    def now(self) -> float:
        """The loop's clock (the engines' figures are integrated up to it)."""
        return float(self.S[L.S_G][L.G_NOW])

    def _call(self) -> int:
        return T.run_training(tuple(self.S), self.V)

    def _answer(self, code: int) -> bool:
        """The serving side's request for room: its heap or its requests' figures grown."""
        if code != T.R_ROOM:
            return False
        V, gi = self.V, self.V[PV.S_GI]
        if gi[PV.J_ERR] == 1:
            raise RuntimeError("a waiting request can never fit an engine's KV cache")
        if gi[PV.J_ERR] == 2:
            raise RuntimeError("the compiled serving side ran out of request ids")
        grown = list(V)
        size = V[PV.S_HT].size
        if gi[PV.J_HSIZE] > size - V[PV.S_WQ].shape[1] - 64:  # (pilot_bodies.advance's room)
            for k in (PV.S_HT, PV.S_HS, PV.S_HW, PV.S_HK):
                grown[k] = np.concatenate([V[k], np.zeros(size, V[k].dtype)])
        m = V[PV.S_KVW].size
        room = m - V[PV.S_EI].shape[0] * int(V[PV.S_P][PV.P_MAX_RUN]) - 64  # (compiled_tokens.run's)
        if max(gi[PV.J_REQUESTS], gi[PV.J_NFIN]) > room:
            for k in (PV.S_KVW, PV.S_LAT, PV.S_TTFT, PV.S_TPOT):
                grown[k] = np.concatenate([V[k], np.zeros(m)])
        self.V = tuple(grown)
        self.cell.tier.co.S = self.V
        return True
