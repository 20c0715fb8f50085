"""The engines a cell can run on, one entry each: its name (a scenario's ``fidelity``), what it
covers and how it runs. Routing (:mod:`simrollout.sim.route`, ``fidelity: auto``), the runner's
dispatch (:func:`.run.run_engine`) and the draws read what they need from the entry, so an engine's
name is spelled here and in the scenario's schema only.

This module imports nothing of the package: everything below the runner may read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    """One engine. ``per_step``: its workload keeps every step's detail and its bodies run every
    LLM and tool call as events; ``cell``: the engine whose cell (bodies, draws) it builds;
    ``compiled``: the cell's trajectories run through the compiled loop."""

    name: str
    covers: str
    runs: str
    per_step: bool
    cell: str = ""  # (its own name when empty)
    compiled: bool = False

    def __post_init__(self) -> None:
        if not self.cell:
            object.__setattr__(self, "cell", self.name)

    def draws_steps(self, scn) -> bool:
        """Whether scenario ``scn``'s workload keeps every step's detail on this engine: the step
        engine's, and a training loop on a token workload in the compiled engine (its bodies run
        every turn on compiled serving engines, sim/compiled_tokens.py)."""
        loop_on_tokens = scn.training is not None and scn.workload.tokens is not None
        return self.per_step or (self.compiled and loop_on_tokens)

    def pilots(self, scn) -> bool:
        """Whether ``scn``'s serving engines come from a step-engine pilot (a token workload on
        an engine without per-step bodies)."""
        return scn.workload.tokens is not None and not self.draws_steps(scn)

    def gaps(self, scn) -> str | None:
        """What of scenario ``scn`` this engine does not cover, else None: the compiled engine's
        are ``Scenario.compiled_gaps``; the others' limits are the scenario's own checks."""
        return scn.compiled_gaps() if self.compiled else None


STEP = Engine(
    "step",
    covers="everything a scenario can say: the reference the other engines are measured against "
    "(docs/fidelity.md)",
    runs="SimPy processes; each trajectory's every LLM and tool call an event (sim/body_steps.py)",
    per_step=True,
)
TRAJECTORY = Engine(
    "trajectory",
    covers="every scenario but a training loop on a token workload or with at_sync 'interrupt' "
    "(the Scenario's checks); the fidelity matrix holds it to the step engine (route.OUTSIDE: the "
    "rows it misses)",
    runs="SimPy processes; a body is one wait or segments that re-read the load "
    "(sim/body_trajectory.py, sim/segments.py); serving engines through a step pilot",
    per_step=False,
)
COMPILED = Engine(
    "compiled",
    covers="what Scenario.compiled_gaps leaves: async batches, Poisson arrivals, sync barriers, "
    "contention curves, quotas, rate limits, failures, retries, timeouts, serving engines through a "
    "pilot, the async training loop",
    runs="the trajectory engine's cell and draws through an exact event loop compiled with numba "
    "(sim/compiled.py, sim/compiled_loop.py)",
    per_step=False,
    cell=TRAJECTORY.name,
    compiled=True,
)
ENGINES: dict[str, Engine] = {e.name: e for e in (STEP, TRAJECTORY, COMPILED)}


def engine_named(name: str) -> Engine:
    """The engine of fidelity ``name`` (one of :data:`ENGINES`; ``auto`` is resolved by the route)."""
    return ENGINES[name]
