"""The interface the cell's helpers are written against (simrollout.sim.cell_view) is the cell's
and the training loop's: every member it names exists on a real cell, and the loop sets every
member its view names."""

from __future__ import annotations

import inspect

from simrollout.scenario import scenario_from_dict
from simrollout.sim import cell_view
from simrollout.sim.model import Cell
from simrollout.sim.training import TrainingLoop
from simrollout.sim.workload_draws import draw_work
from tests.conftest import make


def members(protocol) -> set[str]:
    """The attributes and methods a Protocol names."""
    methods = {k for k, v in vars(protocol).items() if callable(v) and not k.startswith("__")}
    return set(protocol.__annotations__) | methods


def test_every_member_of_the_cell_view_is_the_cells():
    scn = scenario_from_dict(make())
    cell = Cell(scn, scn.substrates[0], 2, 0, draw_work(scn, 0), "trajectory")
    names = members(cell_view.CellView)
    assert len(names) > 20 and sorted(m for m in names if not hasattr(cell, m)) == []


def test_the_loop_sets_every_member_of_its_view():
    code = inspect.getsource(TrainingLoop)
    names = members(cell_view.LoopView)
    assert names == {"version", "v0", "gen_steps"}
    assert all(f"self.{m} =" in code or f"self.{m}[" in code for m in names)
