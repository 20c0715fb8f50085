"""The progress line: the stage a run is in (simrollout.run.stages) and the time left in it."""

import io

from numba.core.errors import termcolor
from rich.console import Console

from simrollout.cli.entry import _ticker
from simrollout.cli.options import _progress_bar
from simrollout.run import stages
from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from simrollout.validation.fidelity import Row, build

termcolor()  # numba wraps stdout with colorama once: here, not inside a bar's redirected stdout


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=140), out


def test_the_line_names_each_stage_of_a_run_as_it_begins(monkeypatch):
    import importlib

    runner = importlib.import_module("simrollout.run.runner")
    monkeypatch.setattr(runner, "PILOTS", {})
    scn = scenario_from_dict({**build(Row("async", "tier", "tokens"), 120, 4, 16), "fidelity": "trajectory"})
    console, out = _terminal()
    heard = []
    with _progress_bar(console=console) as bar, stages.listening(lambda s, d, t: heard.append((s, d, t))):
        task = bar.add_task("run", total=1.0)
        run_scenario(scn, jobs=2, keep_records=False, progress=_ticker(bar, task))
        stages.enter("outputs")
        text = out.getvalue()
    assert [s for s, d, _ in heard if d == 0] == ["pilots", "cells", "outputs"]
    assert ("pilots", 1, 1) in heard  # the one pilot, counted
    assert ("cells", 0, 120) in heard  # trajectories to simulate
    for stage in ("pilots", "cells", "outputs"):
        assert stage in text
    assert "estimating the time left" in text  # each stage, before its first step


def test_without_pilots_the_workload_draw_comes_first(monkeypatch):
    scn = scenario_from_dict({**build(Row("async", "none", "time"), 50, 2, 8), "fidelity": "trajectory"})
    heard = []
    with stages.listening(lambda s, d, t: heard.append(s) if d == 0 else None):
        run_scenario(scn, jobs=1, keep_records=False)
    assert heard == ["draws", "cells"]


def test_the_time_left_is_the_stage_s_rate_so_far():
    console, out = _terminal()
    now = [0.0]
    with _progress_bar(console=console, get_time=lambda: now[0]) as bar:
        task = bar.add_task("run", total=1.0)
        stages.enter("cells", 1000)
        for t, done in ((10.0, 100), (20.0, 200), (40.0, 400)):
            now[0] = t
            bar.update(task, completed=done)
        row = bar.tasks[-1]
        assert row.description == "cells" and row.total == 1000
        console_line, _ = _terminal()
        console_line.print(bar.make_tasks_table([row]))
        line = console_line.file.getvalue()
    assert "cells" in line and "about 1m 00s left" in line  # 600 to go at 10 a second
    assert "40%" in line
