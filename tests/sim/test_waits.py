"""``first_of`` against SimPy's ``a | b``: the same resumption order, failures and processed events."""

from __future__ import annotations

import simpy

from simrollout.sim.waits import first_of


def _order(either) -> list[tuple[str, float]]:
    """Waiters on pairs of events that fire at the same instants, in every combination: who
    resumes when, in order."""
    env = simpy.Environment()
    log: list[tuple[str, float]] = []
    wakes = [env.event() for _ in range(4)]

    def waiter(name: str, a, b):
        yield either(env, a, b)
        log.append((name, env.now))

    def other(name: str, at: float):
        yield env.timeout(at)
        log.append((name, env.now))

    def waker():
        yield env.timeout(1.0)
        for w in wakes[:3]:
            w.succeed()

    env.process(other("before", 1.0))
    env.process(waiter("timeout-first", env.timeout(1.0), wakes[0]))
    env.process(waiter("wake-first", env.timeout(2.0), wakes[1]))
    env.process(waker())
    env.process(waiter("wake-late", env.timeout(1.0), wakes[2]))
    env.process(waiter("never-woken", env.timeout(3.0), wakes[3]))
    env.process(other("after", 1.0))
    env.run()
    return log


def test_waiters_resume_in_the_order_a_condition_resumes_them():
    got = _order(first_of)
    assert got == _order(lambda env, a, b: a | b)
    assert ("never-woken", 3.0) in got and len(got) == 6


def test_a_failed_event_is_raised_in_the_waiter_and_a_processed_one_fires_at_once():
    env = simpy.Environment()
    seen = []

    def waiter(a, b):
        try:
            yield first_of(env, a, b)
            seen.append(("ok", env.now))
        except ValueError as e:
            seen.append((str(e), env.now))

    bad = env.event()
    env.process(waiter(bad, env.timeout(5.0)))
    bad.fail(ValueError("lost"))
    done = env.timeout(0.5)
    env.run(until=1.0)
    env.process(waiter(done, env.timeout(5.0)))  # ``done`` processed already
    env.run(until=2.0)
    assert seen == [("lost", 0.0), ("ok", 1.0)]


def test_the_callback_leaves_the_event_that_did_not_fire():
    env = simpy.Environment()
    deadline = env.timeout(100.0)
    for _ in range(50):
        env.run(until=first_of(env, env.timeout(1.0), deadline))
    assert len(deadline.callbacks) == 0
