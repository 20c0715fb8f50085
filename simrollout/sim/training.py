"""The RL training loop on top of one cell: GRPO groups, training steps, weight sync, staleness.

Beside the rollout workers (which run trajectories from a queue) the loop keeps its groups of
``G`` samples of one prompt (started, ready, discarded, trained) and the policy version, the
number of weight syncs done. The trainer that gathers ``B`` useful groups a step, trains on them
and syncs the weights is :class:`simrollout.sim.trainer.Trainer`, run as a SimPy process;
:class:`TrainingLoop` is its group book over SimPy events. Modes (docs/model.md, "The training
loop"):

- ``sync``: collect a step's groups, train, sync, and only then start the next step's groups;
- ``one_step_off``: collecting step k+1 overlaps training step k (samples lag by one version);
- ``async``: groups are admitted continuously while no sample could exceed ``max_staleness``
  (AReaL's rule: started groups < (version + max_staleness + 1) x B); the trainer takes the first
  ``B`` ready groups.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import simpy

from ..rng import stream
from ..scenario import Training
from .loop_body import LoopBodies
from .records import OK, Row
from .trainer import Trainer
from .trainer_time import TrainerClock
from .training_results import CAUSES, Group, LoopResults, StepRecord
from .workload_draws import CHUNK

_BLOCK = 1024  # prompts / trajectories per random block (the streams are keyed by block)


def draw_block(seed: int, rep: int, tr: Training, kind: str, b: int) -> np.ndarray:
    """Block ``b`` of the loop's draws of one ``kind``: prompts' duration factors (``task``),
    pass rates (``pass``), or a uniform per trajectory (``reward``)."""
    rng = stream(seed, rep, "training", kind, b)
    if kind == "task":
        s = tr.task_spread
        return rng.lognormal(-s * s / 2, s, _BLOCK) if s else np.ones(_BLOCK)
    if kind == "pass":
        ds = tr.dynamic_sampling
        return rng.beta(ds.alpha, ds.beta, _BLOCK)
    return rng.random(_BLOCK)


class TrainingLoop(LoopResults):
    """Runs ``training.steps`` steps on ``cell`` (a :class:`simrollout.sim.model.Cell`)."""

    def __init__(self, cell, trace: list | None = None):
        self.cell, self.env = cell, cell.env
        self.tr: Training = cell.scn.training
        scn, tr = cell.scn, self.tr
        self.B, self.G = tr.prompts_per_step, tr.samples_per_prompt
        self.n = cell.work.n
        self.version = 0
        self.next_index = 0
        self.exhausted = False  # the trajectory budget ran out
        self.v0 = np.zeros(self.n, dtype=np.int32)  # version a trajectory started under
        self.v_end = np.zeros(self.n, dtype=np.int32)  # version when it ended
        self.window_left = 0  # sync: groups still to gather until the next weight sync
        self.clock = TrainerClock(self)
        self.started = np.zeros(self.n, dtype=bool)
        self.end = np.zeros(self.n)  # when a finished trajectory released its slot
        self.steps_done = np.zeros(self.n, dtype=np.int64)
        self.group_of = np.full(self.n, -1, dtype=np.int64)
        cell.task_scale = np.ones(self.n)
        cell.on_generate = self._generated if tr.partial_rollouts else None
        # at_sync: interrupt: requests generating at a sync stop and resume after it
        self.abort_ev = self.env.event()
        self.resumed = np.zeros(self.n, dtype=bool)
        self.v_last = np.zeros(self.n, dtype=np.int32)  # the newest version a sample generated under
        self.interrupts = 0  # requests interrupted
        if tr.at_sync == "interrupt":
            cell.llm_abort, cell.on_resume = (lambda: self.abort_ev), self._resumed
        self.groups: dict[int, Group] = {}  # every group not yet trained (discarded ones included)
        self.live: dict[int, Group] = {}  # running groups
        self.trained_groups = 0
        self.filtered = self.passed = 0  # groups the dynamic-sampling filter dropped / kept
        self.next_group = 0
        self.ready: deque[Group] = deque()
        self.queue = simpy.Store(self.env)
        self.queued = self.running = 0  # trajectories waiting for a worker / running
        self.changed = self.env.event()  # a group became ready or was discarded, or the budget ran out
        self.collecting = False
        self.gate: simpy.Event | None = None  # closed (pending) while colocated engines train
        if tr.placement == "colocated" or tr.pause_engines_on_sync:
            cell.llm_gate = lambda: self.gate
        self.steps: list[StepRecord] = []
        # trajectory fidelity: the loop's bodies, re-read at barriers and version switches
        self.bodies = None if cell.step else LoopBodies(cell, self)
        self.staleness: list[int] = []  # per trained sample
        self.trained_members: list[int] = []  # every trained sample's trajectory index
        self.discard = {c: np.zeros(4) for c in CAUSES}  # worker, sandbox, llm seconds; samples
        self.gen_steps = np.zeros(2)  # generated steps under the start version / a newer one
        self.trace = trace
        self._blocks: dict[tuple, np.ndarray] = {}
        self._seed, self._rep = scn.seed, cell.rep
        self.finished = math.nan
        self._token_cum: np.ndarray | None = None  # running sum of a token workload's turns

    # ------------------------------------------------------------ random inputs per prompt
    def _block(self, kind: str, k: int) -> np.ndarray:
        b = (kind, k // _BLOCK)
        if b not in self._blocks:
            self._blocks[b] = draw_block(self._seed, self._rep, self.tr, kind, b[1])
        return self._blocks[b][k % _BLOCK]

    # ------------------------------------------------------------ groups and trajectories
    def _exhaust(self) -> None:
        """The trajectory budget ran out: say so once to whoever waits for groups."""
        if not self.exhausted:
            self.exhausted = True
            self.notify()

    def _index(self, g: int) -> int | None:
        if self.next_index >= self.n:
            self._exhaust()
            return None
        i = self.next_index
        self.next_index += 1
        self.group_of[i] = g
        self.cell.task_scale[i] = self._block("task", g)
        return i

    def _submit(self, i: int) -> None:
        st = self.cell.chunk(i // CHUNK)
        st.arrival[i - st.lo] = self.env.now  # queue wait counts from here
        self.queued += 1
        self.queue.put(i)

    def _start_group(self) -> bool:
        if self.next_index + self.G > self.n:
            self._exhaust()
            return False
        g = self.next_group
        self.next_group += 1
        members = [self._index(g) for _ in range(self.G)]
        self.groups[g] = self.live[g] = Group(g, members, self.G)
        for i in members:
            self._submit(i)
        return True

    def top_up(self) -> None:
        """Keep enough groups going for the step being collected (sync, one_step_off) or admit
        as many as the staleness bound and the rollout slots allow (async)."""
        tr = self.tr
        if tr.mode == "async":
            bound = (self.version + 1 + tr.ahead) * tr.version_groups
            while (
                len(self.live) + len(self.ready) + self.trained_groups < bound
                and self.queued + self.running + self.G <= max(self.cell.concurrency, self.G)
                and self._start_group()
            ):
                pass
        elif self.collecting:  # the window's groups still to gather, over-sampled
            need = math.ceil(self.window_left * (1.0 + tr.over_sampling) - 1e-9)
            while len(self.live) + len(self.ready) < need and self._start_group():
                pass

    def _worker(self):
        cell = self.cell
        while True:
            i = yield self.queue.get()
            if i is None:
                return
            self.queued -= 1
            if i in cell.cancelled:  # cancelled before it started: never ran
                cell.cancelled.discard(i)
                continue
            self.running += 1
            self.v0[i], self.v_last[i], self.started[i] = self.version, self.version, True
            row = yield from cell.trajectory(i)
            self.running -= 1
            cell.cancelled.discard(i)
            if self.trace is not None:  # the span the cell just recorded
                self.trace[-1][5].update(group=int(self.group_of[i]), version=int(self.v0[i]))
                if self.resumed[i]:
                    self.trace[-1][5].update(resumed_version=int(self.v_last[i]))
            self._done(i, row)
            cell._done += 1
            if cell.progress is not None and cell._done % 4096 == 0:
                cell.progress(4096)
            if self.tr.mode == "async":
                self.top_up()

    def _resumed(self, i: int) -> None:
        """Trajectory ``i``'s interrupted turn resumes under the current version."""
        self.resumed[i], self.v_last[i] = True, self.version
        self.interrupts += 1

    def _generated(self, i: int) -> None:
        self.gen_steps[0 if self.version == self.v0[i] else 1] += 1

    def _done(self, i: int, row: Row) -> None:
        status, worker, sandbox, llm = int(row.status), row.worker, row.sandbox, row.llm
        grp = self.groups[int(self.group_of[i])]
        grp.cost += (worker, sandbox, llm, 1)
        self.end[i], self.steps_done[i], self.v_end[i] = row.end, row.steps_done, self.version
        if grp.state == "discarded":
            self.discard[grp.cause] += (worker, sandbox, llm, 1)
            return
        if status != OK:
            slot = grp.members.index(i)
            used = grp.retries.get(slot, 0)
            if self.tr.on_failure == "retry" and used < self.tr.retries:
                j = self._index(grp.g)
                if j is not None:
                    grp.retries[slot] = used + 1
                    grp.members[slot] = j
                    self._submit(j)
                    return
            if self.tr.on_failure != "mask":
                self.drop(grp, "failures")
                self.top_up()
                return
            grp.masked.append(i)
        grp.left -= 1
        if grp.left == 0:
            self._ready(grp)

    def _ready(self, grp: Group) -> None:
        ds = self.tr.dynamic_sampling
        if ds is not None:
            p = self._block("pass", grp.g)
            # a masked sample scores 0; a group whose rewards are all equal carries no signal
            rewards = [i not in grp.masked and self._block("reward", i) < p for i in grp.members]
            if all(rewards) or not any(rewards):
                self.filtered += 1
                self.drop(grp, "filter")
                self.top_up()
                return
            self.passed += 1
        grp.state, grp.ready_at = "ready", self.env.now
        del self.live[grp.g]
        self.ready.append(grp)
        self.notify()

    def drop(self, grp: Group, cause: str) -> None:
        """Drop a group: its finished samples' cost goes to ``cause``; members still running or
        queued are cancelled (stopped at their next step, their sandboxes torn down)."""
        if grp.state == "ready":
            self.ready.remove(grp)
        self.live.pop(grp.g, None)
        grp.state, grp.cause = "discarded", cause
        self.discard[cause] += grp.cost
        self.cell.cancelled.update(grp.members)
        if self.bodies is not None:
            self.bodies.cancel(grp.members)
        self.notify()

    def notify(self) -> None:
        if not self.changed.triggered:
            self.changed.succeed()
        self.changed = self.env.event()

    # ------------------------------------------------------------ the group book (sim.trainer)
    def fresh(self, groups: list[Group]) -> list[bool]:
        """Which ``groups`` may still train at the current version: in async mode, none of their
        started members lags the policy by more than the bound (a ready group has them all started)."""
        if self.tr.mode != "async" or self.tr.stale_policy == "keep":
            return [True] * len(groups)
        out = []
        for grp in groups:
            started = self.v0[grp.members][self.started[grp.members]]
            out.append(not started.size or self.version - int(started.min()) <= self.tr.stale_versions)
        return out

    @property
    def now(self) -> float:
        return self.env.now

    @property
    def gate_closed(self) -> bool:
        return self.gate is not None

    def ready_groups(self) -> list[Group]:
        return list(self.ready)

    @staticmethod
    def ready_key(grp: Group) -> tuple[float, int]:
        return grp.ready_at, grp.g

    def unready(self, batch: list[Group]) -> None:
        for grp in batch:
            self.ready.remove(grp)

    def live_groups(self) -> list[Group]:
        return list(self.live.values())

    def drained(self) -> bool:
        return self.exhausted and not self.live

    def train(self, batch: list[Group]) -> tuple[list[int], np.ndarray, np.ndarray]:
        members = [i for grp in batch for i in grp.members]
        for grp in batch:
            grp.state = "trained"
            self.trained_groups += 1
            self.groups.pop(grp.g)
        return members, self.v0[members], self.v_end[members]

    @staticmethod
    def masked(batch: list[Group]) -> int:
        return sum(len(grp.masked) for grp in batch)

    def mean_end(self, members: list[int]) -> float:
        return float(self.end[members].mean())

    def busy_seconds(self) -> float:
        return self.cell.tier.busy_seconds if self.cell.step else math.nan

    def record(self, k: int, start: float, ready: float, t_first: float, t1: float) -> None:
        if self.trace is not None:
            self._trace_step(k, start, ready, t_first, t1, self.env.now)

    def open(self) -> None:
        if self.gate is not None:
            self.gate.succeed()
            self.gate = None

    def close(self) -> None:
        """Close the gate: generation waits for the new weights (bodies stop at their step's end)."""
        if self.gate is not None:
            return
        self.gate = self.env.event()
        self.barrier()

    def barrier(self) -> None:
        if self.bodies is not None:
            self.bodies.barrier()

    def next_version(self) -> None:
        self.version += 1

    def interrupt(self) -> None:
        """Requests still generating stop; cached KV is stale."""
        ev, self.abort_ev = self.abort_ev, self.env.event()
        ev.succeed()
        if hasattr(self.cell.tier, "clear_prefix_cache"):
            self.cell.tier.clear_prefix_cache()

    def wait_groups(self, n: int) -> simpy.Event:
        return self.changed

    def wait_change(self) -> simpy.Event:
        return self.changed

    def timer(self, seconds: float) -> simpy.Event:
        return self.env.timeout(seconds)

    def channel(self) -> simpy.Store:
        return simpy.Store(self.env)

    def spawn(self, gen) -> None:
        self.env.process(gen)

    def run(self):
        """The loop as one process: workers, then the mode's collector and trainer."""
        cell = self.cell
        workers = [self.env.process(self._worker()) for _ in range(cell.concurrency)]
        yield self.env.process(Trainer(self).run())
        self.finished = self.env.now
        for grp in list(self.ready) + self.live_groups():
            self.drop(grp, "end")
        for _ in workers:
            self.queue.put(None)
        yield self.env.all_of(workers)
