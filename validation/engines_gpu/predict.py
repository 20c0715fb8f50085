"""Re-derive the GPU engine profiles and their predictions of the published serving tables.

    python validation/engines_gpu/predict.py                    # fit, predict, print the MAPEs
    python validation/engines_gpu/predict.py --write            # also rewrite predictions.csv
    python validation/engines_gpu/predict.py --write-profiles   # also rewrite calibration/engines/

Efficiencies are fitted on the rows of published.csv marked ``fit``; the ``held_out`` rows are
predicted (simrollout/validation/serving_tables.py says how).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from simrollout.errors import InputError
from simrollout.validation import serving_tables as st

HERE = Path(__file__).resolve().parent
ENGINES = HERE.parents[1] / "calibration" / "engines"


def profile_text(specs: dict, name: str, eff: dict, rows) -> str:
    """An engine profile file: the coefficients and, for each, its derivation."""
    prof = specs["profiles"][name]
    model, gpu, tp = specs["models"][prof["model"]], specs["gpus"][prof["gpu"]], int(prof["tp"])
    layers, kv_heads, q_heads, dim = (int(model[k]) for k in ("layers", "kv_heads", "q_heads", "head_dim"))
    params, kv = model["params"], layers * kv_heads * dim * 4
    at = rows[(rows["profile"] == name) & (rows["split"] == "fit")]
    at = at.drop_duplicates(["input_len", "output_len", "concurrency"])
    fit_rows = ", ".join(f"{r.input_len} in / {r.output_len} out at {r.concurrency}" for r in at.itertuples())
    src = prof.get("efficiencies_from")
    how = f"those of {src}, nothing fitted here" if src else f"fitted on published.csv rows ({fit_rows})"
    if prof.get("prefill_from"):
        how += f"; prefill: that of {prof['prefill_from']}"
    gpus = (
        f"{tp} GPUs x {specs['tp_efficiency']} per doubling (specs.yaml tp_efficiency)" if tp > 1 else "1 GPU"
    )
    act = prof["activations_gib"]
    mem = f"{tp} x {gpu['memory_gib']:.0f} GiB x {prof['memory_fraction']} - {tp} x {act:.0f}"
    sources = {
        "base": f"derived: {2 * params:.3g} weight bytes / (eta bandwidth x {gpus} x {gpu['bandwidth']:.3g})",
        "per_context_token": (
            f"derived: {kv} KV bytes per token ({layers} layers x {kv_heads} KV heads x {dim} x 2 (K, V)"
            " x 2 bytes) at the same bandwidth"
        ),
        "per_prefill_token": f"derived: 2 x {params:.3g} FLOPs / (eta prefill x {gpus} x {gpu['flops']:.3g})",
        "per_prefill_attention": f"derived: 4 x {layers} x {q_heads} x {dim} FLOPs per token pair, same rate",
        "per_decode": f"derived: 2 x {params:.3g} FLOPs / (eta decode x the same FLOP/s)",
        "kv_capacity_tokens": f"derived: ({mem} GiB activations - weights) / {kv} bytes",
        "max_batch_tokens, max_running, overhead": prof["settings"],
    }
    doc = {
        "version": 1,
        "name": name,
        "provenance": {
            "method": "model shape and GPU figures, with efficiencies fitted on published rows",
            "model": f"{prof['model']}: {model['source']}",
            "gpu": gpu["source"],
            "engine": prof["engine"],
            "tensor_parallel": gpus,
            "efficiencies": {**eff, "how": how},
            "sources": sources,
        },
        "engine": st.engine_spec(specs, name, eff),
    }
    header = (
        f"# {name}: {prof['model']} (BF16) on {tp} x {prof['gpu'].upper()}, TP={tp}.\n"
        "# Written by validation/engines_gpu/predict.py --write-profiles (specs.yaml, published.csv);\n"
        "# validation/engines_gpu/README.md gives its held-out error.\n"
    )
    return header + yaml.safe_dump(doc, sort_keys=False, width=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite predictions.csv")
    ap.add_argument(
        "--write-profiles", action="store_true", help="rewrite the profiles in calibration/engines/"
    )
    args = ap.parse_args(argv)
    try:
        specs = st.load_specs(HERE / "specs.yaml")
        rows = st.load_rows(HERE / "published.csv")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        pred, effs = st.evaluate(specs, rows)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(st.mape(pred).to_string(index=False, float_format="%.2f"))
    if args.write:
        cols = [
            "profile",
            "input_len",
            "output_len",
            "concurrency",
            "metric",
            "split",
            "value",
            "predicted",
            "error_pct",
        ]
        pred[cols].to_csv(HERE / "predictions.csv", index=False, float_format="%.6g")
    if args.write_profiles:
        for name, eff in effs.items():
            (ENGINES / f"{name}.yaml").write_text(profile_text(specs, name, eff, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
