"""``simrollout calibrate RECORDS...``: fit a substrate (or engine) profile from probe records."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from .entry import app
from .options import err


@app.command()
def calibrate(
    probes: list[Path] = typer.Argument(None, help="Probe record files (JSONL)."),
    out: Path = typer.Option(..., "--out", "-o", help="Profile YAML to write."),
    name: str | None = typer.Option(None, help="Substrate name (default: the file stem)."),
    criterion: str = typer.Option("aic", help="Model selection: aic or bic."),
    from_quantiles: Path | None = typer.Option(
        None,
        "--from-quantiles",
        help="Build from published percentiles (YAML spec) instead of probes (default: from probes).",
    ),
    kv_capacity: int | None = typer.Option(
        None, help="Engine records: KV-cache tokens per engine (default: what the server said, llama.cpp)."
    ),
    max_running: int | None = typer.Option(
        None, help="Engine records: requests an engine runs at once (default: the server's slots, else 256)."
    ),
    image_cache_gb: float = typer.Option(
        100.0, help="With task image pulls in the records: the hosts' image cache, GB (not measured)."
    ),
    contention_points: str = typer.Option(
        "per-operation",
        help="per-operation (each operation at its own count in flight) or per-level (a level's "
        "mean count against its median, as profiles before 2026-12 were made).",
    ),
    contention_weights: bool = typer.Option(
        True,
        help="Per-operation points: weigh each other phase's operations in a phase's load by how "
        "much they slow it (fitted), instead of counting every operation in flight as one.",
    ),
    contention_shared: bool = typer.Option(
        True,
        "--contention-shared/--contention-at-start",
        help="Per-operation points: creates and teardowns share the host (curves read on the load "
        "over each operation's life, contention.shared), or every operation takes the multiplier "
        "at its start (profiles before 2026-12-02).",
    ),
    bootstrap: int | None = typer.Option(
        None,
        help="Refits from resamples of whole sandboxes per level (engine records: requests per "
        "level, mode and prompt length), plus the reference blocks' drift, stored for "
        "run/sweep/plan --uncertainty; default 50 (engine 20), 0 for none.",
    ),
    seed: int = typer.Option(0, help="Seed of the bootstrap's resamples."),
    training: bool = typer.Option(
        False,
        "--training",
        help="The files are a training run's metric logs (console, JSONL, JSON or CSV; detected "
        "without the flag when they are not probe records): write a training profile.",
    ),
    gpus: str | None = typer.Option(
        None,
        help="Training logs: the GPUs that trained, one count or one per file (e.g. 32,64,128) "
        "(default: a table of runs' 'n_gpus' column, a row a run).",
    ),
    placement: str = typer.Option(
        "colocated", help="Training logs: colocated (the engines' GPUs train) or disaggregated."
    ),
    framework: str | None = typer.Option(
        None,
        help="Training logs: verl, areal, slime, skyrl, prime-rl or nemo-rl (default: from metric names).",
    ),
    responses: int | None = typer.Option(
        None, help="Training logs: responses per step (default: tokens trained / (prompt + response mean))."
    ),
    params_b: float | None = typer.Option(
        None,
        help="Training logs: the policy's parameters, billions (written as the profile's model; default: "
        "none, the scenario gives it).",
    ),
    rows: str | None = typer.Option(
        None,
        help="Training logs: a table of runs: only the rows of these names, e.g. sync-setup2 (default: all).",
    ),
    response_sigma: float = typer.Option(
        0.5,
        help="Training logs: the lognormal sigma of a response's generation seconds, for the rollout "
        "fitted from generation seconds (default 0.5: verl logs' response lengths).",
    ),
    train_share: float = typer.Option(
        0.5,
        help="Training logs giving a sync step's seconds alone: its share on the trainer, the rest "
        "generation (default 0.5: the published sync rows that split their step).",
    ),
    mfu: float | None = typer.Option(
        None,
        help="Training logs giving a sync step's seconds alone and its tokens: split it at the trainer's "
        "FLOPs time at this model FLOPs utilisation (e.g. a training benchmark's of the same model and "
        "GPU) instead of --train-share; needs --peak-tflops (default: none, the step split by share).",
    ),
    peak_tflops: float | None = typer.Option(
        None, help="With --mfu: the GPU's dense BF16 peak, TFLOP/s (H100 SXM: 989; default: none)."
    ),
    active_params_b: float | None = typer.Option(
        None,
        help="With --mfu: the parameters a token passes through, billions (a mixture of experts' active "
        "ones; default --params-b).",
    ),
    forward_passes: int = typer.Option(
        1,
        help="With --mfu: forward-only passes a step besides training's forward and backward (the old "
        "policy's log-probs: 1; with a reference model's for a KL penalty: 2).",
    ),
) -> None:
    """Fit latency distributions to probe records and write a substrate profile (or, from
    ``probe openai`` records, an engine profile; from a training run's logs, a training profile)."""
    import warnings

    from .calibrate_training import calibrate_training, is_training_log

    if probes and (training or any(is_training_log(p) for p in probes)):
        args = (
            gpus,
            placement,
            framework,
            responses,
            params_b,
            bootstrap,
            seed,
            rows,
            response_sigma,
            train_share,
            (mfu, peak_tflops, active_params_b, forward_passes),
        )
        return calibrate_training(probes, out, *args)

    from ..calibration.calibrate import calibrate as fit
    from ..calibration.calibrate import from_quantiles as build
    from ..calibration.calibrate import plot_fits, write_profile
    from ..calibration.probe import read_records
    from ..errors import load_yaml, naming

    name = name or out.stem
    if out.is_dir():
        raise InputError(f"-o {out}: is a directory; expected the profile YAML file to write.")
    if from_quantiles is not None:
        spec, _ = load_yaml(from_quantiles)
        with naming([from_quantiles]):
            profile = build(spec, from_quantiles)
        write_profile(profile, out)
        typer.echo(f"wrote {out} (from published quantiles: {profile['provenance']['source']})")
        return
    if not probes:
        raise InputError("calibrate: give probe record files, or --from-quantiles SPEC.")
    if criterion not in ("aic", "bic"):
        raise InputError(f"--criterion: expected aic or bic, got '{criterion}'.")
    if not image_cache_gb > 0:
        raise InputError(f"--image-cache-gb: expected GB > 0, got {image_cache_gb}.")
    records = read_records(probes)
    files = ", ".join(map(str, probes))
    if not records:
        raise InputError(
            f"{files}: no probe records (empty, or only blank lines); expected the JSONL records "
            "'simrollout probe' appends."
        )
    if all(r["phase"] == "generate" for r in records):
        with naming(probes):
            return _calibrate_engine(records, name, out, kv_capacity, max_running, bootstrap, seed)
    if any(r["phase"] == "generate" for r in records):
        raise InputError(
            f"{files}: mixes engine records (phase 'generate') with sandbox "
            "records; calibrate each kind from its own files."
        )
    with warnings.catch_warnings(record=True) as caught, naming(probes):
        warnings.simplefilter("always")
        profile, plots = fit(
            records, name, criterion, image_cache_gb, contention_points, contention_weights,
            contention_shared, bootstrap=bootstrap, seed=seed,
        )  # fmt: skip
    for w in caught:
        err.print(f"warning: {w.message}")
    write_profile(profile, out)
    png = plot_fits(plots, out.with_suffix(".png"))
    for phase, f in profile["fits"].items():
        rel = ", ".join(f"{k} {v:+.1%}" for k, v in f["quantile_rel_error"].items())
        ks = f["candidates"][f["selected"]]
        typer.echo(
            f"{phase:9s} n={f['n']:<5d} {f['selected']:20s} KS={ks['ks']:.3f} (p={ks['ks_pvalue']:.2f})"
            f"  quantile error {rel}  contention slope {f['contention_slope']:.3f}"
        )
        preferred = f["criterion_choice"]
        if preferred != f["selected"]:
            typer.echo(
                f"{'':9s} {criterion.upper()} preferred {preferred}, which the KS test rejects "
                f"(p={f['candidates'][preferred]['ks_pvalue']:.3f})"
            )
        if f.get("contention_weights"):
            weighed = ", ".join(f"{q} {v:.2f}" for q, v in f["contention_weights"].items())
            typer.echo(f"{'':9s} in its load, one operation in flight of: {weighed}")
        cov = f["coverage"]
        if cov and cov["under_sampled"]:
            for advice in cov["advice"]:
                err.print(f"{phase:9s} under-sampled: {advice}")
    if profile["substrate"]["contention"].get("shared"):
        typer.echo(
            "creates and teardowns share the host: their curves read the load over each operation's life."
        )
    _say_uncertainty(profile.get("uncertainty"))
    typer.echo(f"wrote {out} and {png}")


def _say_uncertainty(unc: dict | None) -> None:
    """``calibrate``'s lines on the drift (warnings past the validation targets) and the refits."""
    from ..calibration.drift import describe

    if unc is None:
        typer.echo("drift: not measured (no reference blocks); no refits (--bootstrap 0)")
        return
    drift = unc.get("drift")
    for line in describe(drift if isinstance(drift, dict) else None):
        if "above the" in line:  # past a validation target
            err.print(f"warning: {line}")
        else:
            typer.echo(line)
    if not unc.get("refits") and str(unc.get("method", "")).startswith("none"):
        typer.echo(f"refits: {unc['method']}")
    if unc.get("refits"):
        engine = "engines" in unc  # an engine's refits: its iteration costs, not latency medians
        lo, hi = ("lo", "hi") if engine else ("p50_lo", "p50_hi")
        spread = ", ".join(f"{ph} {s[lo]:+.1%}/{s[hi]:+.1%}" for ph, s in unc["spread"].items())
        drifted = "with the reference blocks' drift" if unc.get("drift_applied") else "without drift"
        what = "iteration costs" if engine else "medians"
        typer.echo(f"bootstrap: {unc['refits']} refits, {drifted}; the refits' {what} (5th/95th percentile "
                   f"against the fit): {spread}")  # fmt: skip


def _calibrate_engine(records, name, out, kv_capacity, max_running, bootstrap, seed) -> None:
    import warnings

    from ..calibration.calibrate import write_profile
    from ..calibration.engine_fit import engine_profile
    from ..sim.engine_replay import replay

    for opt, v in (("--kv-capacity", kv_capacity), ("--max-running", max_running)):
        if v is not None and v < 1:
            raise InputError(f"{opt}: expected a positive count, got {v}.")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile = engine_profile(records, name, kv_capacity, max_running, bootstrap, seed, replay=replay)
    for w in caught:
        err.print(f"warning: {w.message}")
    write_profile(profile, out)
    it = profile["engine"]["iteration"]
    typer.echo(
        f"engine: iteration {it['base'] * 1e3:.2f} ms + {it['per_prefill_token'] * 1e6:.2f} us/prefill "
        f"token + {it['per_prefill_attention'] * 1e9:.2f} ns/prefill attention pair + "
        f"{it['per_decode'] * 1e3:.3f} ms/decode + {it['per_context_token'] * 1e9:.2f} ns/context "
        f"token; KV {profile['engine']['kv_capacity_tokens']:,} tokens"
    )
    if "per_cached_attention" in it:
        switch, below = profile["fit"].get("cached_attention_switch"), it.get("cached_attention_below")
        where = (
            f" for chunks under {below} new tokens (slow at {switch['slow_at']}, not at {switch['fast_at']})"
            if switch
            else ""
        )
        typer.echo(f"  cached prefix: {it['per_cached_attention'] * 1e9:.2f} ns/pair{where}")
        if switch and switch["fast_at"] > 2 * switch["slow_at"]:
            err.print(
                f"warning: the cached-prefix rate switches somewhere between {switch['slow_at']} and "
                f"{switch['fast_at']} new tokens and is set at {below}: appends between "
                "them are priced by a guess; probe sizes between them (probe openai --appends)."
            )
    for key, row in profile["fit"].items():
        if "tpot_rel_error" in row:
            ttft = f"  TTFT {row['ttft_rel_error']:+.1%}" if "ttft_rel_error" in row else ""
            typer.echo(f"  {key:15s} n={row['n']:<3d} TPOT {row['tpot_rel_error']:+.1%}{ttft}")
    _say_uncertainty(profile["uncertainty"])
    typer.echo(f"wrote {out}")
