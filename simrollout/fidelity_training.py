"""The fidelity matrix's training rows: the loop at trajectory fidelity against the step engine.

Each row is the matrix's workload and fleet (:func:`simrollout.fidelity.base`) with a GRPO loop in
one mode: sync (colocated, and disaggregated), one_step_off, async with partial rollouts on and
off, over-sampling and dynamic sampling, without load and under the matrix's loads. ``fidelity:
auto`` runs a training loop on the trajectory engine only where its rows are within tolerance
(:func:`training_route`); the rows outside are listed in :data:`ROUTED` (docs/fidelity.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .fidelity import Row
    from .scenario import Scenario

# the loop's headline metrics and their tolerance, in % of the step engine's
METRICS = (
    "training_steps_per_day",
    "training_hours",
    "step_seconds_p50",
    "step_seconds_p99",
    "discarded_samples",
    "masked_samples",
)
TOLERANCE = {
    "training_steps_per_day": 1.0,
    "training_hours": 1.0,
    "step_seconds_p50": 2.0,
    "step_seconds_p99": 3.0,
    "discarded_samples": 3.0,
    "masked_samples": 3.0,
}
STEPS = 30  # training steps per row
PROMPTS, SAMPLES = 16, 8  # B x G = 128 samples a step at concurrency 256

# the variants: the loop's mode, and what else is switched on ("" = the mode alone)
VARIANTS = {
    "train": {},  # sync: colocated; one_step_off and async: disaggregated (async: partial rollouts)
    "train_disagg": {"placement": "disaggregated"},  # sync on a separate trainer
    "train_whole": {"partial_rollouts": False},  # async: a weight update discards in-flight groups
    "train_over": {"over_sampling": 0.25},  # sync: start B x 1.25 groups, train the first B
    "train_dynamic": {"dynamic_sampling": {"alpha": 1.0, "beta": 1.0}},  # sync: drop all-equal groups
}

# rows measured outside tolerance (docs/fidelity.md; 30 steps per row, async/tier at 300): their
# bounded metrics off the step engine, in %. All are on a loaded inference tier, where the trajectory
# engine also gains nothing (under 1x to 1.5x), so auto runs every loop on a loaded tier on the step engine
ROUTED: dict[str, dict[str, float]] = {
    "sync/tier/train": {"masked_samples": 4.65},
    "async/tier/train": {"discarded_samples": 12.0},
    "async/both/train": {
        "training_steps_per_day": 5.1,
        "step_seconds_p50": -13.25,
        "discarded_samples": -22.92,
    },
    "sync/both/train_over": {"masked_samples": 3.65},
    "sync/both/train_dynamic": {"step_seconds_p99": 6.98},
}
TIER_LOADS = ("tier", "both")  # loads with a saturated inference tier


def rows() -> list[Row]:
    """Every mode without load and under each load; the variants without load, on a loaded host
    and under both loads."""
    from .fidelity import LOADS, Row

    out = [Row(m, ld, "train") for m in ("sync", "one_step_off", "async") for ld in LOADS]
    loads = ("none", "host", "both")
    out += [Row("sync", ld, x) for x in ("train_disagg", "train_over", "train_dynamic") for ld in loads]
    out += [Row("async", ld, "train_whole") for ld in loads]
    return out


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


def _rows_of(scn: Scenario) -> list[str]:
    """The training rows that back ``scn``'s loop: its mode at its load, and its variants."""
    from .fidelity import _row_of

    tr = scn.training
    _, load, _ = _row_of(scn)
    names = [f"{tr.mode}/{load}/train"]
    loaded = "both" if load in TIER_LOADS else load
    if tr.mode == "sync" and tr.placement == "disaggregated":
        names.append(f"sync/{loaded}/train_disagg")
    if tr.mode == "async" and not tr.partial_rollouts:
        names.append(f"async/{loaded}/train_whole")
    if tr.over_sampling:
        names.append(f"{tr.mode}/{loaded}/train_over")
    if tr.dynamic_sampling is not None:
        names.append(f"{tr.mode}/{loaded}/train_dynamic")
    return names


def _missing(scn: Scenario) -> str | None:
    """The first way ``scn``'s loop goes beyond the training rows, else None."""
    tr = scn.training
    if scn.workload.tokens is not None:
        return "serving engines (a token workload)"
    if tr.mode != "sync" and (tr.over_sampling or tr.dynamic_sampling is not None):
        return f"over-sampling or dynamic sampling in mode '{tr.mode}'"
    if tr.mode == "one_step_off" and not tr.partial_rollouts:
        return "one_step_off without partial rollouts"
    if tr.on_failure != "mask":
        return f"on_failure '{tr.on_failure}'"
    pol = scn.policy
    if pol.warm_pool or pol.reuse or scn.workload.images is not None:
        return "warm pools, sandbox reuse or task images"
    return None


def routed_row(scn: Scenario) -> tuple[str, str, float] | None:
    """The routed row (name, metric, difference in %) that matches ``scn``'s loop, if any."""
    for name in _rows_of(scn):
        if name in ROUTED:
            metric, diff = max(ROUTED[name].items(), key=lambda kv: abs(kv[1]))
            return name, metric, diff
    return None


def training_route(scn: Scenario, steps: float) -> tuple[str, str]:
    """What ``fidelity: auto`` runs for a training loop of ``steps`` simulated steps, and why."""
    if steps <= 2e5:
        return "step", f"auto: {steps:,.0f} steps, small enough to simulate every step"
    beyond = _missing(scn)
    if beyond is not None:
        return (
            "step",
            f"auto: the training loop with {beyond} runs on the step engine (no fidelity-matrix row)",
        )
    from .fidelity import _row_of

    if _row_of(scn)[1] in TIER_LOADS:
        name, metric, diff = routed_row(scn) or ("async/both/train", "discarded_samples", -22.92)
        return "step", (
            "auto: a training loop on a loaded inference tier runs on the step engine: there the "
            f"fidelity matrix's rows gain little and some miss (row {name}: {metric} {diff:+.2f}%, "
            f"tolerance ±{TOLERANCE[metric]:g}%)"
        )
    hit = routed_row(scn)
    if hit is not None:
        name, metric, diff = hit
        return "step", (
            f"auto: the training loop runs on the step engine: the fidelity matrix's row {name} "
            f"misses {metric} by {diff:+.2f}% (tolerance ±{TOLERANCE[metric]:g}%)"
        )
    return "trajectory", (
        f"auto: {steps:,.0f} steps; the training loop in mode '{scn.training.mode}' at trajectory "
        "fidelity, within the fidelity matrix's training rows"
    )


def unbacked_training(scn: Scenario) -> str | None:
    """A warning when ``scn`` forces the trajectory engine on a loop the matrix routes."""
    if scn.fidelity != "trajectory" or scn.training is None:
        return None
    hit = routed_row(scn)
    beyond = _missing(scn)
    if hit is not None:
        name, metric, diff = hit
        return (
            f"fidelity 'trajectory' is forced where the fidelity matrix measured the training loop "
            f"outside tolerance: row {name}, {metric} {diff:+.2f}% off the step engine (tolerance "
            f"±{TOLERANCE[metric]:g}%, docs/fidelity.md); 'auto' runs the step engine here"
        )
    if beyond is not None:
        return (
            f"fidelity 'trajectory' is forced on a training loop with {beyond}, which the fidelity "
            "matrix does not cover (docs/fidelity.md); 'auto' runs the step engine here"
        )
    return None
