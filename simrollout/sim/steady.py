"""The steady state of an async batch run at trajectory fidelity, one wait per trajectory.

Once every worker is busy and the queue is far from dry, the load a trajectory meets is a draw
from a distribution that changes slowly. The cell runs trajectories in full (every create, exec
share and teardown placed on the fleet) and keeps, in a sliding window, what each met: its create
and teardown multipliers, its body's generation and exec multipliers, and the load on its domain.
Once the window is full, fifteen trajectories in sixteen wait their whole lifecycle at once, at the
multipliers of a window trajectory drawn at random (jointly); the sixteenth runs in full and
refreshes the window, so the window follows the load as it settles. One-wait trajectories count
in the load the others read: their bodies in the engines' load (their starts and ends applied in
time order) and, per domain, their share of the fleet's operations. A trajectory that could fail
at the highest load a sample met, or reach its deadline, runs in full, as do the ramp, the first window
and the last trajectories before the drain.

Used only where the fidelity matrix compares it with the step engine (docs/fidelity.md, rows
``.../12k``): async batch runs without warm pools, task images, reuse, a binding quota, shared
creates, a training loop or a timeline.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..rng import stream
from .records import INPUTS, OK
from .substrate_draws import fails_within
from .workload_draws import CHUNK

if TYPE_CHECKING:
    from .cell_view import CellView

_RISK = 1.25  # as the trajectory engine's: a trajectory whose end times this passes its deadline runs in full
_FULL = 16  # one trajectory in this many runs in full and refreshes the window
_COL = {k: n for n, k in enumerate(INPUTS)}


class Steady:
    """The sliding window and the one-wait trajectories of one cell."""

    def __init__(self, cell: CellView):
        c = cell.concurrency
        self.cell = cell
        self.size, self.first, self.last = _bounds(c, cell.work.n)
        self.block = max(c, 512)  # trajectories planned at once, at the window as it is then
        self.table = np.zeros((self.size, 5))  # create, x_l, x_e, teardown, domain load
        self.kept = 0  # samples written (the window is full from self.size on)
        self.unit = 0.0  # the fleet's load per domain per trajectory in flight (running mean)
        self.hi = 0.0  # the highest load (+ itself) any sample met: failures are bounded there
        self.p_create = self.p_exec = 1.0
        self._body: dict[int, tuple[float, float, float]] = {}  # a full trajectory's body multipliers
        self.lean = 0  # one-wait trajectories in flight
        self.ran = 0  # one-wait trajectories run

    def report(self, store, out: dict) -> None:
        """The share of the cell's trajectories it ran as one wait (a MetricsStore part)."""
        out["one_wait_fraction"] = self.ran / store.acc.n if store.acc.n else 0.0

    @staticmethod
    def applies(cell: CellView) -> bool:
        """The run has a steady state this model covers, long enough to be worth a window."""
        scn, pol, fleet = cell.scn, cell.scn.policy, cell.fleet
        plain = not (pol.warm_pool or scn.workload.images or pol.reuse or fleet.quota is not None)
        size, first, last = _bounds(cell.concurrency, cell.work.n)
        long = last >= first + 2 * size  # a window, then as much again
        return (
            not cell.step and cell.steady_run and cell.loaded and plain and long
            and not fleet.shared and scn.training is None
        )  # fmt: skip

    # ------------------------------------------------------------ the window
    def body(self, i: int, x_l: float, x_e: float, dom: int) -> None:
        """A full trajectory's body starts at the steady load with these multipliers."""
        if i < self.first:
            return
        fleet = self.cell.fleet
        self._body[i] = (x_l, x_e, fleet.load(dom))
        domains = len(fleet.ops)
        busy = sum(fleet.ops) + sum(fleet.exec_load) + fleet.bg * domains
        self.unit += (busy / (self.cell.concurrency * domains) - self.unit) / min(self.kept + 1, self.size)

    def forget(self, i: int) -> None:
        """A full trajectory that failed, retried or timed out: not a sample."""
        self._body.pop(i, None)

    def done(self, i: int, create: float, teardown: float) -> None:
        """A full trajectory ended on its first attempt: ``create`` and ``teardown`` are its
        multipliers (latency over base); a sample when its body ran at the steady load."""
        got = self._body.pop(i, None)
        if got is None:
            return
        self.table[self.kept % self.size] = (create, *got[:2], teardown, got[2])
        self.kept += 1
        if got[2] + 1.0 > self.hi:  # the failure bounds a one-wait trajectory must stay within
            self.hi = got[2] + 1.0
            fail = self.cell.fleet.fail
            self.p_create, self.p_exec = fail["create"](self.hi), fail["exec"](self.hi)

    # ------------------------------------------------------------ one wait per trajectory
    def takes(self, i: int) -> bool:
        return self.kept >= self.size and i % _FULL and i < self.last and self.cell.settled()

    def _plan(self, st, k: int) -> None:
        """Block ``k`` of chunk ``st`` as one wait each, at multipliers drawn from the window as it
        is now: their times, and which must run in full (they could fail or time out)."""
        cell, b = self.cell, self.block
        if st.plan is None:
            n = len(st.inputs)
            st.plan = {}
            st.one_wait, st.t0 = np.zeros(n, dtype=bool), np.zeros(n)
            st.times = np.zeros((n, 6))  # create, body, teardown, generation, generating share, overhead
            st.fill = lambda: _fill(st, cell.sub.billing.minimum_seconds)
        lo, hi = k * b, min((k + 1) * b, len(st.inputs))
        inp = st.inputs[lo:hi]
        rng = stream(cell.scn.seed, cell.rep, "steady", cell.sub.name, cell.concurrency, st.lo + lo)
        create, x_l, x_e, tear, _ = self.table[rng.integers(self.size, size=hi - lo)].T
        col = {k: inp[:, n] for k, n in _COL.items()}
        lat = col["cold"] * create
        luck = st.scale[lo:hi] if st.scale is not None else 1.0
        g = col["llm"] * luck * x_l
        over = col["overhead"] * x_e
        busy = col["setup"] + g + over + col["tool"] + col["reward"]
        td = col["teardown"] * tear
        share = np.divide(g, busy, out=np.zeros_like(g), where=busy > 0)
        st.times[lo:hi] = np.column_stack([lat, busy, td, g, share, over])
        risky = (col["u_create"] < self.p_create) | fails_within(col["u_exec"], self.p_exec, col["calls"])
        risky |= lat + busy * _RISK + td > (cell.scn.policy.timeout or math.inf)
        st.plan[k] = (risky.tolist(), (lat + busy + td).tolist(), lat.tolist(), busy.tolist(), share.tolist())

    def start(self, i: int) -> float | None:
        """Start trajectory ``i`` as one wait: returns how long it waits (then call :meth:`end`),
        or None without starting it when it must run in full (it could fail or time out)."""
        cell = self.cell
        st = cell.chunk(i // CHUNK)
        j = i - st.lo
        k = j // self.block
        if st.plan is None or k not in st.plan:
            self._plan(st, k)
        risky, total, lat, busy, share = st.plan[k]
        r = j - k * self.block
        if risky[r]:
            return None
        fleet = cell.fleet
        start = cell.env.now
        wait = fleet._rate_delay() if cell.sub.create_rate is not None else 0.0
        st.rows["start"][j], st.t0[j], st.one_wait[j] = start, start + wait, True
        b0 = start + wait + lat[r]
        cell.later(b0, b0 + busy[r], share[r])
        cell.started = i + 1
        self.lean += 1
        fleet.bg = self.lean * self.unit
        self.ran += 1
        return wait + total[r]

    def end(self, i: int) -> None:
        """One-wait trajectory ``i`` has waited its lifecycle."""
        self.lean -= 1
        self.cell.fleet.bg = self.lean * self.unit
        self.cell.record(i, self.cell.chunk(i // CHUNK), None)


def _bounds(c: int, n: int) -> tuple[int, int, int]:
    """For ``n`` trajectories at concurrency ``c``: the window's samples; the first trajectory kept
    as a sample (the burst start has decorrelated); the first that runs in full again (the
    drain's ramp down)."""
    return max(c, 1024), 4 * c, n - 3 * c


def _fill(st, min_bill: float) -> None:
    """The rows of a chunk's one-wait trajectories, from their start times and planned times."""
    m = st.one_wait
    if not m.any():
        return
    lat, busy, td, g, share, over = st.times[m].T
    t0, rows = st.t0[m], st.rows
    filled = {
        "end": t0 + lat + busy + td,
        "cold": lat,
        "acquire_wait": t0 - rows["start"][m],  # the create-rate token's wait
        "worker": lat + busy - g + td,
        "sandbox": np.maximum(lat + busy + td, min_bill),
        "llm": g,
        "attempts": 1,
        "status": OK,
        "warm": 0,
        "steps_done": st.inputs[m, _COL["steps"]],
        "overhead": over,
        "teardown": td,
        "lost": 0.0,
    }
    for name, value in filled.items():
        rows[name][m] = value
    st.gen[m] = np.column_stack([t0 + lat, t0 + lat + busy, share])
