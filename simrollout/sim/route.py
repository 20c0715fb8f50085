"""Which engine ``fidelity: auto`` runs, from the fidelity matrix's verdicts (docs/fidelity.md).

The matrix (``simrollout.validation.fidelity``) measures the trajectory engine against the step
engine row by row; its judgement (the tolerances, ``simrollout.validation.verdicts``) is recorded
here as the rows it found outside them, and this module routes a scenario by the row that describes
it: :func:`training_route` for a training loop, :func:`unbacked` for the warning when a scenario
forces the trajectory engine where the matrix does not back it. The runner and the draws read it,
so it sits below them and imports only the scenario and the engines' registry (:mod:`.engines`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .engines import COMPILED, STEP, TRAJECTORY, Engine, engine_named

if TYPE_CHECKING:
    from ..scenario.model import Scenario

# the training rows' metrics and their tolerance, in % of the step engine's
TRAINING_TOLERANCE = {
    "training_steps_per_day": 1.0,
    "training_hours": 1.0,
    "step_seconds_p50": 2.0,
    "step_seconds_p99": 3.0,
    "discarded_samples": 3.0,
    "masked_samples": 3.0,
}

# the tolerance a loaded row's metrics are held to, in % of the step engine's (the warnings quote it)
LOADED_TOLERANCE = {m: 3.0 for m in ("worker_hours", "makespan_hours", "duration_p50", "duration_p99")}

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


# the rows the matrix measured outside tolerance at trajectory fidelity (docs/fidelity.md,
# 6,000 x 30 per row): their bounded metrics off the step engine, in %
OUTSIDE = {
    "sync/tier": {"duration_p99": -3.54},
    "sync/both/warm_pool": {"duration_p99": -3.15},
    "sync/both/clients": {"duration_p99": -3.15},
    "sync/both/shared": {"duration_p99": -3.15},
    "sync/both/in_order": {"duration_p99": -3.15},
}


# the rows the matrix measured outside tolerance for the compiled engine (docs/fidelity.md,
# ``compare(row, fast=COMPILED.name)`` on the rows it covers, 6,000 x 30 per row)
COMPILED_OUTSIDE: dict[str, dict[str, float]] = {}


def compiled_route(scn: Scenario) -> str | None:
    """Why ``auto`` may run ``scn`` on the compiled engine (it covers the scenario and the
    matrix's compiled rows of its policy and load hold), else None."""
    if COMPILED.gaps(scn) is not None:
        return None
    if scn.training is not None:  # the training rows that back its loop
        if any(name in COMPILED_OUTSIDE for name in _training_rows_of(scn)):
            return None
        return "the compiled engine, within the fidelity matrix's compiled training rows"
    policy, load, extras = row_of(scn)
    for name in COMPILED_OUTSIDE:
        p, ld, *x = name.split("/")
        if p == policy and ld == load and (not x or x[0] in extras):
            return None
    return "the compiled engine, within the fidelity matrix's compiled rows"


def row_of(scn: Scenario) -> tuple[str, str, set[str]]:
    """The matrix's policy, load and extras that describe ``scn``."""
    pol, sub = scn.policy, scn.substrates
    policy = "sync" if pol.mode == "sync" else "poisson" if scn.arrivals.kind == "poisson" else "async"
    host = any(s.contention.factor(ph)(8.0) > 1.0 for s in sub for ph in ("create", "exec", "teardown"))
    inf = scn.cluster.inference
    tier = inf is not None and scn.workload.tokens is None and inf.slowdown > 0
    load = "both" if host and tier else "host" if host else "tier" if tier else "none"
    con = [s.contention for s in sub]
    flags = {
        "warm_pool": pol.warm_pool > 0,
        "clients": any(c.scope == "client" for c in con),
        "shared": any(c.shared for c in con),
        "in_order": any(c.creates == "in_order" for c in con),
        "weights": any(c.weights for c in con),
        "timeouts": pol.timeout is not None,
        "failures": any(s.failures != type(s.failures)() for s in sub),
        "reuse": pol.reuse,
        "images": scn.workload.images is not None,
        "tokens": scn.workload.tokens is not None,
    }
    extras = {x for x, on in flags.items() if on}
    return policy, load, extras


def unbacked(scn: Scenario) -> str | None:
    """A warning when ``scn`` forces the trajectory engine where the matrix measured it outside
    tolerance (the row that matches, and its error), else None."""
    if scn.fidelity != TRAJECTORY.name:
        return None
    if scn.training is not None:
        return unbacked_training(scn)
    policy, load, extras = row_of(scn)
    rows = []
    for name, misses in OUTSIDE.items():
        p, ld, *x = name.split("/")
        if p == policy and ld == load and (not x or x[0] in extras):
            metric, diff = max(misses.items(), key=lambda kv: abs(kv[1]))
            rows.append((abs(diff), name, metric, diff))
    if not rows:
        return None
    _, name, metric, diff = max(rows)
    tol = LOADED_TOLERANCE[metric]
    return (
        f"fidelity '{TRAJECTORY.name}' is forced where the fidelity matrix measured it outside tolerance: "
        f"row {name}, {metric} {diff:+.2f}% off the step engine (tolerance ±{tol:g}%, docs/fidelity.md); "
        "'auto' runs the step engine here"
    )


def _training_rows_of(scn: Scenario) -> list[str]:
    """The training rows that back ``scn``'s loop: its mode at its load, and its variants."""
    tr = scn.training
    _, load, _ = row_of(scn)
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
    if tr.at_sync == "interrupt":
        names.append(f"{tr.mode}/{loaded}/train_interrupt")
    if scn.workload.tokens is not None:
        names.append(f"{tr.mode}/{loaded}/train_tokens")
    if tr.train_time.kind == "flops" or tr.weight_sync_time.kind == "transfer":
        names.append(f"sync/{loaded}/train_physics")
    if tr.mode == "sync" and (tr.sync_every > 1 or tr.update_groups < tr.prompts_per_step):
        names.append(f"sync/{loaded}/train_stream")
    streams = tr.sync_every > 1 or tr.update_groups < tr.prompts_per_step
    if tr.mode == "async" and (streams or tr.staleness_fraction is not None or tr.stale_policy == "keep"):
        names.append(f"async/{loaded}/train_fraction")
    return names


# beyond the trajectory engine, within the compiled engine's rows
INTERRUPT = "at_sync 'interrupt' (turns interrupted at a weight sync)"
TOKENS = "serving engines (a token workload)"


def _missing(scn: Scenario, covered: tuple[str, ...] = ()) -> str | None:
    """The first way ``scn``'s loop goes beyond the training rows (but ``covered``), else None."""
    tr = scn.training
    if scn.workload.tokens is not None and TOKENS not in covered:
        return TOKENS
    if tr.mode != "sync" and (tr.over_sampling or tr.dynamic_sampling is not None):
        return f"over-sampling or dynamic sampling in mode '{tr.mode}'"
    # the trajectory engine's bodies run a turn to its end
    if tr.at_sync == "interrupt" and INTERRUPT not in covered:
        return INTERRUPT
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
    for name in _training_rows_of(scn):
        if name in ROUTED:
            metric, diff = max(ROUTED[name].items(), key=lambda kv: abs(kv[1]))
            return name, metric, diff
    return None


def training_route(scn: Scenario, steps: float) -> tuple[str, str]:
    """What ``fidelity: auto`` runs for a training loop of ``steps`` simulated steps, and why."""
    if steps <= 2e5:
        return STEP.name, f"auto: {steps:,.0f} steps, small enough to simulate every step"
    compiled = compiled_route(scn)
    beyond = _missing(scn, (INTERRUPT, TOKENS) if compiled else ())  # the compiled rows back those
    if beyond is not None:
        return (
            STEP.name,
            f"auto: the training loop with {beyond} runs on the step engine (no fidelity-matrix row)",
        )
    if scn.workload.tokens is not None:  # its bodies on the compiled serving engines
        return COMPILED.name, (
            f"auto: {steps:,.0f} steps; the training loop in mode '{scn.training.mode}' on serving "
            f"engines, on {compiled}"
        )
    if row_of(scn)[1] in TIER_LOADS:
        name, metric, diff = routed_row(scn) or ("async/both/train", "discarded_samples", -22.92)
        return STEP.name, (
            "auto: a training loop on a loaded inference tier runs on the step engine: there the "
            f"fidelity matrix's rows gain little and some miss (row {name}: {metric} {diff:+.2f}%, "
            f"tolerance ±{TRAINING_TOLERANCE[metric]:g}%)"
        )
    hit = routed_row(scn)
    if hit is not None:
        name, metric, diff = hit
        return STEP.name, (
            f"auto: the training loop runs on the step engine: the fidelity matrix's row {name} "
            f"misses {metric} by {diff:+.2f}% (tolerance ±{TRAINING_TOLERANCE[metric]:g}%)"
        )
    if compiled:
        return (
            COMPILED.name,
            f"auto: {steps:,.0f} steps; the training loop in mode '{scn.training.mode}' on {compiled}",
        )
    return TRAJECTORY.name, (
        f"auto: {steps:,.0f} steps; the training loop in mode '{scn.training.mode}' at trajectory "
        "fidelity, within the fidelity matrix's training rows"
    )


def unbacked_training(scn: Scenario) -> str | None:
    """A warning when ``scn`` forces the trajectory engine on a loop the matrix routes."""
    if scn.fidelity != TRAJECTORY.name or scn.training is None:
        return None
    hit = routed_row(scn)
    beyond = _missing(scn)
    if hit is not None:
        name, metric, diff = hit
        return (
            f"fidelity '{TRAJECTORY.name}' is forced where the fidelity matrix measured the training loop "
            f"outside tolerance: row {name}, {metric} {diff:+.2f}% off the step engine (tolerance "
            f"±{TRAINING_TOLERANCE[metric]:g}%, docs/fidelity.md); 'auto' runs the step engine here"
        )
    if beyond is not None:
        return (
            f"fidelity '{TRAJECTORY.name}' is forced on a training loop with {beyond}, which the fidelity "
            "matrix does not cover (docs/fidelity.md); 'auto' runs the step engine here"
        )
    return None


def fidelity_choice(scn: Scenario) -> tuple[str, str]:
    """The fidelity ``scn`` runs at and why. ``auto`` simulates every step when the run is small (at
    most 200k steps), else uses the trajectory engine, which the fidelity matrix
    (docs/fidelity.md) finds within tolerance of the step engine in every mode."""
    if scn.fidelity != "auto":
        return scn.fidelity, "set in the scenario"
    steps = scn.trajectories * scn.workload.steps.mean()
    if scn.training is not None:
        return training_route(scn, steps)
    if steps <= 2e5:
        return STEP.name, f"auto: {steps:,.0f} steps, small enough to simulate every step"
    inf = scn.cluster.inference
    if scn.workload.tokens is not None:
        if scn.policy.mode == "sync":  # the fidelity matrix: p50 +8-9% in sync batches
            return STEP.name, "auto: sync batches on serving engines need the step engine"
        why = f"auto: {steps:,.0f} steps; serving engines from a step-fidelity pilot, within the " \
              "fidelity matrix's serving tolerances"  # fmt: skip
        compiled = compiled_route(scn)
        return (COMPILED.name, f"{why}; {compiled}") if compiled else (TRAJECTORY.name, why)
    if scn.policy.mode == "sync" and inf is not None and inf.slowdown > 0:
        # the fidelity matrix: sync batches on a loaded tier miss p99 by 3.5% and gain < 2x
        return STEP.name, "auto: sync batches on a loaded inference tier need the step engine"
    compiled = compiled_route(scn)
    if compiled:
        return COMPILED.name, f"auto: {steps:,.0f} steps; {compiled}"
    return (
        TRAJECTORY.name,
        f"auto: {steps:,.0f} steps; the trajectory engine holds in every mode of the matrix",
    )


def resolved_fidelity(scn: Scenario) -> str:
    """The fidelity ``scn`` runs at: the name of one of the engines (:data:`.engines.ENGINES`)."""
    return fidelity_choice(scn)[0]


def resolved_engine(scn: Scenario) -> Engine:
    """The engine ``scn``'s cells run on."""
    return engine_named(resolved_fidelity(scn))
