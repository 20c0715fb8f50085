"""Probe records -> a substrate profile: the fits, the drift the reference blocks read, the
bootstrap's refits, and the profile file and plots written.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import yaml

from ..errors import InputError
from ..scenario import Substrate
from .fit import (
    LOCAL,
    annotate,
    answered_levels,
    by_phase_of,
    check_records,
    fit_substrate,
    pull_rate,
    think_times,
)


def calibrate(
    records: list[dict],
    name: str,
    criterion: str = "aic",
    image_cache_gb: float = 100.0,
    points: str = "per-operation",
    weights: bool = True,
    shared: bool = True,
    bootstrap: int | None = 0,
    seed: int = 0,
    drift: dict | None = None,
) -> tuple[dict, dict]:
    """Records -> (profile mapping, per-phase fits with their samples, for plots). Pull records
    give ``image_cache.pull_mb_s`` (its ``cache_gb`` is ``image_cache_gb``, not measured); reset
    records give ``reset``. ``points``: contention points per operation (:func:`curve_by_load`)
    or ``per-level`` (a level's mean count against its median: how profiles before it were made).
    ``weights``: with per-operation points, weigh other phases' operations in each phase's load
    (:func:`operation_weights`), else every operation in flight counts one. ``shared``: creates
    and teardowns share their host (``contention.shared``), their curves read on the load averaged
    over each operation's life; else every curve reads the load at the operation's start.

    Reference-block records (``reference: true``, the probe's repeated short blocks) are left out
    of the fit; they give the drift (:mod:`simrollout.calibration.drift`). ``bootstrap``: refits
    from resamples of whole sandboxes per level, stored under ``uncertainty``
    (:mod:`simrollout.calibration.bootstrap`; 0, the default here: none; None, the default of
    ``simrollout calibrate``: :data:`DEFAULT_BOOTSTRAP`, a probe too thin to resample then warned
    about instead of refused); ``seed`` draws the resamples. The point fit is the same whatever
    ``bootstrap`` is. ``drift``: a drift read elsewhere (the validation suite's probe blocks,
    :func:`.drift.sitting_drift`), used where the records have no reference blocks."""
    from .bootstrap import DEFAULT_BOOTSTRAP, uncertainty
    from .drift import reference_drift, split_reference

    if points not in ("per-operation", "per-level"):
        raise InputError(f"--contention-points: expected per-operation or per-level, got '{points}'.")
    if bootstrap is not None and bootstrap < 0:
        raise InputError(f"--bootstrap: expected a count of refits >= 0, got {bootstrap}.")
    records, unanswered = answered_levels(records)
    reference, records = split_reference(records)
    check_records(records)
    paced = any(r.get("think") for r in records)  # ``probe --think``: commands spaced like turns
    shared = shared and points == "per-operation"
    weights = weights and points == "per-operation"
    annotated = annotate(records, shared, weights)
    by_phase = by_phase_of(annotated)
    pulls = by_phase.pop("pull", [])
    tools = by_phase.pop("tool", [])  # the tool speed command set (calibration/tool_speed.py)
    substrate, fits_out, plots = fit_substrate(by_phase, criterion, points, weights, shared, paced)
    if records[0]["backend"] not in LOCAL and substrate["contention"]:
        # one probing client measured what its own operations in flight do; across many rollout
        # clients of a hosted service that curve applies per client, not to the whole service
        substrate["contention"]["scope"] = "client"
    if tools:
        from .tool_speed import factors

        speed = factors(tools)
        if speed:
            substrate["tool_speed"] = speed
    rate = pull_rate(pulls)
    if rate:
        substrate["image_cache"] = {"pull_mb_s": rate, "cache_gb": image_cache_gb}
    first = records[0]
    fitted_weights = substrate["contention"].get("weights")
    profile = {
        "version": 1,
        "name": name,
        "provenance": {
            "method": f"probe fit, selected by {criterion.upper()}",
            "contention_points": points,
            "contention_reading": "creates and teardowns share the host (curves on the load over each "
            "operation's life); execs at their start"
            if shared
            else "every operation at its start",
            "contention_weights": "by phase, chosen by two-fold held-out error of the operations"
            if fitted_weights
            else "none: every operation in flight counts one",
            "backend": first["backend"],
            "backend_version": first["backend_version"],
            "engine_version": first["engine_version"],
            "host": first["host"],
            "image": first["image"],
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
            "probe_files": sorted({Path(r["_file"]).name for r in records}),
            "runs": sorted({r["run_id"] for r in records}),
            "samples": {p: len(rs) for p, rs in by_phase.items()} | ({"pull": len(pulls)} if pulls else {}),
            **({"reference_samples": len(reference)} if reference else {}),
            **({"left_out": unanswered} if unanswered else {}),
            **({"think_s": think_times(records)} if paced else {}),
            **(
                {"image_cache": f"pull_mb_s from {len(pulls)} task image loads; cache_gb given, not measured"}
                if rate
                else {}
            ),
        },
        "substrate": substrate,
        "fits": fits_out,
    }
    Substrate.model_validate({"name": name, **substrate})
    drift = reference_drift(reference) if reference else drift
    refits = DEFAULT_BOOTSTRAP if bootstrap is None else bootstrap
    if refits:
        fit_args = dict(criterion=criterion, points=points, weights=weights, shared=shared, paced=paced)
        choices = {"families": {ph: f["selected"] for ph, f in fits_out.items()},
                   "weights": fitted_weights or {}}  # fmt: skip
        profile["uncertainty"] = uncertainty(
            annotated, substrate, drift, refits, seed, fit_args, strict=bootstrap is not None, name=name,
            choices=choices,
        )  # fmt: skip
    elif drift is not None or reference:
        profile["uncertainty"] = {"method": "none (no refits)", "refits": 0, "seed": seed, "drift": drift}
    return profile, plots


def from_quantiles(spec: dict, path: Path) -> dict:
    """A profile from published percentiles: ``{quantiles: {p: v}}`` become empirical curves."""
    if not isinstance(spec, dict) or "name" not in spec or "substrate" not in spec or "source" not in spec:
        raise InputError(f"{path}: expected fields 'name', 'source' and 'substrate'.")

    def conv(v):
        if isinstance(v, dict) and set(v) == {"quantiles"}:
            return {"kind": "empirical", "quantiles": v["quantiles"]}
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        return v

    substrate = conv(spec["substrate"])
    from pydantic import ValidationError

    from ..errors import explain

    try:
        Substrate.model_validate({"name": spec["name"], **substrate})
    except ValidationError as exc:
        raise explain(exc, path) from None
    return {
        "version": 1,
        "name": spec["name"],
        "provenance": {
            "method": "from published quantiles (no raw probes)",
            "source": spec["source"],
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
            **({"notes": spec["notes"]} if "notes" in spec else {}),
        },
        "substrate": substrate,
    }


def write_profile(profile: dict, path: Path) -> None:
    """The profile as YAML, credentials scrubbed (simrollout.redact)."""
    from ..outputs import atomic_file
    from ..redact import scrub

    with atomic_file(path) as tmp:  # an existing profile is replaced only when complete
        tmp.write_text(yaml.safe_dump(scrub(profile), sort_keys=False, width=100))


def plot_fits(plots: dict, path: Path) -> Path:
    """Empirical vs fitted CDF and a QQ plot, one row per phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(plots), 2, figsize=(10, 3.2 * len(plots)), squeeze=False)
    for row, (phase, (x, dist, name)) in enumerate(plots.items()):
        xs = np.sort(x)
        ecdf = np.arange(1, len(xs) + 1) / len(xs)
        ax = axes[row][0]
        ax.step(xs, ecdf, where="post", label="probes")
        grid = np.linspace(xs[0] * 0.9, xs[-1] * 1.1, 400)
        ax.plot(grid, dist.cdf(grid), label=f"fit: {name}")
        ax.set_title(f"{phase}: CDF (n={len(xs)})")
        ax.set_xlabel("latency (s)")
        ax.legend()
        ax = axes[row][1]
        theo = np.array([dist.ppf(q) for q in (np.arange(1, len(xs) + 1) - 0.5) / len(xs)])
        ax.plot(theo, xs, ".", ms=3)
        lim = [min(theo.min(), xs.min()), max(theo.max(), xs.max())]
        ax.plot(lim, lim, "k--", lw=0.8)
        ax.set_title(f"{phase}: QQ")
        ax.set_xlabel("fitted quantile (s)")
        ax.set_ylabel("observed (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
