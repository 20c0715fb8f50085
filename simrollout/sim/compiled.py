"""The compiled engine: a cell's trajectories through an exact event loop compiled with numba
(:mod:`.compiled_loop`), on the same pre-drawn inputs as the trajectory engine (the cell's chunks,
the serving pilot's luck) and into the same records, metrics and engine busy time.

What it covers (``Scenario.compiled_gaps``): async batches, Poisson arrivals and sync barriers; hosts with
contention curves (``base x m(load at its start)``), operations weighed by phase, contention per
host, service or client; quotas and create-rate limits; failures, retries and timeouts; serving
engines through a pilot. Warm pools, task images, sandbox reuse, shared creates and teardowns,
a loaded inference tier without serving engines, and training loops in other modes or with
over- or dynamic sampling, interrupts, failures other than masked or tokens, run on the other
engines; an async loop's rollout side runs here (:mod:`.compiled_training`).
The body runs in segments that re-read the load at each boundary, as the trajectory engine's do,
without its steady-state sampling.
"""

from __future__ import annotations

import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np

from .. import numba_cache
from ..rng import stream
from ..scenario import Substrate
from . import compiled_loop as L
from . import reserved
from .compiled_fold import Folding
from .compiled_ops import curve_params, rate_params
from .records import Records, row_table
from .substrate_draws import ChunkDetail
from .workload_draws import CHUNK

FIRST_COMPILE_CPU_S = 32  # measured: the loop compiled once, in one process (docs/performance.md)
TOKENS_COMPILE_CPU_S = 84  # measured: a training loop's on serving engines, besides (the same)


def _say_if_compiling(tokens: bool = False) -> None:
    """One line on stderr when numba's cache holds no compiled loop yet (a fresh install): the
    first run compiles it, once, into the user's cache folder (:mod:`simrollout.numba_cache`).
    Said once per run: of a run's cell processes (children of one parent), the first alone."""
    index = getattr(getattr(L.run._cache, "_cache_file", None), "_index_path", None)  # None: no cache
    if index is not None and not os.path.exists(index):
        marker = Path(index).parent / f".compiling-{os.getppid()}"
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:  # a sibling said it
            return
        except OSError:
            pass
        more = f" (a training loop on serving engines: about {TOKENS_COMPILE_CPU_S} s more)" if tokens else ""
        sys.stderr.write(
            f"compiling the event loop (numba), once per install: about {FIRST_COMPILE_CPU_S} s of "
            f"CPU{more}; later runs load it from {os.environ.get('NUMBA_CACHE_DIR', 'the cache')}\n"
        )
        sys.stderr.flush()


def _params(cell) -> dict:
    """The cell's fleet and policy as the loop's arrays."""
    scn, sub, fleet = cell.scn, cell.sub, cell.fleet
    pol, c = scn.policy, cell.concurrency
    tables: list[np.ndarray] = []
    fp = np.stack(
        [curve_params(getattr(sub.contention, ph), tables) for ph in ("create", "exec", "teardown")]
    )
    tsz = np.array([len(tables[int(p[7])]) if p[0] else 0 for p in fp], dtype=np.int64)
    if fp[:, 0].any():  # offsets: tables in the order their phases appended them
        offs = np.cumsum([0] + [len(t) for t in tables])[:-1]
        k = 0
        for p in fp:
            if p[0]:
                p[7] = offs[k]
                k += 1
    tab = np.concatenate(tables) if tables else np.zeros(1)
    rates = [rate_params(getattr(sub.failures, ph)) for ph in ("create", "exec", "teardown")]
    w = sub.contention.weight_rows()
    weights = np.array([w[ph] for ph in ("create", "exec", "teardown")]) if w else np.ones((3, 3))
    domains = {"host": sub.capacity.hosts, "service": 1, "client": scn.cluster.clients}[fleet.scope]
    p = np.zeros(L.NP)
    p[L.P_TIMEOUT] = pol.timeout or math.inf
    p[L.P_RETRIES], p[L.P_BACKOFF] = pol.retries, pol.retry_backoff
    p[L.P_RATE] = sub.create_rate or 0.0
    p[L.P_MINBILL] = sub.billing.minimum_seconds
    p[L.P_LOADED] = float(cell.loaded)
    p[L.P_QUOTA] = float(fleet.quota is not None)
    p[L.P_SCOPE] = {"host": 0, "service": 1, "client": 2}[fleet.scope]
    p[L.P_CLIENTS] = scn.cluster.clients
    p[L.P_BATCH] = pol.batch_size if pol.mode == "sync" else 0
    p[L.P_TIMED] = float(scn.arrivals.kind == "poisson")
    p[L.P_WEIGHTS] = float(w is not None)
    p[L.P_N], p[L.P_C] = cell.work.n, c
    p[L.P_LOOP] = float(scn.training is not None)
    curve = np.asarray(cell.curve, dtype=np.float64)
    return dict(p=p, fp=fp, tab=tab, tsz=tsz, rates=rates, weights=weights, domains=domains, curve=curve)


class CompiledRun:
    """One cell through the compiled loop: its arrays, and the answers to the loop's requests.
    ``training``: the cell's training loop (:class:`.compiled_training.CompiledTraining`), which
    answers the trainer's requests and owns the loop's arrays."""

    def __init__(self, cell, training=None):
        self.cell, self.training = cell, training
        n, c = cell.work.n, cell.concurrency
        q = _params(cell)
        # per trajectory, resident only while in flight (the chunks folded as they end: .compiled_fold)
        self.inputs, self.gen = reserved.zeros((n, 13)), reserved.zeros((n, 3))
        self.rows, self.out = row_table(n, reserved.zeros)  # by name; the loop writes the float matrix
        self.arrival, self.scale = reserved.zeros(n), reserved.zeros(n)
        gi = np.zeros(L.NJ, dtype=np.int64)
        gi[L.J_BHI] = n
        gi[L.J_RESUME] = -1
        # a workload still being drawn (async batches): each chunk's inputs when the loop reaches it
        batch = cell.scn.policy.mode == "async" and cell.scn.arrivals.kind == "batch"
        self.streamed = batch and training is None
        for k in range(0 if self.streamed else (n + CHUNK - 1) // CHUNK):
            self._take(k)
        gi[L.J_READY] = 0 if self.streamed else n
        total = cell.sub.capacity.total
        gi[L.J_AVAIL] = total if total is not None else 0
        heap = c + 2 if training is None else 4 * c + 8  # the loop's cut segments leave their old end
        events = n * (cell.scn.policy.retries + 1) + 1
        self.pool = [np.zeros(1024), np.zeros(1024, dtype=np.int64), np.zeros(4096), np.zeros(4096)]
        wi = np.zeros((c + 1, L.NI), dtype=np.int64)
        wi[:, L.I_EPOCH] = 1
        self.S = [
            np.zeros((c + 1, L.NF)), wi, np.zeros(4), gi,
            np.zeros(heap), np.zeros(heap, dtype=np.int64), np.zeros(heap, dtype=np.int64),
            np.zeros(heap, dtype=np.int64), q["p"], self.inputs,
            np.zeros(cell.sub.capacity.hosts, dtype=np.int64), np.zeros((3, q["domains"])),
            np.zeros(q["domains"]), q["weights"], q["curve"], q["fp"], q["tab"], q["tsz"],
            np.zeros(c + 1, dtype=np.int64), self.out, self.gen, self.arrival, self.scale,
            tuple(x for x, _ in q["rates"]), tuple(y for _, y in q["rates"]),
            reserved.zeros(events), reserved.zeros(events), *self.pool,
            *(training.arrays(c) if training is not None else _no_loop()),
            np.full((n if training is not None else 1, 3), -1, dtype=np.int64),
        ]  # fmt: skip
        self.regions: dict[int, tuple] = {}  # the training loop's chunks of detail in the pools
        self.used = [0, 0]  # steps and calls of the detail pools in use
        self.held: dict[int, ChunkDetail] = {}  # waiting bodies' detail, their chunk's dropped
        self.folding = Folding(self)
        self._ahead: ThreadPoolExecutor | None = None

    def _take(self, k: int) -> int:
        """Chunk ``k``'s draws, their rows in the run's arrays: the trajectories ready after it."""
        cell = self.cell
        cell.work.wait(k)
        st = cell.chunk(k)
        sl = slice(st.lo, st.lo + len(st.inputs))
        self.inputs[sl], self.arrival[sl] = st.inputs, st.arrival
        self.scale[sl] = st.scale if st.scale is not None else 1.0
        st.inputs, st.rows = self.inputs[sl], self.rows[sl]
        st.gen, st.arrival = self.gen[sl], self.arrival[sl]
        return sl.stop

    def start(self) -> None:
        S, pol = self.S, self.cell.scn.policy
        if self.training is not None:  # the workers wait for the trainer's first groups
            self.training.attach(self)
        elif pol.mode == "sync":
            L.batch(tuple(S), L.K_BATCH)
        else:
            for w in range(self.cell.concurrency):
                L.schedule(tuple(S), 0.0, w, L.K_NEXT)

    def _ahead_pool(self) -> ThreadPoolExecutor:
        """The thread that draws the next chunk's substrate draws while the loop runs."""
        if self._ahead is None:
            self._ahead = ThreadPoolExecutor(1, thread_name_prefix="chunk-ahead")
        return self._ahead

    def loop(self) -> None:
        """Run the loop to its end, answering its requests."""
        done = False
        try:
            self._loop()
            done = True
        finally:  # stopped: a draw ahead waiting for its workload ends when the workload is failed
            if self._ahead is not None:
                self._ahead.shutdown(wait=done, cancel_futures=True)

    def _loop(self) -> None:
        cell, S = self.cell, self.S
        gi = S[L.S_GI]
        while True:
            code = self._call()
            if code == L.R_DONE:
                if self.training is not None:
                    self.training.check_over()
                return
            if code in (L.R_TIMER, L.R_NOTIFY):
                if code == L.R_NOTIFY and gi[L.J_REQW] >= 0:  # the worker that found it goes on
                    gi[L.J_RESUME] = gi[L.J_REQW]
                self.training.wake()
                continue
            if self._answer(code):
                continue
            if code == L.R_PROGRESS:
                self.folding.step()
                if cell.progress is not None:
                    cell.progress(int(gi[L.J_DONE] - gi[L.J_TOLD]))
                gi[L.J_TOLD] = gi[L.J_DONE]
                continue
            w = int(gi[L.J_REQW])
            if code == L.R_RETRY:
                self._retry(w)
            elif code == L.R_INPUTS:
                self.folding.step()
                k = int(gi[L.J_READY]) // CHUNK
                gi[L.J_READY] = self._take(k)
                cell.draw_ahead(k + 1, self._ahead_pool())  # the next chunk's, while this one runs
            else:
                self._detail(w)
            gi[L.J_RESUME] = w

    def _call(self) -> int:
        """Run the loop until it needs Python: its request code."""
        S = tuple(self.S)
        return L.run(S) if self.training is None else L.run_training(S)

    def _answer(self, code: int) -> bool:
        """A request of a loop's own (:class:`.compiled_tokens_run.TokenRun`): True when answered."""
        return False

    def _retry(self, w: int) -> None:
        """A retry's draws, from its own stream, in the order the lifecycle uses them."""
        cell, wf, wi = self.cell, self.S[L.S_WF], self.S[L.S_WI]
        i, att = int(wi[w, L.I_I]), int(wi[w, L.I_ATT])
        sub: Substrate = cell.sub
        rng = stream(cell.scn.seed, cell.rep, "retry", sub.name, i, att)
        wf[w, L.F_COLD] = float(sub.cold_start.sample(rng, 1)[0])
        wf[w, L.F_UC], wf[w, L.F_UE] = rng.random(), rng.random()
        wf[w, L.F_TDB] = float(sub.teardown.sample(rng, 1)[0])
        wf[w, L.F_UT] = rng.random()
        wi[w, L.I_HAVE_RD] = 1

    def _detail(self, w: int) -> None:
        """Trajectory's per-step detail into the pools (its chunk's detail kept while needed)."""
        cell, wi = self.cell, self.S[L.S_WI]
        i = int(wi[w, L.I_I])
        c = i // CHUNK
        if self.training is not None:  # the whole chunk's, read by its trajectories from the loop
            self._load_chunk(c)
            wi[w, L.I_DS0], wi[w, L.I_DNS], wi[w, L.I_DC0] = self.S[L.S_TD][i]
            wi[w, L.I_DET] = 1
            return
        if i in self.held:
            d, j = self.held.pop(i), 0
        else:
            if cell.chunks[c].detail is None and i not in cell.chunks[c].draws.kept:
                self._drop_details(c)  # a chunk's detail is about to be drawn: drop the others
            d, j = cell.span(i)
        a, b = int(d.step_off[j]), int(d.step_off[j + 1])
        c0, c1 = int(d.call_off[j]), int(d.call_off[j + 1])
        self._room(b - a, c1 - c0)
        s0, k0 = self.used
        sg, snc, co, ct = self.pool
        sg[s0 : s0 + b - a], snc[s0 : s0 + b - a] = d.step_llm[a:b], d.step_calls[a:b]
        co[k0 : k0 + c1 - c0], ct[k0 : k0 + c1 - c0] = d.call_overhead[c0:c1], d.call_tool[c0:c1]
        wi[w, L.I_DS0], wi[w, L.I_DNS], wi[w, L.I_DC0], wi[w, L.I_DET] = s0, b - a, k0, 1
        self.used = [s0 + b - a, k0 + c1 - c0]

    def _drop_details(self, c: int) -> None:
        """Drop the per-step detail of every chunk but ``c`` and the next trajectory's, keeping
        (in ``held``) the slices of the bodies in flight that have not read theirs yet: each
        chunk's detail is drawn once, and at most two chunks' are kept, with at most one
        trajectory's slice per body in flight."""
        cell, wi, gi = self.cell, self.S[L.S_WI], self.S[L.S_GI]
        waiting = wi[:, L.I_DET] == 0  # (a worker done with its last trajectory counts: it may wait)
        keep = {c, int(gi[L.J_NEXT]) // CHUNK}
        for k, st in cell.chunks.items():
            if st.detail is None or k in keep:
                continue
            d = st.detail
            for i in wi[waiting & (wi[:, L.I_I] // CHUNK == k), L.I_I].tolist():
                j = i - st.lo
                a, b = int(d.step_off[j]), int(d.step_off[j + 1])
                c0, c1 = int(d.call_off[j]), int(d.call_off[j + 1])
                steps, calls = slice(a, b), slice(c0, c1)
                parts = (d.step_llm[steps], d.step_calls[steps], d.call_tool[calls], d.call_overhead[calls])
                self.held[i] = ChunkDetail.one(*(x.copy() for x in parts))
            st.detail = None
        live = set(wi[waiting, L.I_I].tolist())  # held slices of trajectories no longer waiting
        for i in [i for i in self.held if i not in live]:
            del self.held[i]

    def _load_chunk(self, c: int) -> None:
        """Chunk ``c``'s per-step detail into the pools, beside the chunks whose trajectories are
        still running with theirs (the rest dropped); every trajectory's offsets in S[L.S_TD]."""
        cell, wi, td = self.cell, self.S[L.S_WI], self.S[L.S_TD]
        live = wi[:, L.I_DET] == 1
        busy = set((wi[live, L.I_I] // CHUNK).tolist())
        for k in [k for k in self.regions if k not in busy]:
            d, _, _ = self.regions.pop(k)
            td[k * CHUNK : k * CHUNK + len(d.step_off) - 1, 1] = -1
            if k in cell.chunks:
                cell.chunks[k].detail = None
        parts = [(k, *self.regions[k]) for k in sorted(self.regions)] + [(c, cell.detail_of(c), -1, -1)]
        sb, cb, regions = 0, 0, {}
        for k, d, old_s, old_c in parts:
            lo, m = k * CHUNK, len(d.step_off) - 1
            if old_s < 0:  # new: its trajectories' offsets
                td[lo : lo + m, 0] = sb + d.step_off[:-1]
                td[lo : lo + m, 1] = np.diff(d.step_off)
                td[lo : lo + m, 2] = cb + d.call_off[:-1]
            else:  # moved: its offsets, and the running workers' that read it
                td[lo : lo + m, 0] += sb - old_s
                td[lo : lo + m, 2] += cb - old_c
                mine = live & (wi[:, L.I_I] // CHUNK == k)
                wi[mine, L.I_DS0] += sb - old_s
                wi[mine, L.I_DC0] += cb - old_c
            regions[k] = (d, sb, cb)
            sb, cb = sb + len(d.step_llm), cb + len(d.call_tool)
        ds = [d for _, d, _, _ in parts]
        self.pool = [np.concatenate([d.step_llm for d in ds]).astype(np.float64),
                     np.concatenate([d.step_calls for d in ds]).astype(np.int64),
                     np.concatenate([d.call_overhead for d in ds]).astype(np.float64),
                     np.concatenate([d.call_tool for d in ds]).astype(np.float64)]  # fmt: skip
        self.S[L.S_SG : L.S_CT + 1] = self.pool
        self.regions = regions

    def _room(self, steps: int, calls: int) -> None:
        """Make room in the pools: keep only the details of trajectories in flight (and grow)."""
        sg, snc, co, ct = self.pool
        if self.used[0] + steps <= sg.size and self.used[1] + calls <= co.size:
            return
        wi = self.S[L.S_WI]
        live = np.flatnonzero(wi[:, L.I_DET] == 1)
        calls_of = [int(snc[wi[w, L.I_DS0] : wi[w, L.I_DS0] + wi[w, L.I_DNS]].sum()) for w in live]
        need_s = int(wi[live, L.I_DNS].sum()) + steps
        need_c = sum(calls_of) + calls
        new = [np.zeros(max(2 * need_s, sg.size)), np.zeros(max(2 * need_s, sg.size), dtype=np.int64),
               np.zeros(max(2 * need_c, co.size)), np.zeros(max(2 * need_c, co.size))]  # fmt: skip
        s, k = 0, 0
        for w, nc in zip(live, calls_of):
            a, ns, c0 = wi[w, L.I_DS0], wi[w, L.I_DNS], wi[w, L.I_DC0]
            new[0][s : s + ns], new[1][s : s + ns] = sg[a : a + ns], snc[a : a + ns]
            new[2][k : k + nc], new[3][k : k + nc] = co[c0 : c0 + nc], ct[c0 : c0 + nc]
            wi[w, L.I_DS0], wi[w, L.I_DC0] = s, k
            s, k = s + ns, k + nc
        self.pool = new
        self.S[L.S_SG : L.S_CT + 1] = new
        self.used = [s, k]

    def finish(self) -> None:
        """Fold every chunk left into the cell's metrics; the fleet's peak and the bodies' times."""
        cell, gi = self.cell, self.S[L.S_GI]
        self.folding.finish()
        cell.fleet.peak_sandboxes = int(gi[L.J_PEAK])
        if cell.progress is not None and gi[L.J_DONE] > gi[L.J_TOLD]:
            cell.progress(int(gi[L.J_DONE] - gi[L.J_TOLD]))


# the state's slots by type (F: float64, I: int64; 1, 2 dimensions; T: a tuple of three F1)
_KINDS = (
    "F2 I2 F1 I1 F1 I1 I1 I1 F1 F2 I1 F2 F1 F2 F1 F2 F1 I1 I1 F2 F2 F1 F1 T T F1 F1 F1 I1 F1 F1 F1 "
    "I1 I1 I1 I1 I2 F2 I2 I1 F2 F1 F1 I2"
)


def example_state() -> tuple:
    """A state of the loop's types (``CompiledRun.S``), its arrays of one element: the signature
    the loop compiles for, without a cell."""
    one = {"F1": np.zeros(1), "I1": np.zeros(1, dtype=np.int64), "F2": np.zeros((1, 1))}
    one["I2"], one["T"] = np.zeros((1, 1), dtype=np.int64), (one["F1"],) * 3
    return tuple(one[k] for k in _KINDS.split())


def compile_loop(S=None, training: bool = False, tokens: bool = False, V=None) -> float:
    """Compile the loop (and ``training``: a training loop's entry; ``tokens``: a training loop's on
    serving engines, with the serving state ``V``) for the state ``S``'s types (default:
    :func:`example_state`'s, :func:`.compiled_tokens.example_state`'s), or load it
    from numba's cache (``cache=True``), once in this process: the seconds it took, 0 once done.
    On a fresh install a run's pool compiles it while the pilots run
    (:mod:`simrollout.run.executors`) and each cell process loads it: compiled once, not once in
    each cell process at the same time."""
    i8 = numba.int64
    entries = [(L.run, ()), (L.schedule, (numba.float64, i8, i8)), (L.batch, (i8,))]
    entries += [(L.run_training, ())] * training
    if tokens:  # (imported only then: the serving side's modules are not a plain cell's start-up)
        from . import compiled_tokens as T

        entries.append((T.run_training, None))
    todo = [(f, args) for f, args in entries if not f.signatures]
    if not todo:
        return 0.0
    t0 = time.perf_counter()
    _say_if_compiling(tokens)
    sig = numba.typeof(tuple(S) if S is not None else example_state())
    for f, args in todo:
        if args is None:  # the token loop's entry: both states
            args = (numba.typeof(V if V is not None else T.example_state()),)
        f.compile((sig, *args))
    # with the compile the run's pool made for its cells, told by the first cell it loads in
    return time.perf_counter() - t0 + numba_cache.COMPILED.pop("seconds", 0.0)


def _no_loop() -> list[np.ndarray]:
    """The training loop's arrays of a cell without one (:meth:`CompiledTraining.arrays`)."""
    i1, i4 = np.zeros(1, dtype=np.int64), np.zeros((1, 4), dtype=np.int64)
    return [np.zeros(0), np.zeros(L.NL, dtype=np.int64), i1, i1, i1, i4, np.zeros((1, 5)), i4, i1,
            np.zeros((6, 4)), np.zeros(2), np.zeros(1)]  # fmt: skip


def run_compiled(cell, kind: type[CompiledRun] = CompiledRun) -> Records | None:
    """Run ``cell`` (a :class:`simrollout.sim.model.Cell` built at trajectory fidelity) through the
    compiled loop, as a run of ``kind`` (a training loop on serving engines:
    :class:`.compiled_tokens_run.TokenRun`); its ``acc`` and records as :meth:`Cell.run` leaves them."""
    training = None
    if cell.scn.training is not None:
        from .compiled_training import CompiledTraining

        training = CompiledTraining(cell)
        if cell.scn.workload.tokens is not None and kind is CompiledRun:
            raise ValueError("a training loop on serving engines runs as a compiled_tokens_run.TokenRun")
    run = kind(cell, training)
    V = getattr(run, "V", None)  # a token loop's serving state
    cell.compile_seconds = compile_loop(run.S, training is not None, V is not None, V)
    run.start()
    run.loop()
    run.finish()
    if not cell.keep:
        return None
    return Records(**{f: np.concatenate([getattr(r, f) for r in cell.kept]) for f in Records.fields()})
