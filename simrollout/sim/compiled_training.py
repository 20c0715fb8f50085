"""The training loop on the compiled engine: the rollout side compiled, the trainer in Python.

The compiled loop (:mod:`.compiled_loop`) runs the rollout workers and the group accounting of
:class:`simrollout.sim.training.TrainingLoop`: a queue of group members, each trajectory's
version, a group ready when its last member ends (failed and timed-out members masked), the
admission (async: the bound and the rollout slots, a top-up after every trajectory; sync and
one_step_off: the groups the trainer's top-up counted for the step being collected), the gate the
bodies wait at while the engines load weights, barriers and cancels that end a body's segment
with the step it is in. It returns to Python only for the trainer: when the groups it waits for
are ready (``R_NOTIFY``) and when its update or weight sync ends (``R_TIMER``). The trainer is
the one every engine runs (:class:`simrollout.sim.trainer.Trainer`), with one_step_off's
collector beside it (:mod:`.compiled_procs` runs both); this class is its group book over the
loop's arrays: what the trainer reads there, and its requests (discards, the gate, the timer, a
top-up) written into them, which the compiled loop applies when it resumes
(``compiled_groups.apply_requests``).

Covered: modes ``sync`` (colocated or disaggregated), ``one_step_off`` and ``async``, engines
paused or generating at a sync (``pause_engines_on_sync``), partial rollouts on or off,
over-sampling with leftovers cancelled or carried, ``max_staleness`` or ``staleness_fraction``
with their stale-sample policies, ``sync_every``, ``mini_batch``, the trainer's time models,
``on_failure: mask``. The rest of the loop runs on the other engines
(``Scenario.compiled_gaps``); the fidelity matrix's compiled training rows hold it against the
step engine (docs/fidelity.md).
"""

from __future__ import annotations

import math

import numpy as np

from . import compiled_loop as L
from .compiled_procs import CHANGE, TIMER, WAIT, Channel, Procs
from .trainer import Trainer
from .trainer_time import TrainerClock
from .training import _BLOCK, draw_block
from .training_results import CAUSES, LoopResults, StepRecord


class _Gone:
    """A discarded group as :meth:`LoopResults.length_bias` reads it."""

    def __init__(self, cause: str, members: list[int]):
        self.cause, self.members = cause, members


class CompiledTraining(LoopResults):
    """The training loop of ``cell`` on the compiled engine (``run`` attaches it to its run)."""

    def __init__(self, cell):
        self.cell, self.tr = cell, cell.scn.training
        tr = self.tr
        self.B, self.G, self.n = tr.prompts_per_step, tr.samples_per_prompt, cell.work.n
        self.clock = TrainerClock(self)
        self.steps: list[StepRecord] = []
        self.staleness: list[int] = []
        self.trained_members: list[int] = []
        self.ready: list[int] = []  # ready groups, in the order they became ready
        self._seen = 0  # ready groups read from the loop's list
        self._low = 0  # every group below it is ready, trained or discarded
        self._stale = self._partial = 0
        self.finished = math.nan
        self._token_cum: np.ndarray | None = None
        self._seed, self._rep = cell.scn.seed, cell.rep
        self.trainer = None  # the trainer's generator while it runs
        self.procs: Procs | None = None  # the trainer and the processes it spawned
        self._collecting, self.window_left = False, 0  # sync and one_step_off only

    # ------------------------------------------------------------ the arrays the loop shares
    def arrays(self, c: int) -> list[np.ndarray]:
        """The training loop's slots of the compiled loop's state, S_TASK to S_TASKG (compiled_state)."""
        n, G = self.n, self.G
        ng = n // G + 1
        self.task = np.ones(n)
        self.li = np.zeros(L.NL, dtype=np.int64)
        self.li[L.L_G] = G
        self.li[L.L_NIDLE] = c  # every worker waits for the first groups
        # the trainer woken after the instant's events already scheduled, as SimPy's is (async on
        # the time engines wakes it at once: its rows hold without; a token loop's groups often
        # get ready together, their members' teardowns ending at one instant)
        self.li[L.L_DEFER] = self.tr.mode != "async" or self.cell.scn.workload.tokens is not None
        idle = np.zeros(c + 1, dtype=np.int64)
        idle[:c] = np.arange(c)[::-1]  # worker 0 on top
        self.gs = np.zeros((ng, 4), dtype=np.int64)
        self.gf = np.zeros((ng, 5))
        self.ti = np.zeros((n, 5), dtype=np.int64)
        self.rq = np.zeros(ng, dtype=np.int64)
        self.disc = np.zeros((len(CAUSES), 4))
        self.gen_counts = np.zeros(2)
        blocks = [
            draw_block(self._seed, self._rep, self.tr, "task", b) for b in range((ng + _BLOCK - 1) // _BLOCK)
        ]
        taskg = np.concatenate(blocks)[:ng].copy()  # each prompt's duration factor, as the reference's
        return [self.task, self.li, np.zeros(n, dtype=np.int64), idle, np.zeros(c + 1, dtype=np.int64),
                self.gs, self.gf, self.ti, self.rq, self.disc, self.gen_counts, taskg]  # fmt: skip

    def attach(self, run) -> None:
        """Start the trainer; its first wait asks for the first groups."""
        self.run, self.g_arr = run, run.S[L.S_G]
        self.cell.task_scale = self.task
        self.cell.loop = self
        self.cell.metrics.attach(self.report)
        self.rows = run.rows
        self.steps_done = run.rows["steps_done"]  # read by the trainer's clock
        self._bound()
        self.trainer = Trainer(self).run()
        self.procs = Procs(self.trainer, self._need, self._alarm)
        self._drive()

    # ------------------------------------------------------------ what the loop reads
    @property
    def started(self) -> np.ndarray:
        return self.ti[:, L.T_STARTED].astype(bool)

    @property
    def interrupts(self) -> int:
        """Requests interrupted at a weight sync (at_sync: interrupt), each resumed after it."""
        return int(self.ti[:, L.T_RESUMED].sum())

    @property
    def resumed(self) -> np.ndarray:
        """Which trajectories had a turn interrupted and resumed under newer weights."""
        return self.ti[:, L.T_RESUMED] > 0

    @property
    def gen_steps(self) -> np.ndarray:
        return self.gen_counts if self.tr.partial_rollouts else np.zeros(2)

    @property
    def discard(self) -> dict[str, np.ndarray]:
        return {c: self.disc[k] for k, c in enumerate(CAUSES)}

    @property
    def groups(self) -> dict[int, _Gone]:
        """The discarded groups (the reference keeps every group not trained)."""
        G, gone = self.G, np.flatnonzero(self.gs[: self.li[L.L_NEXTG], L.GS_STATE] == L.DISCARDED)
        return {int(g): _Gone(CAUSES[self.gs[g, L.GS_CAUSE]], list(range(g * G, g * G + G))) for g in gone}

    @property
    def version(self) -> int:
        """The policy version: weight syncs done (kept in the loop's integers)."""
        return int(self.li[L.L_VERSION])

    @property
    def now(self) -> float:
        return float(self.g_arr[L.G_NOW])

    # ------------------------------------------------------------ driving the trainer
    def wake(self) -> None:
        """The loop answered a wait: the groups waited for (it asked with ``R_NOTIFY``), or the
        timer; the processes run to their next waits."""
        if self.trainer is None:
            return
        self.procs.wake(groups=self.run.S[L.S_GI][L.J_REQ] == L.R_NOTIFY)
        self._drive()

    def _drive(self) -> None:
        if self.procs.drive():
            self._end()

    def _need(self, n: int) -> None:
        self.li[L.L_NEED] = n

    def _alarm(self, seconds: float) -> None:
        self.g_arr[L.G_TIMER] = self.now + seconds
        self.li[L.L_TIMER] = 1

    def check_over(self) -> None:
        """The loop's events ran out: the trainer must be done (else it waits for groups no
        trajectory will finish: say so)."""
        if self.trainer is None:
            return
        raise RuntimeError(
            f"the training loop stalled at {self.now:.0f} s: the trainer waits for groups and no "
            "trajectory runs (the compiled engine)"
        )

    def _end(self) -> None:
        """The last step is done (or the budget ran out): groups left are discarded; no more start."""
        self.trainer = None
        self.finished = self.now
        self._pull()
        for g in list(self.ready) + self.live_groups():
            self.drop(int(g), "end")
        self.g_arr[L.G_BOUND] = -1.0
        self.li[L.L_NEED] = self.li[L.L_START] = 0

    # ------------------------------------------------------------ groups
    def _bound(self) -> None:
        """The admission bound the loop starts groups by after every trajectory (async; in sync and
        one_step_off only the trainer's top-ups start groups)."""
        tr = self.tr
        self.g_arr[L.G_BOUND] = (
            (self.version + 1 + tr.ahead) * tr.version_groups if tr.mode == "async" else -1.0
        )

    def _pull(self) -> None:
        """The groups the loop found ready since the last look."""
        k = int(self.li[L.L_RQN])
        self.ready += self.rq[self._seen : k].tolist()
        self._seen = k

    def _live(self) -> np.ndarray:
        """The running groups."""
        top = int(self.li[L.L_NEXTG])
        running = np.flatnonzero(self.gs[self._low : top, L.GS_STATE] == L.RUNNING) + self._low
        self._low = int(running[0]) if running.size else top
        return running

    def _fresh(self, groups: np.ndarray) -> np.ndarray:
        """Which ``groups`` may still train at the current version (async: none of their started
        members lags by more than the bound)."""
        if self.tr.mode != "async" or self.tr.stale_policy == "keep" or not groups.size:
            return np.ones(groups.size, dtype=bool)
        idx = groups[:, None] * self.G + np.arange(self.G)
        v0 = np.where(self.ti[idx, L.T_STARTED] == 1, self.ti[idx, L.T_V0], np.iinfo(np.int64).max)
        return self.version - v0.min(axis=1) <= self.tr.stale_versions

    def drop(self, g: int, cause: str) -> None:
        """Drop group ``g``: its finished members' cost goes to ``cause``; the rest are cancelled
        (queued ones never start, running ones stop at their next step's start)."""
        li, state = self.li, self.gs[g, L.GS_STATE]
        if state == L.READY:
            self.ready.remove(g)
            li[L.L_NREADY] -= 1
        elif state == L.RUNNING:
            li[L.L_LIVE] -= 1
        self.gs[g, L.GS_STATE], self.gs[g, L.GS_CAUSE] = L.DISCARDED, CAUSES.index(cause)
        self.disc[CAUSES.index(cause)] += self.gf[g, 1:]
        self.ti[g * self.G : (g + 1) * self.G, L.T_CANCEL] = 1
        li[L.L_CUT] |= 1
        self.notify()

    # ------------------------------------------------------------ the group book (sim.trainer)
    def ready_groups(self) -> list[int]:
        self._pull()
        return list(self.ready)

    def ready_key(self, g: int) -> tuple[float, int]:
        return self.gf[g, L.GF_READY], g

    def unready(self, batch: list[int]) -> None:
        for g in batch:
            self.ready.remove(g)
        self.li[L.L_NREADY] -= len(batch)

    def live_groups(self) -> list[int]:
        return self._live().tolist()

    def drained(self) -> bool:
        return bool(self.li[L.L_EXH]) and self.li[L.L_LIVE] == 0

    def fresh(self, groups: list[int]) -> list[bool]:
        return self._fresh(np.asarray(groups, dtype=np.int64)).tolist()

    def train(self, batch: list[int]) -> tuple[list[int], np.ndarray, np.ndarray]:
        G = self.G
        members = [i for g in batch for i in range(g * G, g * G + G)]
        self.gs[batch, L.GS_STATE] = L.TRAINED
        self.li[L.L_TRAINED] += len(batch)
        return members, self.ti[members, L.T_V0], self.ti[members, L.T_VEND]

    def masked(self, batch: list[int]) -> int:
        return int(self.gs[batch, L.GS_MASK].sum())

    def mean_end(self, members: list[int]) -> float:
        return float(self.rows["end"][members].mean())

    def busy_seconds(self) -> float:
        # the tier's busy time: its serving engines' when compiled beside the loop, else the step engine's
        return self.cell.tier.busy_seconds if self.cell.exact_tier else math.nan

    def record(self, k: int, start: float, ready: float, t_first: float, t1: float) -> None:
        """No trace: the compiled engine keeps no spans."""

    def top_up(self) -> None:
        """Async: the loop admits groups by its bound when it resumes. Sync and one_step_off:
        the groups the step being collected still needs, over-sampled, are counted now and
        started when the loop resumes."""
        tr, li = self.tr, self.li
        if tr.mode != "async":
            if not self.collecting:
                return
            need = math.ceil(self.window_left * (1.0 + tr.over_sampling) - 1e-9)
            short = need - int(li[L.L_LIVE] + li[L.L_NREADY] + li[L.L_START])
            if short <= 0:
                return
            li[L.L_START] += short
        li[L.L_TOPUP] = 1

    def notify(self) -> None:
        """A change the trainer's processes waiting for one look at (the compiled loop re-reads
        the groups when it resumes)."""
        if self.procs is not None:
            self.procs.changed()

    @property
    def collecting(self) -> bool:
        """A step's groups are being collected (sync, one_step_off); a change when it flips."""
        return self._collecting

    @collecting.setter
    def collecting(self, on: bool) -> None:
        self._collecting = on
        self.notify()

    @property
    def gate_closed(self) -> bool:
        return bool(self.li[L.L_GATE])

    def close(self) -> None:
        """The gate closes: bodies end the step they are in and wait."""
        if not self.li[L.L_GATE]:
            self.li[L.L_GATE] = 1
            self.li[L.L_CUT] |= 2

    def open(self) -> None:
        if self.li[L.L_GATE]:
            self.li[L.L_GATE] = 0
            self.li[L.L_OPEN] = 1

    def barrier(self) -> None:
        self.li[L.L_CUT] |= 2

    def interrupt(self) -> None:
        """Bodies generating stop their turn and resume it when the gate opens (the loop's
        ``_pause``); no prefix cache to clear (no serving engines)."""
        self.li[L.L_CUT] |= 4

    def next_version(self) -> None:
        self.li[L.L_VERSION] += 1
        self._bound()

    @staticmethod
    def wait_groups(n: int) -> tuple[int, int]:
        return WAIT, n

    @staticmethod
    def timer(seconds: float) -> tuple[int, float]:
        return TIMER, seconds

    @staticmethod
    def wait_change() -> tuple[int, None]:
        return CHANGE, None

    @staticmethod
    def channel() -> Channel:
        return Channel()

    def spawn(self, gen) -> None:
        self.procs.spawn(gen)
