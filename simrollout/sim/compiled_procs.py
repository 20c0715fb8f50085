"""The trainer's processes on the compiled engine: the trainer, and mode one_step_off's collector
beside it, as generators resumed when what they wait for comes.

A process yields what it waits for (the group book's ``wait_groups``, ``timer``, ``wait_change``
and its channel's ``get`` and ``put``). The compiled loop (:mod:`.compiled_loop`) answers the
first two: it wakes Python when the groups waited for are ready (or none can come) and when the
timer ends. The rest are Python's own: a change is a notice of the book (a group dropped, a
version synced, the collection started or ended), a batch put in a channel ends the wait of its
getter. :class:`Procs` runs the processes at one instant in SimPy's order: each runs to its
next wait before the next resumes, a putter before its getter, a spawned process after its
spawner's wait.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Any

WAIT, TIMER, CHANGE, GET, PUT = range(5)  # what a process waits for

Proc = Generator[tuple[int, Any], Any, Any]


class Channel:
    """A store of gathered batches (one_step_off): unbounded, its getter waits while it is empty."""

    def __init__(self) -> None:
        self.items: deque = deque()
        self.getter: Proc | None = None

    def get(self) -> tuple[int, Channel]:
        return GET, self

    def put(self, item) -> tuple[int, tuple[Channel, Any]]:
        return PUT, (self, item)


class Procs:
    """Runs the ``main`` process (the trainer) and those it spawns. ``need(n)`` asks the loop to
    wake Python when ``n`` groups are ready, ``alarm(seconds)`` when that time has passed."""

    def __init__(self, main: Proc, need: Callable[[int], None], alarm: Callable[[float], None]):
        self.main, self.need, self.alarm = main, need, alarm
        self.runnable: deque[tuple[Proc, Any]] = deque([(main, None)])
        self.on_groups: Proc | None = None  # the process waiting for ready groups
        self.on_timer: Proc | None = None  # the process waiting for its timer
        self.on_change: list[tuple[Proc, int]] = []  # processes waiting for a change, and when they began
        self.changes = 0

    def spawn(self, proc: Proc) -> None:
        self.runnable.append((proc, None))

    def changed(self) -> None:
        """A change the processes waiting for one look at."""
        self.changes += 1

    def wake(self, groups: bool) -> None:
        """The loop's answer: the groups waited for (``groups``), else the timer."""
        proc = self.on_groups if groups else self.on_timer
        if groups:
            self.on_groups = None
        else:
            self.on_timer = None
        if proc is not None:
            self.runnable.append((proc, None))

    def drive(self) -> bool:
        """Run the processes that may go on to their next waits; True when the trainer ended."""
        while self.runnable:
            proc, value = self.runnable.popleft()
            try:
                what, arg = proc.send(value)
            except StopIteration:
                if proc is self.main:
                    self.runnable.clear()
                    self.on_change.clear()
                    self.on_groups = self.on_timer = None
                    return True
            else:
                self._wait(proc, what, arg)
            waiting = []
            for p, since in self.on_change:
                if since < self.changes:
                    self.runnable.append((p, None))
                else:
                    waiting.append((p, since))
            self.on_change = waiting
        return False

    def _wait(self, proc: Proc, what: int, arg) -> None:
        if what == WAIT:
            assert self.on_groups is None, "one process at a time waits for groups"
            self.on_groups = proc
            self.need(arg)
        elif what == TIMER:
            assert self.on_timer is None, "one process at a time waits on a timer"
            self.on_timer = proc
            self.alarm(arg)
        elif what == CHANGE:
            self.on_change.append((proc, self.changes))
        elif what == GET:
            if arg.items:
                self.runnable.append((proc, arg.items.popleft()))
            else:
                arg.getter = proc
        else:  # PUT: the putter goes on, then the getter takes the item
            channel, item = arg
            channel.items.append(item)
            self.runnable.append((proc, None))
            if channel.getter is not None:
                self.runnable.append((channel.getter, channel.items.popleft()))
                channel.getter = None
