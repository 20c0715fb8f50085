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


def first_of(env: simpy.Environment, a: simpy.Event, b: simpy.Event) -> simpy.Event:
    """An event processed after the first of ``a`` and ``b`` is: what ``a | b`` is to a process
    waiting on it, in the same event order, without a Condition's bookkeeping (the serving
    engines' and the deadlines' hot path). Neither event may fail."""
    out = env.event()

    def fire(_):
        if not out.triggered:
            out.succeed()

    for ev in (a, b):
        if ev.callbacks is None:  # already processed
            fire(ev)
        else:
            ev.callbacks.append(fire)
    return out


def await_event(env: simpy.Environment, event: simpy.Event, deadline: float):
    """Wait for ``event`` or until the deadline; True when it fired."""
    left = deadline - env.now
    if math.isinf(left):
        yield event
        return True
    yield first_of(env, event, env.timeout(max(left, 0.0)))
    return event.triggered
