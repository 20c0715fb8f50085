"""validation/training/predict.py: the command sequence of docs/training.md per published table,
its pieces, and the predictions re-derived from a clean copy of the checkout."""

from __future__ import annotations

import csv
import importlib.util
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "validation" / "training"


def _driver():
    spec = importlib.util.spec_from_file_location("training_predict", HERE / "predict.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


pd_ = _driver()


def _row(target, row, pub, pred, lo, hi, inp=(math.nan, math.nan)):
    return {"target": target, "row": row, "role": "held_out", "metric": "step_s", "published": pub,
            "predicted": pred, "input_lo": inp[0], "input_hi": inp[1], "predicted_lo": lo, "predicted_hi": hi,
            "error_pct": round(100 * (pred - pub) / pub, 1)}  # fmt: skip


def test_summary_gives_mape_and_band_coverage_per_table():
    rows = [_row("verl", "a", 100.0, 110.0, 90.0, 120.0, (95.0, 115.0)),
            _row("verl", "b", 200.0, 150.0, 140.0, 160.0), _row("vime", "c", 50.0, 55.0, 45.0, 60.0)]  # fmt: skip
    s = pd_.summary(rows)
    assert s["verl"] == (2, pytest.approx(17.5), 0.5, 0.5)  # 10% and 25%; only the first inside its bands
    assert s["vime"] == (1, pytest.approx(10.0), 1.0, 0.0)  # no refits' band covers nothing
    assert pd_.summary(rows, whole=True)["all"] == (3, pytest.approx(15.0), 2 / 3, 1 / 3)


def _residuals(tmp_path, errors: dict) -> Path:
    """A residuals.csv with one docker row and a training row per (table, row) -> simulated/real."""
    import pandas as pd

    from simrollout.validation.model_error import COLUMNS

    rows = [{"target": "docker", "sitting": "docker/x", "date": "2026-01-01", "workload": "x", "level": 1,
             "metric": "makespan", "target_pct": 10, "real_mean": 1.0, "simulated": 1.05, "sim_lo": None,
             "sim_hi": None}]  # fmt: skip
    for (table, row), ratio in errors.items():
        rows.append({"target": "training", "sitting": f"training/{table}", "date": "2026-01-01",
                     "workload": f"{table}/{row}", "level": 0, "metric": "step_seconds", "target_pct": 15,
                     "real_mean": 100.0, "simulated": 100.0 * ratio, "sim_lo": None, "sim_hi": None})  # fmt: skip
    path = tmp_path / "residuals.csv"
    pd.DataFrame(rows, columns=COLUMNS).to_csv(path, index=False)
    return path


def test_a_tables_band_holds_the_other_tables_error_not_its_own(tmp_path):
    path = _residuals(tmp_path, {("a", "r1"): 1.5, ("b", "r1"): 1.1, ("b", "r2"): 0.95})
    rows = pd_.with_model_error([_row("a", "r1", 100.0, 150.0, 0, 0), _row("b", "r1", 100.0, 110.0, 0, 0)],
                                path)  # fmt: skip
    a, b = rows
    # a's band: b's largest error (log 1.1) alone; b's: a's (log 1.5); no refits: symmetric in log terms
    assert a["predicted_hi"] == pytest.approx(150.0 * 1.1, abs=0.01)
    assert a["predicted_lo"] == pytest.approx(150.0 / 1.1, abs=0.01) and not pd_._inside(a, "predicted")
    assert b["predicted_lo"] == pytest.approx(110.0 / 1.5, abs=0.01) and pd_._inside(b, "predicted")


def test_a_row_is_recorded_once_as_first_predicted_and_the_term_refitted(tmp_path):
    import json

    from simrollout.validation import model_error as me

    path = _residuals(tmp_path, {("a", "r1"): 1.5})
    shipped = tmp_path / "term.json"
    first = [_row("a", "r1", 100.0, 120.0, 0, 0), _row("b", "r1", 100.0, 80.0, 0, 0, (70.0, 90.0))]
    pd_.record_residuals(first, path, shipped)
    res = me.read_residuals(path)
    train = res[res.target == "training"].set_index("workload")
    assert train.loc["a/r1", "simulated"] == 150.0  # kept as first recorded, not the new 120
    assert train.loc["b/r1", "simulated"] == 80.0 and train.loc["b/r1", "sim_lo"] == 70.0
    assert train.loc["b/r1", "sitting"] == "training/b"
    term = json.loads(shipped.read_text())["targets"]["training"]
    assert term["sittings"] == 2 and term["q"] == pytest.approx(math.log(1.5) / 0.15, abs=1e-3)


def test_results_table_goes_between_the_readme_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{pd_.BEGIN}\nold\n{pd_.END}\nafter\n")
    rows = [_row("verl", "async-16-16", 294.77, 398.9, 195.7, 558.5, (300.0, 420.0))]
    pd_.write(rows, tmp_path / "p.csv", readme)
    text = readme.read_text()
    assert "old" not in text and text.startswith("intro") and text.endswith("after\n")
    assert (
        "| verl | async-16-16 | 294.77 | 398.90 | 300.00-420.00 | no | 195.70-558.50 | yes | +35.3% |" in text
    )
    with (tmp_path / "p.csv").open() as f:
        assert next(csv.reader(f)) == pd_.COLUMNS


def test_run_sets_put_the_profile_first_and_the_rows_settings_last():
    args = pd_.run_sets(Path("p.yaml"), ["training.mode=async"])
    sets = args[1::2]
    assert args[::2] == ["--set"] * len(sets)
    assert sets[:4] == ["workload={import: p.yaml}", "training.import=p.yaml", "training.train_time=null",
                        "training.weight_sync_time=null"]  # fmt: skip
    assert sets[-1] == "training.mode=async"


def test_responses_are_b_times_g_of_the_imported_config(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"training": {"prompts_per_step": 512, "samples_per_prompt": 12}}))
    assert pd_.responses(p) == 6144


def test_every_held_out_row_is_predicted_or_said_why_not():
    with (HERE / "published.csv").open() as f:
        held = {(r["target"], r["row"]) for r in csv.DictReader(f) if r["role"] == "held_out"}
    planned = {(t, row) for t, seqs in pd_.TABLES.items() for _, seq in seqs for row in seq.rows}
    skipped = {(t, row) for t, row in held if t in pd_.NOT_PREDICTED or f"{t}/{row}" in pd_.NOT_PREDICTED}
    assert planned <= held  # nothing but held-out rows is predicted
    assert held == planned | skipped


@pytest.mark.slow
def test_a_clean_copy_rederives_the_recorded_predictions(tmp_path):
    copy = tmp_path / "checkout"
    for part in ("simrollout", "validation/training", "validation/residuals.csv", "pyproject.toml"):
        src, dst = ROOT / part, copy / part
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "results"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
    out = tmp_path / "predictions.csv"
    args = [sys.executable, str(copy / "validation/training/predict.py"), "--only", "vime", "-o", str(out),
            "--no-readme"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, cwd=copy)
    assert done.returncode == 0, done.stderr[-2000:]
    with out.open() as f:
        new = {(r["target"], r["row"]): r for r in csv.DictReader(f)}
    with (HERE / "predictions.csv").open() as f:
        old = {(r["target"], r["row"]): r for r in csv.DictReader(f) if r["target"] == "vime"}
    assert old and set(old) <= set(new)
    for key, r in old.items():
        for col in (
            "published",
            "predicted",
            "input_lo",
            "input_hi",
            "predicted_lo",
            "predicted_hi",
            "error_pct",
        ):
            assert new[key][col] == r[col], (key, col)
