"""``simrollout calibrate`` on training-run logs: the profile it writes from a real log, and bad
input as one paragraph with exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import cli

DATA = Path(__file__).resolve().parents[1] / "data" / "training_logs"
LOG = DATA / "verl_issue1208_step2.log"


def test_a_verl_console_log_is_detected_and_gives_a_training_profile(tmp_path):
    out = tmp_path / "verl.yaml"
    r = cli("calibrate", LOG, "--gpus", "8", "--params-b", "7.6", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "read 1 steps of verl" in r.stdout and "38,259.7 tokens/s/GPU (colocated)" in r.stdout
    prof = yaml.safe_load(out.read_text())
    assert prof["version"] == 1 and prof["kind"] == "training"
    assert prof["provenance"]["framework"] == "verl" and prof["provenance"]["sources"] == [str(LOG)]
    assert prof["training"]["model"] == {"params_b": 7.6}
    law = prof["response_length"]
    assert law["kind"] == "lognormal" and law["max_tokens"] == 1024.0 and law["clip_ratio"] == 0.004
    # 547,190.5 tokens per rank x 8 / (102.534 + 324.958) tokens a response: 10,240 responses
    assert prof["generation"]["points"][0]["requests"] == pytest.approx(10240.0, abs=0.1)
    assert prof["generation"]["points"][0]["tokens_per_s"] == pytest.approx(
        10240.0138 * 324.958 / 74.02, rel=1e-4
    )


@pytest.mark.parametrize(
    "args, words",
    [
        (["--training", LOG, "-o", "{out}"], ["--gpus", "the GPUs that trained"]),
        (["--training", LOG, "--gpus", "8,x", "-o", "{out}"], ["--gpus", "8,x"]),
        (["--training", LOG, "--gpus", "8", "--placement", "shared", "-o", "{out}"], ["--placement", "shared"]),
        (["--training", LOG, "--gpus", "8", "--framework", "openrlhf", "-o", "{out}"], ["--framework", "verl"]),
        (["--training", "{bad}", "--gpus", "8", "-o", "{out}"], ["bad.log", "no metric of a known framework"]),
        (["--training", DATA / "verl_issue7412_step34.log", "--gpus", "8", "-o", "{out}"],
         ["verl_issue7412_step34.log", "no total_tokens", "perf/total_num_tokens"]),
    ],
)  # fmt: skip
def test_bad_training_input_is_one_paragraph_and_exit_2(tmp_path, args, words):
    bad = tmp_path / "bad.log"
    bad.write_text("loss:0.3 - lr:0.01\n")
    argv = [str(a).format(out=tmp_path / "p.yaml", bad=bad) for a in args]
    r = cli("calibrate", *argv)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    assert not (tmp_path / "p.yaml").exists()


TABLES = Path(__file__).resolve().parents[2] / "validation" / "training"


def test_a_published_table_of_runs_gives_its_gpus_rollout_and_jackknife(tmp_path):
    out = tmp_path / "verl.yaml"
    r = cli("calibrate", TABLES / "verl" / "baseline_metrics.csv", "--responses", "8192", "--params-b", "7.6",
            "-o", out)  # fmt: skip
    assert r.returncode == 0, r.stderr
    prof = yaml.safe_load(out.read_text())
    assert prof["provenance"]["gpus"] == [32, 64, 128]
    assert prof["inference"]["slowdown"] == pytest.approx(0.00785, abs=1e-4)
    assert prof["workload"]["llm_time"]["sigma"] == 0.5
    assert prof["uncertainty"]["refits"] == 3


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--rows", "sync-16"], ["--rows", "no row named sync-16", "sync-32"]),
        (["--train-share", "1.5"], ["--train-share", "between 0 and 1", "1.5"]),
        (["--response-sigma", "0"], ["--response-sigma", "positive"]),
        (["--mfu", "1.5", "--peak-tflops", "989"], ["--mfu", "between 0 and 1", "1.5"]),
        (["--mfu", "0.4"], ["--mfu", "--peak-tflops", "989"]),
        (["--mfu", "0.4", "--peak-tflops", "989"], ["--mfu", "--params-b"]),
        (["--peak-tflops", "989"], ["--peak-tflops", "give --mfu"]),
    ],
)
def test_bad_table_options_exit_2_naming_them(tmp_path, extra, words):
    r = cli("calibrate", TABLES / "verl" / "baseline_metrics.csv", "--responses", "8192", *extra,
            "-o", tmp_path / "p.yaml")  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr
