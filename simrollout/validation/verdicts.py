"""The fidelity matrix's judgement: the tolerance each kind of row is held to (docs/fidelity.md).

A row's metrics, in % of the step engine's, pass within these. What the matrix found outside them
is recorded in ``simrollout.sim.route`` (``OUTSIDE``, ``ROUTED``, ``COMPILED_OUTSIDE``), which
routes ``fidelity: auto`` by it below the runner.
"""

from __future__ import annotations

from ..sim.route import LOADED_TOLERANCE, TRAINING_TOLERANCE

# tolerance in % of the step engine's value: uncontended, and with a saturated tier or host
TOLERANCE = {
    "light": {"worker_hours": 0.5, "makespan_hours": 1.0, "duration_p50": 1.0, "duration_p99": 2.0},
    "loaded": LOADED_TOLERANCE,
    # serving engines from a pilot (simrollout.sim.serving_pilot): each trajectory's luck is a
    # draw, not what that trajectory met in the step engine, and the pilot is a sample, so p50
    # and p99 carry sampling noise (at 4,000 x 20: up to 3.5% and 6.8% across runs)
    "serving": {"worker_hours": 0.5, "makespan_hours": 3.0, "duration_p50": 5.0, "duration_p99": 8.0},
    # the training loop (simrollout.validation.fidelity_training): steps per day, time to finish, step time,
    # discarded and masked samples
    "training": TRAINING_TOLERANCE,
}
