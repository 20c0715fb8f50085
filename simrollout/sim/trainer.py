"""The training loop's trainer, written once for every engine: its steps, weight syncs and modes.

The trainer is a plain generator against a :class:`GroupBook`, the loop's record of its groups
that each engine keeps over its own state: :class:`simrollout.sim.training.TrainingLoop` over
SimPy events and Python groups, :class:`simrollout.sim.compiled_training.CompiledTraining` over
the compiled loop's arrays. It yields only what its book gives it to wait on
(:meth:`GroupBook.wait_groups`, :meth:`GroupBook.wait_change`, :meth:`GroupBook.timer`): SimPy
events for the one, requests the compiled loop answers for the other. Modes (docs/model.md, "The
training loop"):

- ``sync``: collect a step's groups, train, sync, and only then start the next step's groups;
- ``one_step_off``: collecting step k+1 overlaps training step k (samples lag by one version);
- ``async``: groups are admitted continuously within the staleness bound; the trainer takes the
  first ready groups.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..scenario import Training
from .trainer_time import TrainerClock
from .training_results import StepRecord


class GroupBook(Protocol):
    """The loop's groups as the trainer reads and changes them (a group is whatever the engine
    names it by). ``collecting`` and ``window_left`` tell the book's admission how many groups
    the step being collected still needs (sync, one_step_off)."""

    tr: Training
    B: int
    clock: TrainerClock
    steps: list[StepRecord]
    staleness: list[int]
    trained_members: list[int]
    collecting: bool
    window_left: int

    @property
    def now(self) -> float: ...
    @property
    def version(self) -> int: ...
    @property
    def gate_closed(self) -> bool: ...

    def ready_groups(self) -> list: ...  # ready, not yet trained, in the order they became ready
    def ready_key(self, g) -> tuple: ...  # the order a batch takes ready groups in
    def unready(self, batch: list) -> None: ...  # the batch leaves the ready groups
    def live_groups(self) -> list: ...  # the running groups
    def drained(self) -> bool: ...  # the trajectory budget ran out and no group runs
    def fresh(self, groups: list) -> list[bool]: ...  # each may still train at this version
    def drop(self, g, cause: str) -> None: ...  # discard the group for ``cause``
    def train(self, batch: list) -> tuple[list[int], np.ndarray, np.ndarray]: ...  # members, v0, v_end
    def masked(self, batch: list) -> int: ...
    def mean_end(self, members: list[int]) -> float: ...
    def busy_seconds(self) -> float: ...
    def record(self, k: int, start: float, ready: float, t_first: float, t1: float) -> None: ...  # the trace
    def top_up(self) -> None: ...
    def notify(self) -> None: ...
    def close(self) -> None: ...  # generation waits for new weights (bodies stop at their step's end)
    def open(self) -> None: ...
    def barrier(self) -> None: ...  # the bodies count their steps under the new version from here
    def next_version(self) -> None: ...
    def interrupt(self) -> None: ...  # at_sync: interrupt
    def wait_groups(self, n: int) -> Any: ...
    def wait_change(self) -> Any: ...
    def timer(self, seconds: float) -> Any: ...
    def channel(self) -> Any: ...  # one_step_off: a store of gathered batches (get, put)
    def spawn(self, gen) -> None: ...  # one_step_off: the collector beside the trainer


class Trainer:
    """Trains ``book``'s loop for ``training.steps`` steps in its mode (:meth:`run`)."""

    def __init__(self, book: GroupBook):
        self.book, self.tr = book, book.tr
        self._stale = self._partial = 0  # this step's trained samples: stale, crossed a version

    def run(self):
        """The mode's trainer as one generator."""
        return {"sync": self._sync, "one_step_off": self._one_step_off, "async": self._async}[self.tr.mode]()

    # ------------------------------------------------------------ gathering and training groups
    def _gather(self, n: int):
        """Wait for ``n`` useful ready groups; returns them, or None when the budget ran out."""
        book = self.book
        while True:
            ready = book.ready_groups()
            for g, ok in zip(ready, book.fresh(ready)):
                if not ok:
                    book.drop(g, "staleness")
            ready = book.ready_groups()
            if len(ready) >= n:  # the first n ready; groups ready at once in prompt order
                batch = sorted(ready, key=book.ready_key)[:n]
                book.unready(batch)
                return batch
            book.top_up()
            if book.drained() and len(ready) < n:
                return None
            yield book.wait_groups(n)

    def _leftovers(self) -> None:
        """After a step's groups are gathered (sync, one_step_off): the rest are cancelled, or
        carried to the next step."""
        if self.tr.leftover == "cancel":
            for g in self.book.ready_groups() + self.book.live_groups():
                self.book.drop(g, "over_sampling")

    def _take(self, batch: list) -> list[int]:
        """The groups train: their samples' staleness, and whether they crossed a version."""
        book = self.book
        members, v0, v_end = book.train(batch)
        lag = book.version - v0
        book.staleness.extend(lag.tolist())
        book.trained_members.extend(members)
        self._stale += int((lag > 0).sum())
        self._partial += int((v_end > v0).sum())
        return members

    def _step(self, k: int, start: float, first: list | None = None):
        """Step ``k``: gather its B groups ``mini_batch`` at a time (``first``: gathered already),
        train each as it is ready, and sync the weights after every ``sync_every`` steps.
        Returns False when the budget ran out."""
        book, tr = self.book, self.tr
        m = tr.update_groups
        drawn, sync = book.clock.draws(k)
        window_end = (k + 1) % tr.sync_every == 0
        members, train, wait, masked, t_first = [], 0.0, 0.0, 0, None
        ready = start
        for j in range(book.B // m):
            t = book.now
            batch = first if first is not None else (yield from self._gather(m))
            if batch is None:
                return False
            wait += book.now - (start if first is not None else t)  # one_step_off: since the last step
            ready = book.now
            if tr.mode == "sync" and book.collecting:
                book.window_left -= m
                if window_end and j == book.B // m - 1:  # the window's groups are all gathered
                    book.collecting = False
                    self._leftovers()
            piece = self._take(batch)
            members += piece
            masked += book.masked(batch)
            secs = book.clock.update(piece, m / book.B, drawn)
            if tr.placement == "colocated":
                book.close()
            t_first = book.now if t_first is None else t_first
            yield book.timer(secs)
            train += secs
            if tr.placement == "colocated" and not (window_end and j == book.B // m - 1):
                book.open()  # generation resumes between updates
        t1 = book.now
        if window_end:
            yield from self._sync_weights(sync)
        else:
            sync = 0.0
        mean_end = book.mean_end(members)
        book.steps.append(StepRecord(start, ready, mean_end, train, sync, book.now, len(members), masked,
                                     wait, self._stale, self._partial, book.busy_seconds()))  # fmt: skip
        self._stale = self._partial = 0
        book.record(k, start, ready, t_first, t1)
        return True

    def _sync_weights(self, sync: float):
        """Load the new weights into the engines (paused, or generating on); the version goes up."""
        book, tr = self.book, self.tr
        if not tr.partial_rollouts and tr.mode == "one_step_off" and book.collecting:
            # no trajectory mixes versions: the sync waits until the batch in generation is gathered
            while book.collecting:
                yield book.wait_change()
        if tr.pause_engines_on_sync:  # the engines load the weights
            book.close()
        if tr.at_sync == "interrupt":  # requests still generating stop; cached KV is stale
            book.interrupt()
        yield book.timer(sync)
        book.next_version()
        if not book.gate_closed:  # the bodies count steps under the new version
            book.barrier()
        book.open()
        self._after_sync()

    def _after_sync(self) -> None:
        """Groups that may not train at the new version are dropped; admission goes on."""
        book, tr = self.book, self.tr
        live = book.live_groups()
        for g, ok in zip(live, book.fresh(live)):
            if not tr.partial_rollouts and not (tr.mode != "async" and book.collecting):
                book.drop(g, "weight_update")
            elif not ok:
                book.drop(g, "staleness")
        book.notify()
        book.top_up()

    # ------------------------------------------------------------ the modes
    def _sync(self):
        book, tr = self.book, self.tr
        for k in range(tr.steps):
            start = book.now
            if k % tr.sync_every == 0:  # a window's groups start at once (verl's stream mode)
                book.window_left = book.B * min(tr.sync_every, tr.steps - k)
                book.collecting = True
                book.top_up()
            if not (yield from self._step(k, start)):
                return

    def _one_step_off(self):
        book = self.book
        batches = book.channel()
        book.spawn(self._collector(batches))
        last = book.now
        for k in range(self.tr.steps):
            item = yield batches.get()
            if item is None:
                return
            batch, _ = item
            yield from self._step(k, last, batch)
            last = book.now

    def _collector(self, batches):
        book = self.book
        for k in range(self.tr.steps):
            while book.version < k - 1:  # step k generates with the weights of step k - 2 or newer
                yield book.wait_change()
            book.window_left = book.B
            book.collecting = True
            book.top_up()
            batch = yield from self._gather(book.B)
            book.collecting = False
            if batch is None:
                yield batches.put(None)
                return
            self._leftovers()
            yield batches.put((batch, book.now))

    def _async(self):
        book = self.book
        for k in range(self.tr.steps):
            if not (yield from self._step(k, book.now)):
                return
