"""What a cell's helpers (the steady-state window, the training loop's bodies) read and change of
the cell and the loop: the interface they are written against, so that they never import the
cell that owns them (no import cycle, type-only imports included)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    import simpy

    from ..scenario import Scenario, Substrate
    from .chunks import Chunk
    from .fleet import Fleet
    from .substrate_draws import ChunkDetail
    from .workload_draws import Work


class CellView(Protocol):
    """A cell (:class:`simrollout.sim.model.Cell`) as its helpers see it."""

    scn: Scenario
    sub: Substrate
    work: Work
    env: simpy.Environment
    fleet: Fleet
    concurrency: int
    rep: int
    step: bool
    task_scale: np.ndarray | None
    cancelled: set[int]
    on_generate: Callable[[int], None] | None
    llm_gate: Callable[[], simpy.Event | None] | None
    llm_abort: Callable[[], simpy.Event] | None
    on_resume: Callable[[int], None] | None
    _loaded: bool
    _heads: bool
    _gen_load: float
    _started: int
    _steady_run: bool
    _chunks: dict[int, Chunk]

    def _chunk(self, c: int) -> Chunk: ...
    def _detail(self, c: int) -> ChunkDetail: ...
    def _record(self, i: int, st: Chunk, row: tuple | None) -> None: ...
    def _settled(self) -> bool: ...
    def _later(self, start: float, end: float, c_g: float) -> None: ...
    def _multipliers(self, host: int) -> tuple[float, float]: ...


class LoopView(Protocol):
    """A training loop (:class:`simrollout.sim.training.TrainingLoop`) as its bodies see it."""

    version: int
    v0: np.ndarray
    gen_steps: np.ndarray
