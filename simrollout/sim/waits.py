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
    yield event | _deadline(env, deadline)
    return event.triggered


def _deadline(env: simpy.Environment, at: float) -> simpy.Event:
    """The timeout at ``at``, one per instant, shared by every wait it bounds (a timeout per wait
    would stay in the event queue until the deadline: one per LLM turn, hours after it ended)."""
    table = env.__dict__.setdefault("_deadlines", {})
    event = table.get(at)
    if event is None:
        event = table[at] = env.timeout(max(at - env.now, 0.0))
        event.callbacks.append(lambda _, at=at: table.pop(at, None))
    return event
