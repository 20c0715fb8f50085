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
    assert prof["generation"][0]["requests"] == pytest.approx(10240.0, abs=0.1)
    assert prof["generation"][0]["tokens_per_s"] == pytest.approx(10240.0138 * 324.958 / 74.02, rel=1e-4)


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
