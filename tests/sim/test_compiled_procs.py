"""The trainer's processes on the compiled engine (simrollout.sim.compiled_procs): who runs when,
in SimPy's order at one instant."""

from __future__ import annotations

from simrollout.sim.compiled_procs import CHANGE, TIMER, WAIT, Channel, Procs


def _procs(main):
    asked = []
    procs = Procs(main, lambda n: asked.append(("need", n)), lambda s: asked.append(("alarm", s)))
    return procs, asked


def test_a_putter_goes_on_before_its_getter_and_a_spawned_process_after_its_spawner_waits():
    log, ch = [], Channel()

    def collector():
        log.append("collector starts")
        yield ch.put("batch 0")
        log.append("collector put")
        yield WAIT, 4

    def trainer():
        procs.spawn(collector())
        log.append("trainer waits")
        item = yield ch.get()
        log.append(f"trainer got {item}")
        yield TIMER, 7.0

    procs, asked = _procs(trainer())
    assert procs.drive() is False
    assert log == ["trainer waits", "collector starts", "collector put", "trainer got batch 0"]
    assert asked == [("need", 4), ("alarm", 7.0)]


def test_the_loop_wakes_the_process_that_waits_for_what_came():
    log = []

    def collector():
        yield WAIT, 2
        log.append("groups")

    def trainer():
        procs.spawn(collector())
        yield TIMER, 1.0
        log.append("timer")

    procs, _ = _procs(trainer())
    procs.drive()
    procs.wake(groups=True)
    assert procs.drive() is False and log == ["groups"]
    procs.wake(groups=False)
    assert procs.drive() is True and log == ["groups", "timer"]  # the trainer ended
    assert not procs.runnable and procs.on_groups is None


def _ends():
    return
    yield


def test_a_change_wakes_only_the_processes_that_waited_before_it():
    state = {"version": 0}
    log = []

    def collector():
        while state["version"] < 1:
            log.append("collector checks")
            yield CHANGE, None
        log.append("collector goes on")

    def trainer():
        procs.spawn(collector())
        yield TIMER, 1.0
        state["version"] = 1
        procs.changed()
        yield TIMER, 2.0

    procs, _ = _procs(trainer())
    procs.drive()
    assert log == ["collector checks"]
    procs.changed()  # a change that does not end its wait: it checks again
    procs.spawn(_ends())  # any process running lets the waiters look
    procs.drive()
    assert log == ["collector checks", "collector checks"]
    procs.wake(groups=False)
    procs.drive()
    assert log == ["collector checks", "collector checks", "collector goes on"]
