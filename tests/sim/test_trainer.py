"""The trainer written once (simrollout.sim.trainer): its steps against a small group book whose
answers are worked by hand, and the engines' books holding every member the trainer calls."""

from __future__ import annotations

import inspect
import re
from types import SimpleNamespace

import numpy as np
import pytest

from simrollout.sim.compiled_training import CompiledTraining
from simrollout.sim.trainer import GroupBook, Trainer
from simrollout.sim.training import TrainingLoop

TRAIN, SYNC = 10.0, 5.0  # seconds per update and per weight sync


class Clock:
    def draws(self, k):
        return None, SYNC

    def update(self, piece, share, drawn):
        return TRAIN


class Book:
    """One-sample groups that become ready at set times, the version each started under 0 (all
    start at once); what the trainer drops is logged."""

    def __init__(self, ready_at, partial=True, steps=2):
        self.tr = SimpleNamespace(mode="async", steps=steps, update_groups=2, sync_every=1, placement="disaggregated",
                                  partial_rollouts=partial, pause_engines_on_sync=True, at_sync="continue",
                                  leftover="carry")  # fmt: skip
        self.B, self.clock = 2, Clock()
        self.steps, self.staleness, self.trained_members, self.dropped = [], [], [], []
        self.collecting, self.window_left = False, 0
        self.ready_at, self.t, self.v, self.gate = ready_at, 0.0, 0, False
        self.state = ["running"] * len(ready_at)
        self.opened = self.barriers = 0

    now = property(lambda self: self.t)
    version = property(lambda self: self.v)
    gate_closed = property(lambda self: self.gate)

    def _arrive(self):
        for g, at in enumerate(self.ready_at):
            if self.state[g] == "running" and at <= self.t:
                self.state[g] = "ready"

    def ready_groups(self):
        self._arrive()
        return [g for g in np.argsort(self.ready_at, kind="stable").tolist() if self.state[g] == "ready"]

    def ready_key(self, g):
        return self.ready_at[g], g

    def unready(self, batch):
        for g in batch:
            self.state[g] = "taken"

    def live_groups(self):
        self._arrive()
        return [g for g, s in enumerate(self.state) if s == "running"]

    def drained(self):
        return not self.live_groups()

    def fresh(self, groups):
        return [True] * len(groups)

    def drop(self, g, cause):
        self.state[g] = "dropped"
        self.dropped.append((g, cause))

    def train(self, batch):
        return list(batch), np.zeros(len(batch), dtype=np.int64), np.zeros(len(batch), dtype=np.int64)

    def masked(self, batch):
        return 0

    def mean_end(self, members):
        return float(np.mean([self.ready_at[g] for g in members]))

    def busy_seconds(self):
        return float("nan")

    def record(self, *args):
        pass

    def top_up(self):
        pass

    def notify(self):
        pass

    def close(self):
        self.gate = True

    def open(self):
        self.gate, self.opened = False, self.opened + 1

    def barrier(self):
        self.barriers += 1

    def next_version(self):
        self.v += 1

    def wait_groups(self, n):
        return "groups", n

    def timer(self, seconds):
        return "timer", seconds


def drive(book: Book) -> None:
    """The trainer to its end: a timer moves the clock on, a wait to the next group ready."""
    gen = Trainer(book).run()
    for kind, arg in gen:
        if kind == "timer":
            book.t += arg
        else:
            book.t = min(at for g, at in enumerate(book.ready_at) if book.state[g] == "running")


def test_async_steps_by_hand():
    book = Book([1.0, 2.0, 3.0, 4.0, 30.0])
    drive(book)
    first, second = book.steps
    # step 0: waits for groups 0 and 1 (ready at 1 and 2 s), trains 10 s, syncs 5 s
    assert (first.start, first.ready, first.rollout, first.train, first.sync, first.end) == (
        0,
        2,
        2,
        10,
        5,
        17,
    )
    assert (first.mean_end, first.samples, first.stale) == (1.5, 2, 0)
    # step 1: groups 2 and 3 were ready by 17 s: no wait; started under version 0, trained at 1
    assert (second.start, second.ready, second.rollout, second.end) == (17, 17, 0, 32)
    assert (second.stale, book.staleness) == (2, [0, 0, 1, 1])
    assert book.trained_members == [0, 1, 2, 3] and book.version == 2
    assert book.opened == 2 and book.barriers == 0  # engines paused at each sync: no barrier past the gate


def test_without_partial_rollouts_a_sync_drops_the_running_groups_and_the_budget_ends_the_loop():
    book = Book([1.0, 2.0, 30.0, 40.0], partial=False, steps=3)
    drive(book)
    assert book.dropped == [(2, "weight_update"), (3, "weight_update")]  # still running at the 17 s sync
    assert len(book.steps) == 1 and book.trained_members == [0, 1]


def test_ready_groups_train_in_the_order_they_became_ready():
    book = Book([5.0, 1.0, 3.0, 2.0], steps=2)
    drive(book)
    assert book.trained_members == [1, 3, 2, 0]


@pytest.mark.parametrize("book", [TrainingLoop, CompiledTraining])
def test_each_engine_keeps_the_book_the_trainer_reads(book):
    """Every member of GroupBook is on both books."""
    wanted = {n for n, _ in inspect.getmembers(GroupBook) if not n.startswith("_")} - set(dir(object))
    wanted |= set(GroupBook.__annotations__)  # attributes, set in the book's __init__
    src = inspect.getsource(book)
    missing = sorted(n for n in wanted if not hasattr(book, n) and not re.search(rf"self\.{n}\b", src))
    assert missing == []
