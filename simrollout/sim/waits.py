"""Waits bounded by a trajectory's deadline, shared by the body engines and the sandbox lifecycle."""

from __future__ import annotations

import math

import simpy


def until(env: simpy.Environment, dur: float, deadline: float):
    """Wait ``dur`` or until the deadline; True when the wait completed."""
    left = deadline - env.now
    if dur > left:
        yield env.timeout(max(left, 0.0))
        return False
    yield env.timeout(dur)
    return True


def await_event(env: simpy.Environment, event: simpy.Event, deadline: float):
    """Wait for ``event`` or until the deadline; True when it fired."""
    if math.isinf(deadline):
        yield event
        return True
    yield first_of(env, event, _deadline(env, deadline))
    return event.triggered


def first_of(env: simpy.Environment, a: simpy.Event, b: simpy.Event) -> simpy.Event:
    """An event that fires when ``a`` or ``b`` is processed: ``a | b`` without its value. As that
    Condition, it is scheduled from the first one's callbacks, so its waiter resumes at the same
    point of the event queue (the same numbers), without the Condition's bookkeeping."""
    first = _First(env.event(), a, b)
    for e in (a, b):
        if first.out.triggered:
            break
        if e.callbacks is None:  # already processed
            first(e)
        else:
            e.callbacks.append(first)
    return first.out


class _First:
    """The callback of :func:`first_of` (an object, not a closure: a closure that names itself is a
    reference cycle, left to the garbage collector, which then ran ten times as often)."""

    __slots__ = ("out", "a", "b")

    def __init__(self, out: simpy.Event, a: simpy.Event, b: simpy.Event):
        self.out, self.a, self.b = out, a, b

    def __call__(self, by: simpy.Event) -> None:
        if self.out.triggered:
            return
        if by._ok:
            self.out.succeed()
        else:  # as a Condition: the failure is the waiter's to handle
            by._defused = True
            self.out.fail(by._value)
        other = self.b if by is self.a else self.a
        if other.callbacks is not None and self in other.callbacks:  # not left on an event that
            other.callbacks.remove(self)  # fires hours later (a deadline)


def _deadline(env: simpy.Environment, at: float) -> simpy.Event:
    """The timeout at ``at``, one per instant, shared by every wait it bounds (a timeout per wait
    would stay in the event queue until the deadline: one per LLM turn, hours after it ended)."""
    table = env.__dict__.setdefault("_deadlines", {})
    event = table.get(at)
    if event is None:
        event = table[at] = env.timeout(max(at - env.now, 0.0))
        event.callbacks.append(lambda _, at=at: table.pop(at, None))
    return event
