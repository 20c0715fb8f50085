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
    left = deadline - env.now
    if math.isinf(left):
        yield event
        return True
    yield event | env.timeout(max(left, 0.0))
    return event.triggered
