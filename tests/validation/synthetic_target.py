"""The validation suite on a known model: probe blocks are :func:`synthetic.simulate_probe` runs
and real blocks simulated rollouts, both of a true substrate whose speed drifts linearly with the
blocks run (``drift``: the relative slowdown per block). An interleaved suite then compares the
fitted model with a real side measured, on average, at the same machine state; a suite that
probes first and runs the real side after compares the fit with a machine that has since moved.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from simrollout.scenario import Substrate
from simrollout.validation.suite import HeldOutCell, SuitePlan, noted_drift
from simrollout.validation.suite_docker import cell_scenario, drifted_point, fitted_cell, measured
from simrollout.validation.validate import TARGETS
from tests.synthetic_probe import simulate_probe

# the true substrate: lognormal operations (median, p99 in s) and a contention curve of the
# shipped docker-local shape, milder
TRUTH = {
    "cold_start": (0.30, 0.60),
    "exec_overhead": (0.05, 0.12),
    "teardown": (0.20, 0.45),
}
CONTENTION = {
    "create": {2: 1.2, 8: 2.0, 32: 4.0},
    "exec": {2: 1.1, 8: 1.6, 32: 3.0},
    "teardown": {2: 1.2, 8: 1.8, 32: 3.5},
    "shared": True,
}


def true_substrate(factor: float = 1.0, name: str = "true") -> Substrate:
    """:data:`TRUTH` with every operation ``factor`` times as slow."""
    ops = {k: {"kind": "lognormal", "median": m * factor, "p99": p * factor} for k, (m, p) in TRUTH.items()}
    return Substrate.model_validate({"name": name, **ops, "contention": CONTENTION})


class SyntheticTarget:
    """The suite on :func:`true_substrate`, slowing by ``drift`` (relative) with each block run:
    block ``b`` of the sitting (probe or real) runs at ``1 + drift * b``."""

    name = "synthetic"
    targets = TARGETS

    def __init__(
        self, drift: float = 0.0, sandboxes: int = 24, commands: int = 10, folder: Path | None = None
    ):
        self.drift, self.sandboxes, self.commands = drift, sandboxes, commands
        self.folder = folder or Path(tempfile.mkdtemp(prefix="simrollout-suite-"))
        self.clock = 0  # blocks run so far
        self.fits: dict = {}  # point fits of the paired simulations

    def factor(self) -> float:
        return 1.0 + self.drift * self.clock

    def probe(self, cell: HeldOutCell, block: int) -> list[dict]:
        sub, seed = true_substrate(self.factor()), 1000 + self.clock
        self.clock += 1
        recs = simulate_probe(
            sub,
            levels=(1, max(2, cell.level // 2), cell.level),
            sandboxes=self.sandboxes,
            commands=self.commands,
            seed=seed,
        )
        for k, r in enumerate(recs):  # each block its own runs (the probe's loads count within a run)
            r.update(run_id=f"{r['run_id']}-{cell.label}-{block}", _file="synthetic.jsonl", _line=k)
        return recs

    def real(self, cell: HeldOutCell, repeat: int) -> dict[str, float]:
        from simrollout.run.executors import run_scenario

        sub = true_substrate(self.factor(), name=f"true-{self.clock}")  # its own substrate draws
        self.clock += 1
        scn = cell_scenario(cell.workload, cell.level, sub.model_dump(mode="json", exclude_none=True))
        res = measured(run_scenario(scn, jobs=1, executor="serial"))
        return res.iloc[0].drop("concurrency").to_dict()

    def simulate(self, cell: HeldOutCell, records: list[dict], plan: SuitePlan) -> dict[str, dict]:
        out, profile = fitted_cell(records, cell, plan, self.folder / cell.label.replace("@", "-"))
        return noted_drift(out, profile.get("uncertainty"))

    def point(
        self, cell: HeldOutCell, near: list[dict], records: list[dict], plan: SuitePlan
    ) -> dict[str, float]:
        return drifted_point(near, records, cell, plan, cache=self.fits)

    def machine(self) -> dict:
        return {"substrate": "synthetic", "drift_per_block": self.drift}
