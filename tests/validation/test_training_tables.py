"""validation/training's published tables and their inputs: roles follow the rule (sync rows are
input, async rows held out), and each table's baseline metric log holds its input rows, and only
those, with the published numbers."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

HERE = Path(__file__).resolve().parents[2] / "validation" / "training"
TARGETS = ("verl", "areal", "areal-e2e", "vime", "verl-1step", "nemo-rl")
# baseline_metrics.csv column -> published.csv column, per target
SAME = {
    "verl": {"timing_s/step": "step", "timing_s/gen": "gen", "timing_s/old_log_prob": "old_log_prob",
             "timing_s/update_actor": "update_actor", "n_gpus": "gpus"},
    "areal": {"throughput_k_tokens_per_s": "throughput_k"},
    "areal-e2e": {"training_hours": "hours", "n_nodes": "nodes", "ppo_steps": "steps"},
    "vime": {"perf/step_time": "step", "perf/train_wait_time": "train_wait", "perf/train_time": "train"},
    "verl-1step": {"timing_s/step": "step", "timing_s/gen": "gen", "timing_s/old_log_prob": "old_log_prob",
                   "timing_s/generate_sequences": "generate_sequences",
                   "timing_s/update_actor": "update_actor",
                   "n_gpus": "gpus"},
    "nemo-rl": {"timing/train/total_step_time": "step", "n_gpus": "gpus",
                "performance/tokens_per_sec_per_gpu": "tokens_per_gpu_s"},
}  # fmt: skip


@pytest.fixture(scope="module")
def published() -> pd.DataFrame:
    return pd.read_csv(HERE / "published.csv", dtype={"staleness": str})


def test_every_row_has_a_source_and_the_rule_decides_its_role(published: pd.DataFrame):
    assert set(published["target"]) == set(TARGETS)
    assert published["source"].str.len().min() > 20
    assert (published["role"] == published["mode"].map({"sync": "input", "async": "held_out"})).all()
    for target in TARGETS:
        roles = set(published.loc[published["target"] == target, "role"])
        assert roles == {"input", "held_out"}, target


@pytest.mark.parametrize("target", TARGETS)
def test_the_baseline_log_holds_the_input_rows_with_their_published_numbers(published, target):
    folder = HERE / target
    configs = list(folder.glob("config*")) or list(folder.glob("v*/*.yaml"))  # nemo-rl: a folder a release
    assert (folder / "PROVENANCE.md").is_file() and configs
    log = pd.read_csv(folder / "baseline_metrics.csv")
    rows = published[published["target"] == target].set_index("row")
    assert sorted(log["row"]) == sorted(rows.index[rows["role"] == "input"])
    assert log["source"].str.startswith("transcribed: ").all()
    for _, rec in log.iterrows():
        for ours, theirs in SAME[target].items():
            if pd.notna(rec[ours]) or pd.notna(rows.at[rec["row"], theirs]):
                assert float(rec[ours]) == pytest.approx(float(rows.at[rec["row"], theirs])), (
                    rec["row"],
                    ours,
                )


def test_the_derived_step_of_the_end_to_end_table_is_its_hours_over_its_steps():
    log = pd.read_csv(HERE / "areal-e2e" / "baseline_metrics.csv")
    derived = log["training_hours"] * 3600 / log["ppo_steps"]
    assert derived.to_numpy() == pytest.approx(log["step_s_derived"].to_numpy())
