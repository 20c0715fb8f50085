"""The fidelity matrix's training rows: the loop at trajectory fidelity against the step engine.

Each row is the matrix's workload and fleet (:func:`simrollout.validation.fidelity.base`) with a GRPO loop in
one mode: sync (colocated, and disaggregated), one_step_off, async with partial rollouts on and
off, over-sampling and dynamic sampling, without load and under the matrix's loads. ``fidelity:
auto`` runs a training loop on the trajectory engine only where its rows are within tolerance
(:func:`simrollout.sim.route.training_route`); the rows outside are listed in
:data:`simrollout.sim.route.ROUTED` (docs/fidelity.md). The rows themselves are
:func:`simrollout.validation.fidelity.training_rows`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .fidelity_row import Row

# the loop's headline metrics (their tolerance: simrollout.sim.route.TRAINING_TOLERANCE)
METRICS = (
    "training_steps_per_day",
    "training_hours",
    "step_seconds_p50",
    "step_seconds_p99",
    "discarded_samples",
    "masked_samples",
)
STEPS = 30  # training steps per row
PROMPTS, SAMPLES = 16, 8  # B x G = 128 samples a step at concurrency 256

# the variants: the loop's mode, and what else is switched on ("" = the mode alone)
VARIANTS = {
    "train": {},  # sync: colocated; one_step_off and async: disaggregated (async: partial rollouts)
    "train_disagg": {"placement": "disaggregated"},  # sync on a separate trainer
    "train_whole": {"partial_rollouts": False},  # async: a weight update discards in-flight groups
    "train_over": {"over_sampling": 0.25},  # sync: start B x 1.25 groups, train the first B
    "train_dynamic": {"dynamic_sampling": {"alpha": 1.0, "beta": 1.0}},  # sync: drop all-equal groups
    # async and one_step_off: requests generating at a weight sync stop and resume after it
    "train_interrupt": {"at_sync": "interrupt"},
    # on serving engines in tokens (validation.fidelity.build: 16 engines; async and one_step_off
    # interrupt at a sync)
    "train_tokens": {},
    # the trainer with physics: 2B parameters, 500 tokens a turn at 40% of 100 TFLOP/s on 8 GPUs
    # (about 35 s a step), 4 GB of weights over 1 GB/s
    "train_physics": {
        "placement": "disaggregated",
        "model": {"params_b": 2.0},
        "train_time": {"kind": "flops", "peak_tflops": 100, "mfu": 0.4, "tokens_per_turn": 500},
        "weight_sync_time": {"kind": "transfer", "gb_per_s": 1.0, "latency": 2.0},
    },
    # verl's stream pipeline: a sync every 2 steps, updates of 8 of the 16 groups as they are ready
    "train_stream": {"placement": "disaggregated", "sync_every": 2, "mini_batch": 8},
    # verl's fully async: staleness as a fraction, stale samples kept, a sync every 2 steps, streaming
    "train_fraction": {"staleness_fraction": 0.5, "sync_every": 2, "mini_batch": 8},
}


def add_training(d: dict, row: Row, steps: int = STEPS) -> None:
    """Turn the matrix scenario ``d`` into ``row``'s training loop (in place)."""
    tr = {
        "prompts_per_step": PROMPTS,
        "samples_per_prompt": SAMPLES,
        "steps": steps,
        "mode": row.policy,
        "train_time": {"kind": "linear", "intercept": 60, "per_step": 0.04},
        "weight_sync_time": {"kind": "lognormal", "median": 15, "p99": 40},
        "task_spread": 0.5,
        "on_failure": "mask",
    }
    if row.policy != "sync":
        tr["placement"] = "disaggregated"
    tr.update(VARIANTS[row.extra])
    if tr.get("placement") == "disaggregated":
        tr["trainer"] = {"gpus": 8, "price_per_hour": 2.0}
    d["training"] = tr
    d["workload"].pop("trajectories", None)
    d["policy"] = {"timeout": d["workload"]["steps"] * 40.0, "retries": 2}  # about a tenth time out: masked
    d["substrates"][0]["failures"] = {"create": 0.02, "exec": 0.001, "teardown": 0.01}
