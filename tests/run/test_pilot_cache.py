"""Serving pilots kept on disk between runs (simrollout.run.pilot_cache)."""

import importlib
import os
import time

import pytest

from simrollout.run import pilot_cache
from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from simrollout.validation.fidelity import Row, build

runner = importlib.import_module("simrollout.run.runner")
SIZE = (120, 4, 16)  # trajectories, steps, concurrency


def _scenario(**over):
    d = build(Row("async", "tier", "tokens"), *SIZE)
    return scenario_from_dict({**d, "fidelity": "trajectory", **over})


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """The pilots run (not found in this process nor on disk), in this process or a worker."""
    real = runner.run_pilot

    def run_pilot(*a):
        (tmp_path / f"{os.getpid()}-{time.perf_counter_ns()}.run").touch()
        return real(*a)

    monkeypatch.setattr(runner, "run_pilot", run_pilot)
    monkeypatch.setattr(runner, "PILOTS", {})

    class Runs:
        def __len__(self) -> int:
            return len(list(tmp_path.glob("*.run")))

    return Runs()


def _cells(scn):
    runner.PILOTS.clear()  # a new process: only the disk remembers
    return run_scenario(scn, jobs=1).cells.to_csv(index=False)


def test_a_cached_pilot_gives_the_numbers_of_a_fresh_one(counted):
    fresh = _cells(_scenario())
    assert len(counted) == 1 and len(list(pilot_cache.folder().glob("*.pkl"))) == 1
    cached = _cells(_scenario())
    assert len(counted) == 1  # read from disk, not run
    assert cached == fresh


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 6},
        {"substrates": [{"name": "s", "cold_start": 0.5, "exec_overhead": 0.05, "teardown": 0.2}]},
        {"workload": {"steps": 9}},
    ],
    ids=["seed", "substrate", "workload"],
)
def test_a_changed_input_that_determines_the_pilot_misses_the_cache(counted, change):
    base = build(Row("async", "tier", "tokens"), *SIZE)
    _cells(_scenario())
    over = {k: {**base[k], **v} if isinstance(v, dict) else v for k, v in change.items()}
    _cells(_scenario(**over))
    assert len(counted) == 2
    assert len(list(pilot_cache.folder().glob("*.pkl"))) == 2


def test_the_code_version_and_the_replication_are_in_the_key(monkeypatch):
    pscn = _scenario()
    key = pilot_cache.key_of(pscn, 8, 0)
    assert key == pilot_cache.key_of(_scenario(), 8, 0)
    assert key != pilot_cache.key_of(pscn, 8, 1) != pilot_cache.key_of(pscn, 16, 0)
    monkeypatch.setattr(pilot_cache, "code_version", lambda: "another")
    assert pilot_cache.key_of(pscn, 8, 0) != key


def test_no_cache_neither_reads_nor_writes(counted, monkeypatch):
    _cells(_scenario())
    monkeypatch.setenv(pilot_cache.OFF, "1")
    _cells(_scenario())
    assert len(counted) == 2
    _cells(_scenario(seed=6))
    assert len(list(pilot_cache.folder().glob("*.pkl"))) == 1


def test_an_unreadable_cache_file_is_run_again(counted):
    fresh = _cells(_scenario())
    (path,) = pilot_cache.folder().glob("*.pkl")
    path.write_bytes(b"not a pilot")
    assert _cells(_scenario()) == fresh and len(counted) == 2


def test_configurations_that_slice_to_the_same_pilot_run_it_once(counted):
    """A plan's configurations that differ only where the pilot does not look (here the run's
    length beyond the pilot's waves) share one pilot."""
    executors = importlib.import_module("simrollout.run.executors")
    a = _scenario()
    b = scenario_from_dict(
        {**build(Row("async", "tier", "tokens"), 2 * SIZE[0], *SIZE[1:]), "fidelity": "trajectory"}
    )
    assert runner.pilot_key(a, runner.cell_keys(a)[0]) == runner.pilot_key(b, runner.cell_keys(b)[0])
    executors._prepare([a, b], [(0, runner.cell_keys(a)[0]), (1, runner.cell_keys(b)[0])], 2)
    assert len(counted) == 1 and len(runner.PILOTS) == 1


def test_the_tools_order_is_in_the_key():
    """The mixture draws the tools in the scenario's order: tools listed in another order draw
    other latencies, so they are another pilot (a sorted key once served one for the other)."""
    tools = {"read": {"weight": 0.5, "latency": 0.2}, "edit": {"weight": 0.5, "latency": 1.5}}
    d = build(Row("async", "tier", "tokens"), *SIZE)
    one = scenario_from_dict({**d, "workload": {**d["workload"], "tools": tools}})
    other = scenario_from_dict({**d, "workload": {**d["workload"], "tools": dict(reversed(tools.items()))}})
    assert pilot_cache.key_of(one, 8, 0) != pilot_cache.key_of(other, 8, 0)
