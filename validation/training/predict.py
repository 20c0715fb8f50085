"""Predict each published table's held-out (async) rows from its input (sync) rows with the CLI
alone (docs/training.md): ``simrollout import`` the framework's config, ``simrollout calibrate``
the baseline metric log, then ``simrollout run`` with the held-out row's settings as ``--set``
and ``--uncertainty`` for the band of the profile's refits. Writes predictions.csv and the
results table of README.md.

The band is the one ``run --uncertainty`` gives (the refits' band widened by the model's own
error), with the model's error term fitted without the table's own rows (leave one table out, as
the suites' REPORT.md does): ``run --uncertainty --model-error TERM`` with that term gives the
same band. Each held-out row's residual is added to ``validation/residuals.csv`` the first time it
is predicted (target ``training``, a table a sitting), and the shipped term refitted from it.

    python validation/training/predict.py                 # every table
    python validation/training/predict.py --only vime     # one table (others kept from predictions.csv)
"""

from __future__ import annotations

import argparse
import csv
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's package, as cli() runs it
COLUMNS = ["target", "row", "role", "metric", "published", "predicted", "input_lo", "input_hi",
           "predicted_lo", "predicted_hi", "error_pct"]  # fmt: skip
RESIDUALS = ROOT / "validation" / "residuals.csv"
TARGET_PCT = 15.0  # the held-out error a table is held to (step seconds): the term's unit
STEPS = 5  # training steps a run simulates; the step seconds are their median (step_seconds_p50)
METRIC = "step_seconds_p50"
BEGIN, END = "<!-- results: predict.py -->", "<!-- /results -->"


@dataclass
class Table:
    """One table's command sequence: its framework, the config of its input rows, the calibrate
    options (each a documented option), and per held-out row its config and ``--set`` settings."""

    framework: str
    config: str
    calibrate: list[str]
    rows: dict[str, tuple[str, list[str]]] = field(default_factory=dict)


def _verl_async(gpus: int, staleness: float, script: str) -> tuple[str, list[str]]:
    # the fully async recipe takes the log-probs from the engines ("no recompute", the page)
    return script, [f"cluster.inference.engines={gpus}", f"training.trainer.gpus={gpus}",
                    f"training.staleness_fraction={staleness}",
                    "training.train_time={recompute_logprobs: false}"]  # fmt: skip


def _one_step(engine: str) -> tuple[str, list[str]]:
    return f"config-{engine}-async-4-12.sh", ["training.mode=one_step_off", "cluster.inference.engines=4",
                                              "training.trainer.gpus=12"]  # fmt: skip


# A NeMo-RL On policy row gives its step and tokens alone: split at the trainer's FLOPs time
# (calibrate --mfu). MFU 0.30: Megatron-Bridge's BF16 pre-training MFU for the only two of these
# models it publishes in BF16 (docs/performance-summary.md @5776a6d9, 25.11, DGX-GB200: DeepSeek-V3
# 782 and Qwen3-235B-A22B 728 TFLOP/s/GPU of 2,450, 32% and 30%), rounded down, for every row; the
# peaks NeMo-RL's own (nemo_rl/utils/flops_tracker.py THEORETICAL_TFLOPS: H100 989.5, GB200 2,450);
# two forward-only passes a step (the old policy's and the reference's log-probs:
# grpo_math_1B.yaml's reference_policy_kl_penalty 0.01, which every GRPO recipe inherits).
NEMO_MFU = ["--mfu", "0.30", "--forward-passes", "2"]
PEAK = {"h100": "989.5", "gb200": "2450"}


def _nemo(tag: str, recipe: str, pair: str, params_b: str, active_b: str, half: int) -> tuple[str, Table]:
    # params_b: the model card's total parameters (the weights synced); active_b its parameters a
    # token passes through (a mixture of experts' active ones: the trainer's FLOPs)
    held = [f"cluster.inference.engines={half}", f"training.trainer.gpus={half}"]
    flops = [*NEMO_MFU, "--peak-tflops", PEAK[pair.split("-")[1]], "--active-params-b", active_b]
    return pair, Table("nemo-rl", f"{tag}/{recipe}.yaml",
                       ["--rows", f"sync-{pair}", "--params-b", params_b, *flops],
                       {f"async-{pair}": (f"{tag}/{recipe}-async-1off.yaml", held)})  # fmt: skip


TABLES: dict[str, list[tuple[str, Table]]] = {
    # the published table's name -> its profiles: (profile name, sequence)
    "verl": [("verl", Table("verl", "config.yaml", ["--params-b", "7.6"], {
        "async-16-16": _verl_async(16, 0.5, "config-async-16-16.sh"),
        "async-32-32": _verl_async(32, 0.5, "config-async-32-32.sh"),
        "async-64-64": _verl_async(64, 0.5, "config-async-64-64.sh"),
        "stale-0": _verl_async(64, 0.0, "config-async-64-64.sh"),
        "stale-0.1": _verl_async(64, 0.1, "config-async-64-64.sh"),
        "stale-0.3": _verl_async(64, 0.3, "config-async-64-64.sh"),
    }))],
    "verl-1step": [
        ("fsdp2", Table("verl", "config-fsdp2-sync.sh",
                        ["--rows", "sync-fsdp2", "--params-b", "7.6"],
                        {"async-fsdp2": _one_step("fsdp2")})),
        ("megatron", Table("verl", "config-megatron-sync.sh",
                           ["--rows", "sync-megatron", "--params-b", "7.6"],
                           {"async-megatron": _one_step("megatron")})),
    ],
    "vime": [
        ("setup1", Table("slime", "config-setup1.sh", [
            "--rows", "sync-setup1", "--gpus", "2", "--placement", "disaggregated", "--params-b", "4.0"],
            {"async-setup1": ("config-setup1.sh", ["training.mode=async"])})),
        ("setup2", Table("slime", "config-setup2.sh", [
            "--rows", "sync-setup2", "--gpus", "2", "--placement", "disaggregated", "--params-b", "4.0"],
            {"async-setup2": ("config-setup2.sh", ["training.mode=async"])})),
    ],
    # AReaL-boba's 1.5B file for both sizes (the 7B file states only its nodes): 64 + 64 GPUs on 16
    # nodes; the 7B rows' 24 nodes split the same way (96 + 96, assumed); staleness 4 for the async
    # runs (the config folder's README)
    "areal-e2e": [
        ("1.5b", Table("areal", "config-1.5b.yaml", [
            "--training", "--framework", "areal", "--rows", "sync-1.5b", "--gpus", "64",
            "--params-b", "1.78"],
            {"async-1.5b": ("config-1.5b.yaml", ["training.max_staleness=4"])})),
        ("7b", Table("areal", "config-1.5b.yaml", [
            "--training", "--framework", "areal", "--rows", "sync-7b", "--gpus", "96", "--params-b", "7.6"],
            {"async-7b": ("config-1.5b.yaml", ["training.max_staleness=4", "cluster.inference.engines=96",
                                               "training.trainer.gpus=96"])})),
    ],
    # NeMo-RL's performance page: each equal-GPU pair a profile (its On policy row, the step alone
    # split at the default trainer share); the 1-step Off recipe on half the GPUs each side
    "nemo-rl": [
        _nemo("v0.5.0", "grpo-llama3.1-8b-instruct-2n8g", "v0.5-h100-llama-8b", "8.03", "8.03", 8),
        _nemo("v0.5.0", "grpo-qwen3-30ba3b-4n8g", "v0.5-h100-qwen3-30b-a3b", "30.5", "3.3", 16),
        _nemo("v0.5.0", "grpo-llama3.1-8b-instruct-2n4g", "v0.5-gb200-llama-8b", "8.03", "8.03", 4),
        _nemo("v0.6.0", "grpo-deepseek-v3-64n8g", "v0.6-h100-deepseek-v3", "671", "37", 256),
        _nemo("v0.6.0", "grpo-qwen3-235b-32n8g", "v0.6-h100-qwen3-235b", "235", "22", 128),
        _nemo("v0.6.0", "grpo-qwen3-30ba3b-4n8g", "v0.6-h100-qwen3-30b-a3b", "30.5", "3.3", 16),
        _nemo("v0.6.0", "grpo-deepseek-v3-64n4g", "v0.6-gb200-deepseek-v3", "671", "37", 128),
        _nemo("v0.6.0", "grpo-qwen3-235b-32n4g", "v0.6-gb200-qwen3-235b", "235", "22", 64),
        _nemo("v0.6.0", "grpo-qwen3-30ba3b-4n4g", "v0.6-gb200-qwen3-30b-a3b", "30.5", "3.3", 8),
    ],
}  # fmt: skip
# the published figure per table: (published.csv column, predicted from the median step seconds)
FIGURE = {"areal-e2e": ("hours", lambda step_s: step_s * 1000 / 3600)}  # 1,000 PPO steps (Table 2)
# Tables without a prediction, and why (the calibrate step refuses their logs).
NOT_PREDICTED = {
    "areal": "one throughput in tokens/s: no step seconds without the tokens a step trains",
}  # fmt: skip


def cli(*args: str) -> str:
    """One ``simrollout`` command, run as a new user would (the checkout's package first)."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    done = subprocess.run([sys.executable, "-m", "simrollout.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"simrollout {' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return done.stdout


def responses(scenario: Path) -> int:
    """Responses a step of the imported (input) config: B x G."""
    tr = yaml.safe_load(scenario.read_text())["training"]
    return int(tr["prompts_per_step"] * tr["samples_per_prompt"])


def run_sets(profile: Path, sets: list[str]) -> list[str]:
    """The ``--set`` options of a held-out run: the profile's rollout and trainer in place of the
    import's assumed ones, the run's length, then the row's own settings."""
    out = [f"workload={{import: {profile}}}", f"training.import={profile}", "training.train_time=null",
           "training.weight_sync_time=null", f"training.steps={STEPS}", *sets]  # fmt: skip
    return [a for s in out for a in ("--set", s)]


def summary_row(folder: Path) -> dict[str, float]:
    """The run's summary, its figures as numbers (an empty cell: NaN, e.g. no band without refits)."""
    with (folder / "summary.csv").open() as f:
        row = next(csv.DictReader(f))
    return {
        k: (math.nan if v in ("", None) else float(v)) if v in ("", None) or _num(v) else v
        for k, v in row.items()
    }


def _num(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def predict_table(target: str, work: Path, published: dict) -> list[dict]:
    out = []
    folder = HERE / target
    for name, t in TABLES[target]:
        scn = work / f"{target}-{name}-input.yaml"
        cli("import", t.framework, str(folder / t.config), "-o", str(scn))
        profile = work / f"{target}-{name}.yaml"
        cli("calibrate", str(folder / "baseline_metrics.csv"), "--responses", str(responses(scn)),
            *t.calibrate, "-o", str(profile))  # fmt: skip
        for row, (config, sets) in t.rows.items():
            held = work / f"{target}-{row}.yaml"
            cli("import", t.framework, str(folder / config), "-o", str(held))
            res = work / f"run-{target}-{row}"
            cli("run", str(held), "-o", str(res), "--no-records", "--uncertainty", *run_sets(profile, sets))
            s = summary_row(res)
            column, of = FIGURE.get(target, ("step", lambda step_s: step_s))
            pub = float(published[(target, row)][column])
            pred = of(s[METRIC])
            # the refits' band alone (none without refits); the model's error is added in main()
            lo, hi = (of(s.get(f"{METRIC}_input{e}", math.nan)) for e in ("_lo", "_hi"))
            out.append({"target": target, "row": row, "role": "held_out",
                        "metric": "hours" if column == "hours" else "step_s", "published": pub,
                        "predicted": round(pred, 2), "input_lo": round(lo, 2), "input_hi": round(hi, 2),
                        "error_pct": round(100 * (pred - pub) / pub, 1)})  # fmt: skip
    return out


def record_residuals(rows: list[dict], path: Path = RESIDUALS, shipped: Path | None = None) -> None:
    """Each held-out row's residual into ``residuals.csv`` where it was never recorded (a row counts
    as held out once, as first predicted: ``model_error.first_seen``), and the shipped model-error
    term (or ``shipped``) refitted from it."""
    from simrollout.validation import model_error as me

    cells = []
    for r in rows:
        unit = 1.0 if r["metric"] == "step_s" else FIGURE[r["target"]][1](1.0)  # step seconds
        cells.append({"sitting": f"training/{r['target']}", "workload": f"{r['target']}/{r['row']}",
                      "level": 0, "metric": "step_seconds", "target_pct": TARGET_PCT,
                      "real_mean": r["published"] / unit, "simulated": r["predicted"] / unit,
                      "sim_lo": r["input_lo"] / unit, "sim_hi": r["input_hi"] / unit})  # fmt: skip
    entry = {"target": "training", "date": date.today().isoformat(), "cells": cells}
    me.write_shipped(me.first_seen(path, entry), shipped)


def with_model_error(rows: list[dict], path: Path = RESIDUALS) -> list[dict]:
    """``rows`` with ``predicted_lo`` / ``_hi``: the refits' band and the model's error term fitted
    on the other tables' residuals (leave one table out), added as ``run --uncertainty`` adds them."""
    from simrollout.validation import model_error as me

    res = me.read_residuals(path)
    res = res[res.target == "training"]
    for r in rows:
        q, _ = me.conformal(me.scores(res[res.sitting != f"training/{r['target']}"]))
        point = r["predicted"]
        lo = r["input_lo"] if math.isfinite(r["input_lo"]) else point
        hi = r["input_hi"] if math.isfinite(r["input_hi"]) else point
        both = me.combine(point, lo, hi, me.half_width(q, TARGET_PCT))
        r["predicted_lo"], r["predicted_hi"] = (round(v, 2) for v in both)
    return rows


def results_table(rows: list[dict]) -> str:
    lines = ["| target | row | published (s a step; areal-e2e: hours) | predicted | refits' band | in it | "
             "band (90%) | in it | error |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        inp = "none (no refits)" if math.isnan(r["input_lo"]) else f"{r['input_lo']:.2f}-{r['input_hi']:.2f}"
        lines.append(f"| {r['target']} | {r['row']} | {r['published']:.2f} | {r['predicted']:.2f} | {inp} | "
                     f"{_yes(r, 'input')} | {r['predicted_lo']:.2f}-{r['predicted_hi']:.2f} | "
                     f"{_yes(r, 'predicted')} | {r['error_pct']:+.1f}% |")  # fmt: skip
    lines.append("")
    lines.append("| target | held-out rows | MAPE | band coverage | refits' band alone |")
    lines.append("|---|---|---|---|---|")
    for target, (n, mape, cover, inp) in summary(rows).items():
        lines.append(f"| {target} | {n} | {mape:.1f}% | {cover:.0%} | {inp:.0%} |")
    n, mape, cover, inp = summary(rows, whole=True)["all"]
    lines.append(f"| all | {n} | {mape:.1f}% | {cover:.0%} | {inp:.0%} |")
    for what, why in NOT_PREDICTED.items():
        lines.append(f"| {what} | not predicted | {why} | |")
    return "\n".join(lines)


def _inside(r: dict, band: str) -> bool:
    return r[f"{band}_lo"] <= r["published"] <= r[f"{band}_hi"]


def _yes(r: dict, band: str) -> str:
    return "yes" if _inside(r, band) else "no"


def summary(rows: list[dict], whole: bool = False) -> dict[str, tuple[int, float, float, float]]:
    """Per target (``whole``: over all rows, as ``all``): held-out rows, MAPE (%), the share of
    published values inside the band, and inside the refits' band alone."""
    out = {}
    groups = {"all": rows} if whole else {t: [r for r in rows if r["target"] == t] for t in dict.fromkeys(
        r["target"] for r in rows)}  # fmt: skip
    for target, mine in groups.items():
        mape = sum(abs(r["error_pct"]) for r in mine) / len(mine)
        cover = sum(_inside(r, "predicted") for r in mine) / len(mine)
        out[target] = (len(mine), mape, cover, sum(_inside(r, "input") for r in mine) / len(mine))
    return out


def write(rows: list[dict], csv_path: Path, readme: Path | None) -> None:
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(rows)
    if readme is not None and readme.exists():
        text = readme.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            text = head + BEGIN + "\n" + results_table(rows) + "\n" + END + rest.split(END, 1)[1]
            readme.write_text(text)


def read_rows(path: Path) -> list[dict]:
    """The rows of a predictions.csv, its figures as numbers (none: an empty list)."""
    if not path.exists():
        return []
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for c in COLUMNS[4:]:
            r[c] = float(r[c]) if r[c] not in ("", None) else math.nan
    return rows


def read_published() -> dict:
    with (HERE / "published.csv").open() as f:
        return {(r["target"], r["row"]): r for r in csv.DictReader(f)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="tables to predict (default: all)")
    ap.add_argument("-o", "--out", type=Path, default=HERE / "predictions.csv")
    ap.add_argument("--no-readme", action="store_true", help="leave README.md as it is")
    ap.add_argument("--table-only", action="store_true", help="only rewrite README's table from --out")
    args = ap.parse_args(argv)
    if args.table_only:
        write(with_model_error(read_rows(args.out)), args.out, HERE / "README.md")
        return 0
    published = read_published()
    targets = args.only or list(TABLES)
    kept = [r for r in read_rows(args.out) if r["target"] not in targets] if args.only else []
    rows = list(kept)
    with tempfile.TemporaryDirectory() as tmp:
        for target in targets:
            rows += predict_table(target, Path(tmp), published)
    order = list(TABLES)
    rows.sort(key=lambda r: order.index(r["target"]))
    record_residuals(rows)
    rows = with_model_error(rows)
    write(rows, args.out, None if args.no_readme else HERE / "README.md")
    for target, (n, mape, cover, inp) in summary(rows).items():
        print(f"{target}: {n} rows, MAPE {mape:.1f}%, band coverage {cover:.0%} (refits alone {inp:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
