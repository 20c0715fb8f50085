"""``simrollout check``: every validation ``run`` makes, without simulating."""

import shutil

import pytest
import yaml
from typer.testing import CliRunner

from simrollout.cli import app
from simrollout.cli.check import check_one, describe
from tests.conftest import ROOT, cli, shipped_files

# the scenarios git tracks: a user's own beside them (perhaps half written) is not checked here
SHIPPED = [ROOT / "scenarios" / n for n in sorted(shipped_files("scenarios", "*.yaml"))]


def _invoke(*args):
    return CliRunner().invoke(app, ["check", *map(str, args)])


@pytest.mark.slow
def test_every_shipped_scenario_passes_check():
    proc = cli("check", *SHIPPED)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(SHIPPED)
    for path, line in zip(SHIPPED, lines):
        assert line.startswith(f"OK {path}: "), line
        assert " trajectories x " in line and "; fidelity " in line


def test_the_line_says_what_run_would_simulate():
    scn = check_one(ROOT / "scenarios/small.yaml")
    line = describe(scn)
    assert line.startswith("small: 2,000 trajectories x 20.0 steps")
    assert "2 substrates (docker, hosted) at concurrency 64,128" in line
    # 40,000 steps: auto picks the step engine, and says why
    assert line.endswith("fidelity step (auto: 40,000 steps, small enough to simulate every step)")


def _copy_scenario(tmp_path, name):
    """A shipped scenario copied beside its profiles' relative paths (../calibration/...)."""
    (tmp_path / "scenarios").mkdir()
    shutil.copytree(ROOT / "calibration", tmp_path / "calibration")
    dst = tmp_path / "scenarios" / name
    shutil.copy(ROOT / "scenarios" / name, dst)
    return dst


def test_a_missing_profile_file_fails_naming_it(tmp_path):
    scn = _copy_scenario(tmp_path, "serving_tokens.yaml")
    (tmp_path / "calibration/profiles/ec2.yaml").unlink()
    res = _invoke(scn)
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    assert "'../calibration/profiles/ec2.yaml' not found" in res.output
    assert "substrates.1.profile" in res.output


def test_a_misspelt_file_names_the_closest_one_beside_it(tmp_path):
    scn = _copy_scenario(tmp_path, "docker_local.yaml")
    text = scn.read_text()
    scn.write_text(text.replace("docker-local-refits.yaml", "docker-locl-refits.yaml"))
    res = _invoke(scn)
    assert res.exit_code == 2 and "Traceback" not in res.output
    said = " ".join(res.output.split())
    assert "did you mean '../calibration/profiles/docker-local-refits.yaml'?" in said
    scn.write_text(text.replace("docker-local-refits.yaml", "qqqq.yaml"))
    res = _invoke(scn)
    assert res.exit_code == 2 and "'../calibration/profiles/qqqq.yaml' not found" in res.output
    assert "did you mean" not in res.output  # no name close enough
    (tmp_path / "scenarios/traces").mkdir()
    shutil.copy(ROOT / "scenarios/traces/tracelab_synthetic.jsonl.gz", tmp_path / "scenarios/traces")
    replay = tmp_path / "scenarios/replay.yaml"
    replay.write_text(
        (ROOT / "scenarios/replay_tracelab.yaml").read_text().replace("synthetic.jsonl", "synthtic.jsonl")
    )
    res = _invoke(replay)
    assert res.exit_code == 2
    assert "did you mean 'traces/tracelab_synthetic.jsonl.gz'?" in " ".join(res.output.split())


def test_a_broken_engine_profile_fails_naming_its_file(tmp_path):
    scn = _copy_scenario(tmp_path, "serving_tokens.yaml")
    engine = tmp_path / "calibration/engines/llama3.1-8b-h100-vllm.yaml"
    data = yaml.safe_load(engine.read_text())
    data["engine"]["max_runing"] = 8
    engine.write_text(yaml.safe_dump(data))
    res = _invoke(scn)
    assert res.exit_code == 2
    assert "calibration/engines/llama3.1-8b-h100-vllm.yaml: invalid input" in res.output
    assert "field 'engine.max_runing' (line 10)" in res.output and "did you mean 'max_running'?" in res.output


def test_good_and_bad_files_each_get_their_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    data = yaml.safe_load((ROOT / "scenarios/small.yaml").read_text())
    data["cluster"]["concurency"] = data["cluster"].pop("concurrency")
    bad.write_text(yaml.safe_dump(data))
    res = _invoke(ROOT / "scenarios/small.yaml", bad)
    assert res.exit_code == 2
    assert f"OK {ROOT / 'scenarios/small.yaml'}: small:" in res.output
    assert f"{bad}: invalid input." in res.output and "field 'cluster.concurency' (line" in res.output
    assert "did you mean 'concurrency'?" in res.output


def test_a_workload_too_large_for_memory_is_refused_as_run_refuses_it(tmp_path):
    data = yaml.safe_load((ROOT / "scenarios/small.yaml").read_text())
    data["workload"]["trajectories"] = 10_000_000
    data["workload"]["steps"] = 100_000
    data["fidelity"] = "step"
    path = tmp_path / "huge.yaml"
    path.write_text(yaml.safe_dump(data))
    res = _invoke(path)
    assert res.exit_code == 2
    assert "field 'workload.trajectories'" in res.output and "GiB" in res.output


def test_a_replayed_trace_is_read_and_a_bad_one_refused(tmp_path):
    import gzip

    (tmp_path / "traces").mkdir()
    shutil.copy(ROOT / "scenarios/replay_tracelab.yaml", tmp_path)
    trace = tmp_path / "traces/tracelab_synthetic.jsonl.gz"
    trace.write_bytes(gzip.compress(b'{"session_id": "a"}\n'))
    res = _invoke(tmp_path / "replay_tracelab.yaml")
    assert res.exit_code == 2
    assert "tracelab_synthetic.jsonl.gz: line 1: not a TraceLab round_trace row" in res.output
