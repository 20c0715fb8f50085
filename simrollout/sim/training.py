"""The RL training loop on top of one cell: GRPO groups, training steps, weight sync, staleness.

Beside the rollout workers (which run trajectories from a queue) two plain-generator processes
make the loop: a *collector* that starts groups of ``G`` samples of one prompt and gathers ``B``
useful groups for a step, and a *trainer* that trains on them and syncs the weights. The policy
version is explicit: the number of weight syncs done. Modes (docs/model.md, "The training loop"):

- ``sync``: collect a step's groups, train, sync, and only then start the next step's groups;
- ``one_step_off``: collecting step k+1 overlaps training step k (samples lag by one version);
- ``async``: groups are admitted continuously while no sample could exceed ``max_staleness``
  (AReaL's rule: started groups < (version + max_staleness + 1) x B); the trainer takes the first
  ``B`` ready groups.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import simpy

from ..rng import stream
from ..scenario import LinearTime, Training
from .loop_body import LoopBodies
from .records import OK
from .training_results import CAUSES, LoopResults, StepRecord
from .workload_draws import CHUNK

_BLOCK = 1024  # prompts / trajectories per random block (the streams are keyed by block)


@dataclass
class Group:
    """The ``G`` samples of one prompt: a group is ready when every member is done."""

    g: int
    members: list[int]
    left: int
    retries: dict[int, int] = field(default_factory=dict)  # member slot -> retries used
    masked: list[int] = field(default_factory=list)  # failed or timed out: zero-advantage samples
    state: str = "running"  # running -> ready -> trained, or discarded
    cause: str = ""
    cost: np.ndarray = field(default_factory=lambda: np.zeros(4))  # worker, sandbox, llm s; samples
    ready_at: float = 0.0  # when its last member ended


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
        self.started = np.zeros(self.n, dtype=bool)
        self.end = np.zeros(self.n)  # when a finished trajectory released its slot
        self.steps_done = np.zeros(self.n, dtype=np.int64)
        self.group_of = np.full(self.n, -1, dtype=np.int64)
        cell.task_scale = np.ones(self.n)
        cell.on_generate = self._generated if tr.partial_rollouts else None
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
            rng = stream(self._seed, self._rep, "training", kind, b[1])
            tr = self.tr
            if kind == "task":
                s = tr.task_spread
                x = rng.lognormal(-s * s / 2, s, _BLOCK) if s else np.ones(_BLOCK)
            elif kind == "pass":
                ds = tr.dynamic_sampling
                x = rng.beta(ds.alpha, ds.beta, _BLOCK)
            else:  # "reward": a uniform per trajectory
                x = rng.random(_BLOCK)
            self._blocks[b] = x
        return self._blocks[b][k % _BLOCK]

    # ------------------------------------------------------------ groups and trajectories
    def _exhaust(self) -> None:
        """The trajectory budget ran out: say so once to whoever waits for groups."""
        if not self.exhausted:
            self.exhausted = True
            self._notify()

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
        st = self.cell._chunk(i // CHUNK)
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

    def _live(self) -> list[Group]:
        return list(self.live.values())

    def _top_up(self) -> None:
        """Keep enough groups going for the step being collected (sync, one_step_off) or admit
        as many as the staleness bound and the rollout slots allow (async)."""
        tr = self.tr
        if tr.mode == "async":
            bound = (self.version + tr.max_staleness + 1) * self.B
            while (
                len(self.live) + len(self.ready) + self.trained_groups < bound
                and self.queued + self.running + self.G <= max(self.cell.concurrency, self.G)
                and self._start_group()
            ):
                pass
        elif self.collecting:
            while len(self.live) + len(self.ready) < tr.groups_per_step and self._start_group():
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
            self.v0[i], self.started[i] = self.version, True
            row = yield from cell.trajectory(i)
            self.running -= 1
            cell.cancelled.discard(i)
            if self.trace is not None:  # the span the cell just recorded
                self.trace[-1][5].update(group=int(self.group_of[i]), version=int(self.v0[i]))
            self._done(i, row)
            cell._done += 1
            if cell.progress is not None and cell._done % 4096 == 0:
                cell.progress(4096)
            if self.tr.mode == "async":
                self._top_up()

    def _generated(self, i: int) -> None:
        self.gen_steps[0 if self.version == self.v0[i] else 1] += 1

    def _done(self, i: int, row) -> None:
        status, worker, sandbox, llm = int(row[8]), row[4], row[5], row[6]
        grp = self.groups[int(self.group_of[i])]
        grp.cost += (worker, sandbox, llm, 1)
        self.end[i], self.steps_done[i] = row[1], row[10]
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
                self._discard(grp, "failures")
                self._top_up()
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
                self._discard(grp, "filter")
                self._top_up()
                return
            self.passed += 1
        grp.state, grp.ready_at = "ready", self.env.now
        del self.live[grp.g]
        self.ready.append(grp)
        self._notify()

    def _discard(self, grp: Group, cause: str) -> None:
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
        self._notify()

    def _notify(self) -> None:
        if not self.changed.triggered:
            self.changed.succeed()
        self.changed = self.env.event()

    # ------------------------------------------------------------ collecting and training
    def _fresh(self, grp: Group) -> bool:
        """The group may still train at the current version: in async mode, none of its started
        members lags the policy by more than the bound (a ready group has them all started)."""
        if self.tr.mode != "async":
            return True
        started = self.v0[grp.members][self.started[grp.members]]
        return not started.size or self.version - int(started.min()) <= self.tr.max_staleness

    def _gather(self):
        """Wait for ``B`` useful ready groups; returns them, or None when the budget ran out."""
        while True:
            for grp in [x for x in self.ready if not self._fresh(x)]:
                self._discard(grp, "staleness")
            if len(self.ready) >= self.B:  # the first B ready; groups ready at once in prompt order
                batch = sorted(self.ready, key=lambda x: (x.ready_at, x.g))[: self.B]
                for grp in batch:
                    self.ready.remove(grp)
                return batch
            self._top_up()
            if self.exhausted and not self._live() and len(self.ready) < self.B:
                return None
            yield self.changed

    def _collect(self):
        self.collecting = True
        self._top_up()
        batch = yield from self._gather()
        self.collecting = False
        return batch

    def _leftovers(self) -> None:
        """After a step's groups are gathered (sync, one_step_off): the rest are cancelled, or
        carried to the next step."""
        if self.tr.leftover == "cancel":
            for grp in list(self.ready) + self._live():
                self._discard(grp, "over_sampling")

    def _train(self, k: int, batch: list[Group], start: float, ready: float):
        env, tr = self.env, self.tr
        rng = stream(self._seed, self._rep, "training", "trainer", k)
        members = [i for grp in batch for i in grp.members]
        for grp in batch:
            grp.state = "trained"
            self.trained_groups += 1
            self.groups.pop(grp.g)
        self.staleness.extend((self.version - self.v0[members]).tolist())
        self.trained_members.extend(members)
        if isinstance(tr.train_time, LinearTime):
            tt, idx = tr.train_time, np.asarray(members)
            train = tt.intercept + tt.per_step * int(self.steps_done[idx].sum())
            if tt.per_token:
                train += tt.per_token * float(self.tokens_trained(idx).sum())
        else:
            train = float(tr.train_time.sample(rng, 1)[0])
        sync = float(tr.weight_sync_time.sample(rng, 1)[0])
        if tr.placement == "colocated":
            self._close()
        t0 = env.now
        yield env.timeout(train)
        if not tr.partial_rollouts and tr.mode == "one_step_off" and self.collecting:
            # no trajectory mixes versions: the sync waits until the batch in generation is gathered
            while self.collecting:
                yield self.changed
        t1 = env.now
        if self.gate is None and tr.pause_engines_on_sync:  # disaggregated: the engines load the weights
            self._close()
        yield env.timeout(sync)
        self.version += 1
        if self.gate is None and self.bodies is not None:  # the bodies count steps under the new version
            self.bodies.barrier()
        if self.gate is not None:
            self.gate.succeed()
            self.gate = None
        masked = sum(len(grp.masked) for grp in batch)
        mean_end = float(self.end[members].mean())
        self.steps.append(StepRecord(start, ready, mean_end, train, sync, env.now, len(members), masked))
        if self.trace is not None:
            self._trace_step(k, start, ready, t0, t1, env.now)
        self._after_sync()

    def _close(self) -> None:
        """Close the gate: generation waits for the new weights (bodies stop at their step's end)."""
        self.gate = self.env.event()
        if self.bodies is not None:
            self.bodies.barrier()

    def _after_sync(self) -> None:
        for grp in self._live():
            if not self.tr.partial_rollouts and not (self.tr.mode != "async" and self.collecting):
                self._discard(grp, "weight_update")
            elif not self._fresh(grp):
                self._discard(grp, "staleness")
        self._notify()
        self._top_up()

    # ------------------------------------------------------------ the modes
    def _sync(self):
        for k in range(self.tr.steps):
            start = self.env.now
            batch = yield from self._collect()
            if batch is None:
                return
            ready = self.env.now
            self._leftovers()
            yield from self._train(k, batch, start, ready)

    def _one_step_off(self):
        batches = simpy.Store(self.env)
        self.env.process(self._collector(batches))
        last = self.env.now
        for k in range(self.tr.steps):
            item = yield batches.get()
            if item is None:
                return
            batch, ready = item
            yield from self._train(k, batch, last, max(ready, last))
            last = self.env.now

    def _collector(self, batches: simpy.Store):
        for k in range(self.tr.steps):
            while self.version < k - 1:  # step k generates with the weights of step k - 2 or newer
                yield self.changed
            batch = yield from self._collect()
            if batch is None:
                yield batches.put(None)
                return
            self._leftovers()
            yield batches.put((batch, self.env.now))

    def _async(self):
        for k in range(self.tr.steps):
            start = self.env.now
            batch = yield from self._gather()
            if batch is None:
                return
            yield from self._train(k, batch, start, self.env.now)

    def run(self):
        """The loop as one process: workers, then the mode's collector and trainer."""
        cell = self.cell
        workers = [self.env.process(self._worker()) for _ in range(cell.concurrency)]
        mode = {"sync": self._sync, "one_step_off": self._one_step_off, "async": self._async}
        yield self.env.process(mode[self.tr.mode]())
        self.finished = self.env.now
        for grp in list(self.ready) + self._live():
            self._discard(grp, "end")
        for _ in workers:
            self.queue.put(None)
        yield self.env.all_of(workers)
