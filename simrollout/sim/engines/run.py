"""How a cell runs on its engine: the cell built at its engine's fidelity, then run by SimPy or
through the compiled loop (the engine's registry entry says which)."""

from __future__ import annotations

from collections.abc import Callable

from ...scenario import Scenario, Substrate
from ..compiled import run_compiled
from ..model import Cell
from ..records import Records
from ..serving_pilot import Pilot
from ..workload_draws import Work
from . import Engine


def run_engine(
    engine: Engine,
    scn: Scenario,
    sub: Substrate,
    concurrency: int,
    rep: int,
    work: Work,
    progress: Callable[[int], None] | None = None,
    sink: Callable[[Records, int], None] | None = None,
    keep: bool = True,
    pilot: Pilot | None = None,
) -> tuple[Cell, Records | None]:
    """Run one cell on ``engine``: the cell (its metrics, parts and engine busy time) and, when
    ``keep``, its per-trajectory records."""
    cell = Cell(scn, sub, concurrency, rep, work, engine.cell, progress, sink, keep, pilot)
    if not engine.compiled:
        return cell, cell.run()
    if scn.training is not None and scn.workload.tokens is not None:  # its bodies on serving engines
        from ..compiled_tokens_run import TokenRun

        return cell, run_compiled(cell, TokenRun)
    return cell, run_compiled(cell)
