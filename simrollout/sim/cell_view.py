"""What a cell's helpers (the steady-state window, the training loop's bodies, the compiled engine)
read and change of the cell and the loop: the interface they are written against, so that they
never import the cell that owns them (no import cycle, type-only imports included), nor reach
into its private members. Its metrics go through its :class:`~.metrics.MetricsStore`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    import simpy

    from ..scenario import Scenario, Substrate
    from .chunks import Chunk
    from .fleet import Fleet
    from .metrics import MetricsStore
    from .records import Row
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
    loaded: bool
    heads: bool
    gen_load: float
    started: int
    steady_run: bool
    chunks: dict[int, Chunk]
    metrics: MetricsStore
    curve: list[float]  # the serving engines' load curve (a pilot), else empty

    def chunk(self, c: int) -> Chunk: ...
    def detail_of(self, c: int) -> ChunkDetail: ...
    def record(self, i: int, st: Chunk, row: Row | None) -> None: ...
    def settled(self) -> bool: ...
    def later(self, start: float, end: float, c_g: float) -> None: ...
    def multipliers(self, host: int) -> tuple[float, float]: ...
    def span(self, i: int) -> tuple[ChunkDetail, int]: ...
    def finish_chunk(self, c: int) -> None: ...


class LoopView(Protocol):
    """A training loop (:class:`simrollout.sim.training.TrainingLoop`) as its bodies see it."""

    version: int
    v0: np.ndarray
    gen_steps: np.ndarray
