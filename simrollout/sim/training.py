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

import numpy as np
import simpy

from ..rng import stream
from ..scenario import Training
from .loop_body import LoopBodies
from .records import OK, Row
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
        self._stale = self._partial = 0  # this step's trained samples: stale, crossed a version
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

    def _live(self) -> list[Group]:
        return list(self.live.values())

    def _top_up(self) -> None:
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
                self._top_up()

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
        if self.tr.mode != "async" or self.tr.stale_policy == "keep":
            return True
        started = self.v0[grp.members][self.started[grp.members]]
        return not started.size or self.version - int(started.min()) <= self.tr.stale_versions

    def _gather(self, n: int):
        """Wait for ``n`` useful ready groups; returns them, or None when the budget ran out."""
        while True:
            for grp in [x for x in self.ready if not self._fresh(x)]:
                self._discard(grp, "staleness")
            if len(self.ready) >= n:  # the first n ready; groups ready at once in prompt order
                batch = sorted(self.ready, key=lambda x: (x.ready_at, x.g))[:n]
                for grp in batch:
                    self.ready.remove(grp)
                return batch
            self._top_up()
            if self.exhausted and not self._live() and len(self.ready) < n:
                return None
            yield self.changed

    def _leftovers(self) -> None:
        """After a step's groups are gathered (sync, one_step_off): the rest are cancelled, or
        carried to the next step."""
        if self.tr.leftover == "cancel":
            for grp in list(self.ready) + self._live():
                self._discard(grp, "over_sampling")

    def _take(self, batch: list[Group]) -> list[int]:
        """The groups train: their samples' staleness, and whether they crossed a version."""
        members = [i for grp in batch for i in grp.members]
        for grp in batch:
            grp.state = "trained"
            self.trained_groups += 1
            self.groups.pop(grp.g)
        lag = self.version - self.v0[members]
        self.staleness.extend(lag.tolist())
        self.trained_members.extend(members)
        self._stale += int((lag > 0).sum())
        self._partial += int((self.v_end[members] > self.v0[members]).sum())
        return members

    def _step(self, k: int, start: float, first: list[Group] | None = None):
        """Step ``k``: gather its B groups ``mini_batch`` at a time (``first``: gathered already),
        train each as it is ready, and sync the weights after every ``sync_every`` steps.
        Returns False when the budget ran out."""
        env, tr = self.env, self.tr
        m = tr.update_groups
        drawn, sync = self.clock.draws(k)
        window_end = (k + 1) % tr.sync_every == 0
        members, train, wait, masked, t_first = [], 0.0, 0.0, 0, None
        ready = start
        for j in range(self.B // m):
            t = env.now
            batch = first if first is not None else (yield from self._gather(m))
            if batch is None:
                return False
            wait += env.now - (start if first is not None else t)  # one_step_off: since the last step
            ready = env.now
            if tr.mode == "sync" and self.collecting:
                self.window_left -= m
                if window_end and j == self.B // m - 1:  # the window's groups are all gathered
                    self.collecting = False
                    self._leftovers()
            piece = self._take(batch)
            members += piece
            masked += sum(len(grp.masked) for grp in batch)
            secs = self.clock.update(piece, m / self.B, drawn)
            if tr.placement == "colocated":
                self._close()
            t_first = env.now if t_first is None else t_first
            yield env.timeout(secs)
            train += secs
            if tr.placement == "colocated" and not (window_end and j == self.B // m - 1):
                self._open()  # generation resumes between updates
        t1 = env.now
        if window_end:
            yield from self._sync_weights(sync)
        else:
            sync = 0.0
        mean_end = float(self.end[members].mean())
        busy = self.cell.tier.busy_seconds if self.cell.step else math.nan
        self.steps.append(StepRecord(start, ready, mean_end, train, sync, env.now, len(members), masked,
                                     wait, self._stale, self._partial, busy))  # fmt: skip
        self._stale = self._partial = 0
        if self.trace is not None:
            self._trace_step(k, start, ready, t_first, t1, env.now)
        return True

    def _sync_weights(self, sync: float):
        """Load the new weights into the engines; the version goes up."""
        env, tr = self.env, self.tr
        if not tr.partial_rollouts and tr.mode == "one_step_off" and self.collecting:
            # no trajectory mixes versions: the sync waits until the batch in generation is gathered
            while self.collecting:
                yield self.changed
        if self.gate is None and tr.pause_engines_on_sync:  # disaggregated: the engines load the weights
            self._close()
        if tr.at_sync == "interrupt":  # requests still generating stop; cached KV is stale
            ev, self.abort_ev = self.abort_ev, env.event()
            ev.succeed()
            if hasattr(self.cell.tier, "clear_prefix_cache"):
                self.cell.tier.clear_prefix_cache()
        yield env.timeout(sync)
        self.version += 1
        if self.gate is None and self.bodies is not None:  # the bodies count steps under the new version
            self.bodies.barrier()
        self._open()
        self._after_sync()

    def _open(self) -> None:
        if self.gate is not None:
            self.gate.succeed()
            self.gate = None

    def _close(self) -> None:
        """Close the gate: generation waits for the new weights (bodies stop at their step's end)."""
        if self.gate is not None:
            return
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
            if k % self.tr.sync_every == 0:  # a window's groups start at once (verl's stream mode)
                self.window_left = self.B * min(self.tr.sync_every, self.tr.steps - k)
                self.collecting = True
                self._top_up()
            if not (yield from self._step(k, start)):
                return

    def _one_step_off(self):
        batches = simpy.Store(self.env)
        self.env.process(self._collector(batches))
        last = self.env.now
        for k in range(self.tr.steps):
            item = yield batches.get()
            if item is None:
                return
            batch, ready = item
            yield from self._step(k, last, batch)
            last = self.env.now

    def _collector(self, batches: simpy.Store):
        for k in range(self.tr.steps):
            while self.version < k - 1:  # step k generates with the weights of step k - 2 or newer
                yield self.changed
            self.window_left = self.B
            self.collecting = True
            self._top_up()
            batch = yield from self._gather(self.B)
            self.collecting = False
            if batch is None:
                yield batches.put(None)
                return
            self._leftovers()
            yield batches.put((batch, self.env.now))

    def _async(self):
        for k in range(self.tr.steps):
            if not (yield from self._step(k, self.env.now)):
                return

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
