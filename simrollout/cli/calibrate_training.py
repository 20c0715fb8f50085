"""``simrollout calibrate --training LOGS... --gpus N -o PROFILE.yaml``: a training profile from a
training run's metric logs (docs/calibration.md, "Calibrate the GPU side from a training run's logs")."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ..errors import InputError


def is_training_log(path: Path) -> bool:
    """True when the file names a metric a training framework logs (verl's ``timing_s/gen``, ...)
    and is not probe records; anything else goes to the probe records' reader as before."""
    from ..calibration.training_logs import NAMES

    if not path.is_file():
        return False
    with path.open("rb") as f:
        head = f.read(2_000_000).decode("utf-8", "replace")
    first = head.lstrip().split("\n", 1)[0]
    try:
        if isinstance(json.loads(first), dict) and '"phase"' in first:
            return False
    except ValueError:
        pass
    return any(name in head for names in NAMES.values() for name in names)


def _gpus(text: str | None) -> list[int]:
    if text is None:
        raise InputError(
            "--gpus: training logs need the GPUs that trained (one count, or one per file: 32,64,128); "
            "the logs do not say it."
        )
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise InputError(f"--gpus: expected positive GPU counts separated by commas, got '{text}'.")
    return out


def _flops(mfu, peak_tflops, active_params_b, forward_passes, params_b) -> dict | None:
    """``--mfu``'s trainer FLOPs (:func:`..calibration.training_fit.flops_seconds`), checked."""
    if mfu is None:
        if peak_tflops is not None or active_params_b is not None:
            raise InputError("--peak-tflops and --active-params-b split a step by its FLOPs: give --mfu too.")
        return None
    if not 0 < mfu <= 1:
        raise InputError(f"--mfu: expected a model FLOPs utilisation between 0 and 1, got {mfu}.")
    if peak_tflops is None or peak_tflops <= 0:
        raise InputError("--mfu: give --peak-tflops, the GPU's dense BF16 peak in TFLOP/s (H100 SXM: 989).")
    active = active_params_b if active_params_b is not None else params_b
    if active is None or active <= 0:
        raise InputError(
            "--mfu: give --params-b (or --active-params-b), the parameters a token passes through."
        )
    if forward_passes < 0:
        raise InputError(f"--forward-passes: expected 0 or more, got {forward_passes}.")
    return {"mfu": mfu, "peak_tflops": peak_tflops, "active_params_b": active,
            "forward_passes": forward_passes}  # fmt: skip


def calibrate_training(files, out, gpus, placement, framework, responses, params_b, bootstrap, seed,
                       rows=None, sigma=0.5, train_share=0.5,
                       flops_args=(None, None, None, 1)) -> None:  # fmt: skip
    from ..calibration.calibrate import write_profile
    from ..calibration.training_fit import DEFAULT_REFITS, training_profile
    from ..calibration.training_logs import NAMES, join_runs, read_training_log, split_runs
    from ..errors import naming

    if out.is_dir():
        raise InputError(f"-o {out}: is a directory; expected the profile YAML file to write.")
    if placement not in ("colocated", "disaggregated"):
        raise InputError(f"--placement: expected colocated or disaggregated, got '{placement}'.")
    if framework is not None and framework not in NAMES:
        raise InputError(f"--framework: expected one of {', '.join(NAMES)}, got '{framework}'.")
    for opt, v in (("--responses", responses), ("--params-b", params_b), ("--bootstrap", bootstrap)):
        if v is not None and (v < 0 or (v == 0 and opt != "--bootstrap")):
            raise InputError(f"{opt}: expected a positive number, got {v}.")
    if sigma <= 0:
        raise InputError(f"--response-sigma: expected a positive number, got {sigma}.")
    if not 0 < train_share < 1:
        raise InputError(f"--train-share: expected a share between 0 and 1, got {train_share}.")
    flops = _flops(*flops_args, params_b)
    tables = join_runs([read_training_log(f, framework) for f in files])
    wanted = [r.strip() for r in rows.split(",")] if rows else None
    if gpus is None or wanted is not None:
        tables, found = split_runs(tables, wanted, gpus is None)
    counts = _gpus(gpus) if gpus is not None else found
    tables = [t.drop(columns=[c for c in ("label", "gpus") if c in t]) for t in tables]
    with naming(files):
        profile = training_profile(
            tables, counts, placement, responses, params_b,
            DEFAULT_REFITS if bootstrap is None else bootstrap, seed, sigma, train_share, flops,
        )  # fmt: skip
    write_profile(profile, out)
    tt, prov = profile["training"]["train_time"], profile["provenance"]
    steps = sum(s[2] for s in prov["steps"])
    typer.echo(f"read {steps} steps of {prov['framework']} from {len(files)} file(s)")
    typer.echo(f"trainer: {tt['tokens_per_gpu_second']:,.1f} tokens/s/GPU ({placement}), "
               f"colocated cost {tt.get('colocated', {}).get('fitted_s', 0.0):.2f} s/step, "
               f"tokens_half {tt.get('tokens_half', 0.0):,.0f}")  # fmt: skip
    shares = [r["flops_share"] for r in profile["stages"] if "flops_share" in r]
    if shares:
        typer.echo(f"step split at the trainer's FLOPs (--mfu {flops['mfu']}): trainer share "
                   + ", ".join(f"{x:.3f}" for x in shares))  # fmt: skip
    if "logprob_tokens_per_gpu_second" in tt:
        typer.echo(f"log-prob pass: {tt['logprob_tokens_per_gpu_second']:,.1f} tokens/s/GPU")
    tr = profile["training"]
    sync = tr.get("weight_sync_time", "not logged")
    typer.echo(f"weight sync {sync} s, critical path {tr['critical_path']} s/step")
    unc = profile["uncertainty"]
    if unc["refits"]:
        s = unc["spread"]["tokens_per_gpu_second"]
        band = f"{s['p5']:,.1f}-{s['p95']:,.1f}"
        typer.echo(f"bootstrap: {unc['refits']} refits; tokens/s/GPU 5th-95th percentile {band}")
    else:
        typer.echo(f"bootstrap: {unc['method']}")
    typer.echo(f"wrote {out}")
