"""Where cells run: one streamed cell drawn by threads of the run's own process."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psutil

from simrollout.run import executors
from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from simrollout.validation.fidelity import Row, build


def test_a_streamed_cell_is_drawn_by_threads_of_its_own_process_with_the_numbers_of_one_thread(monkeypatch):
    d = build(Row("async", "host"), 70_000, 4, 512)  # three chunks: drawn while the loop runs
    scn = scenario_from_dict({**d, "fidelity": "compiled"})
    seen, real = [], executors._prepare

    def prepare(*a, **k):
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        pool = real(*a, **k)
        after = {p.pid for p in psutil.Process().children(recursive=True)}
        seen.append((pool, after - before))
        return pool

    monkeypatch.setattr(executors, "_prepare", prepare)
    streamed = run_scenario(scn, jobs=2, keep_records=False)
    ((pool, started),) = seen
    assert isinstance(pool, ThreadPoolExecutor) and not started  # no process of its own
    serial = run_scenario(scn, executor="serial", keep_records=False)
    assert streamed.cells.to_csv() == serial.cells.to_csv()
