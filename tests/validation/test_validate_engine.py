"""The engine validation's speed check, against a stand-in server whose speed is known."""

from __future__ import annotations

import pytest

from simrollout.validation.validate_engine import SPEED_OUTPUT, agent_scenario, speed_check
from tests.conftest import ROOT

PROFILE = ROOT / "tests" / "calibration" / "records" / "llama-cpp-tiny-c.yaml"


class Scaled:
    """Answers every completion in ``factor`` times the profile's own seconds for it."""

    def __init__(self, factor: float, seconds: float):
        self.factor, self.seconds, self.prompts = factor, seconds, []

    def complete(self, prompt: str, output: int, extra: dict) -> dict:
        self.prompts.append(prompt)
        end = self.factor * self.seconds
        return {"end": end, "ttft": end / 10, "prompt_tokens": len(prompt), "output_tokens": output}


def _scenario():
    tool = {"kind": "lognormal", "median": 0.05, "p99": 0.5}
    return agent_scenario(PROFILE, 2, 2, [1], prompt=256, appended=64, output=32, tool=tool)


@pytest.mark.parametrize("factor", [0.8, 1.0, 1.3])
def test_speed_check_reads_the_engines_drift_from_its_profile(factor):
    scn = _scenario()
    engine = scn.cluster.inference.engine
    it = engine.iteration
    # one lone request of the check's shape on the profile: overhead, the prefill, 31 decodes
    lone = (engine.overhead + it.base + it.per_prefill_token * 128
            + sum(it(0, 1, 128 + k) for k in range(1, SPEED_OUTPUT)))  # fmt: skip
    server = Scaled(factor, lone)
    got = speed_check(server, scn, None, "before run 1")
    assert got["profile"] == pytest.approx(lone, rel=1e-9)
    assert got["drift_pct"] == pytest.approx(100 * (factor - 1), abs=1e-6)
    # fresh text for every request: nothing the server cached serves it
    assert len(set(server.prompts)) == len(server.prompts) > 1


def _slower_engine(path, out, factor: float):
    """The engine profile at ``path`` with every iteration cost and the overhead ``factor`` x."""
    import yaml

    data = yaml.safe_load(path.read_text())
    eng = data["engine"]
    eng["iteration"] = {k: v * factor for k, v in eng["iteration"].items()}
    eng["overhead"] *= factor
    out.write_text(yaml.safe_dump(data))
    return out


def test_against_compares_a_recorded_agent_loop_with_the_given_engine_profile(tmp_path):
    import pandas as pd

    from simrollout.validation.validate_engine import compare_engine, recorded_agent_loop

    folder = ROOT / "tests" / "calibration" / "records" / "engine-llama-cpp-sitting-5"
    profile = ROOT / "tests" / "calibration" / "records" / "llama-cpp-tiny-f.yaml"
    scn, real = recorded_agent_loop(folder, profile)
    assert scn.cluster.levels == [1, 4, 8] and scn.trajectories == 16 and real["run"].nunique() == 3
    same = compare_engine(real, scn).set_index(["concurrency", "metric"])
    kept = pd.read_csv(folder / "comparison.csv").set_index(["concurrency", "metric"])
    assert (same.real - kept.real).abs().max() < 1e-9  # the real side is the record's
    # an engine twice as slow: the same record, every simulated latency about twice as long
    scn2, _ = recorded_agent_loop(folder, _slower_engine(profile, tmp_path / "slow.yaml", 2.0))
    slow = compare_engine(real, scn2).set_index(["concurrency", "metric"])
    ratio = slow.simulated / same.simulated
    assert ((ratio > 1.6) & (ratio < 2.4)).all(), ratio


@pytest.mark.slow
def test_against_refuses_an_engine_record_read_as_a_sandbox_rollout_and_the_reverse():
    from tests.conftest import cli

    engine_record = str(ROOT / "tests" / "calibration" / "records" / "engine-llama-cpp-sitting-5")
    proc = cli("validate", "--profile", str(ROOT / "calibration/profiles/docker-local.yaml"),
               "--against", engine_record)  # fmt: skip
    assert proc.returncode == 2 and "missing column(s) cold, end, llm, tool" in proc.stderr
    assert "read with --engine" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("validate", "--engine", "--profile", str(PROFILE), "--against",
               str(ROOT / "tests" / "calibration" / "records" / "docker-heldout-10"))  # fmt: skip
    assert (
        proc.returncode == 2 and "cluster.inference.profile" in proc.stderr and "Traceback" not in proc.stderr
    )


@pytest.mark.slow
def test_the_table_shows_where_a_request_goes_without_targets_for_it():
    """Beside the targets, the medians of time to first token and per output token: the real
    side computed per run from the record, and never counted as a missed target."""
    import numpy as np
    import pandas as pd

    from simrollout.validation.validate_engine import compare_engine, recorded_agent_loop
    from tests.conftest import cli

    folder = ROOT / "tests" / "calibration" / "records" / "engine-llama-cpp-sitting-9"
    profile = ROOT / "tests" / "calibration" / "records" / "llama-cpp-tiny-j.yaml"
    scn, real = recorded_agent_loop(folder, profile)
    table = compare_engine(real, scn).set_index(["concurrency", "metric"])
    req = real[(real.step >= 0) & (real.concurrency == 8)]
    by_run = req.groupby("run")
    ttft = np.median([g.ttft.median() for _, g in by_run])
    tpot = np.median([((g.latency - g.ttft) / (g.output_tokens - 1)).median() for _, g in by_run])
    assert table.loc[(8, "ttft_p50"), "real"] == pytest.approx(ttft, rel=1e-12)
    assert table.loc[(8, "tpot_p50"), "real"] == pytest.approx(tpot, rel=1e-12)
    assert table.loc[(8, "request_p50"), "real"] == pytest.approx(
        np.median([g.latency.quantile(0.5) for _, g in by_run]), rel=1e-12
    )
    parts = table.xs("tpot_p50", level="metric")
    assert parts.target_pct.isna().all() and (parts.simulated > 0).all()
    # the record's one missed target (p50 at 8 in flight); the parts' larger misses do not count
    assert abs(table.loc[(8, "tpot_p50"), "diff_pct"]) > abs(table.loc[(8, "request_p50"), "diff_pct"]) > 10
    proc = cli("validate", "--engine", "--profile", str(profile), "--against", str(folder))
    assert proc.returncode == 1 and "1 target(s) missed" in proc.stderr, proc.stderr
    assert "ttft_p50" in proc.stdout and "tpot_p50" in proc.stdout
    kept = pd.read_csv(folder / "comparison.csv").set_index(["concurrency", "metric"])
    assert (table.loc[kept.index].real - kept.real).abs().max() < 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("sitting, probe", [("11", "l"), ("12", "m")])
def test_the_pinned_sittings_meet_every_target_again_from_their_records(sitting, probe):
    """The held-out records with pinned slots, re-simulated from their profiles: the same
    comparison as kept, every target met (exit 0), and the record says its slots were pinned."""
    import json

    import pandas as pd

    from tests.conftest import cli

    folder = ROOT / "tests" / "calibration" / "records" / f"engine-llama-cpp-sitting-{sitting}"
    profile = ROOT / "tests" / "calibration" / "records" / f"llama-cpp-tiny-{probe}.yaml"
    assert json.loads((folder / "machine.json").read_text())["pin_slots"] is True
    proc = cli("validate", "--engine", "--profile", str(profile), "--against", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = pd.read_csv(folder / "comparison.csv")
    targets = kept[kept.target_pct.notna()]
    assert len(targets) == 9 and (targets.diff_pct.abs() <= targets.target_pct).all(), targets
