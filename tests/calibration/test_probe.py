"""Probes against real backends: the local process and the real Docker engine."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from simrollout.calibration.backends import BackendUnavailable, get_backend
from simrollout.calibration.calibrate import calibrate
from simrollout.calibration.probe import ProbePlan, probe, read_records
from simrollout.errors import InputError


def test_process_probe_times_every_phase(tmp_path):
    out = tmp_path / "p.jsonl"
    run_id = probe(get_backend("process"), ProbePlan(sandboxes=3, commands=4, levels=(1, 2)), out)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    phases = [r["phase"] for r in recs]
    assert phases.count("create") == 6 and phases.count("exec") == 24 and phases.count("teardown") == 6
    # file transfers are timed at the first level only (the model has no such operation under load)
    assert phases.count("upload") == 3 and phases.count("download") == 3
    assert {r["concurrency"] for r in recs if r["phase"] in ("upload", "download")} == {1}
    assert all(r["run_id"] == run_id and r["ok"] and r["latency"] > 0 for r in recs)
    assert {r["concurrency"] for r in recs} == {1, 2}


def test_failed_commands_are_recorded_not_lost(tmp_path):
    out = tmp_path / "p.jsonl"
    probe(get_backend("process"), ProbePlan(sandboxes=2, commands=3, levels=(1,), command="exit 3"), out)
    execs = [r for r in read_records([out]) if r["phase"] == "exec"]
    assert len(execs) == 6 and not any(r["ok"] for r in execs)
    assert {r["error"] for r in execs} == {"CommandFailed"}


@pytest.mark.parametrize(
    "name,needs",
    [
        ("kubernetes", "kubernetes"),
        ("daytona", "daytona"),
        ("e2b", "e2b"),
        ("modal", "modal"),
        ("ec2", "boto3"),
    ],
)
def test_unavailable_backends_say_what_is_missing(name, needs, monkeypatch):
    for var in ("KUBECONFIG", "DAYTONA_API_KEY", "E2B_API_KEY", "MODAL_TOKEN_ID", "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    with pytest.raises(BackendUnavailable) as exc:
        get_backend(name)
    msg = str(exc.value)
    assert name in msg and ("simrollout[" in msg or "set " in msg or "KUBECONFIG" in msg)


def test_docker_without_an_engine_says_how_to_start_one(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")  # the discard port: nothing answers
    with pytest.raises(BackendUnavailable, match="no Docker engine answers .*scripts/start-docker.sh"):
        get_backend("docker")


def test_unknown_backend():
    with pytest.raises(InputError, match="expected one of"):
        get_backend("nope")


def test_docker_probe_times_task_image_loads_and_resets_for_real(docker_engine, tmp_path):
    out = tmp_path / "d.jsonl"
    images_before = {i.id for i in docker_engine.images.list(all=True)}
    plan = ProbePlan(sandboxes=3, commands=2, levels=(1, 2), files=False, reset="rm -rf /tmp/w && mkdir /tmp/w",
                     image_mb=8, pulls=3)  # fmt: skip
    probe(get_backend("docker"), plan, out)
    recs = read_records([out])
    pulls = [r for r in recs if r["phase"] == "pull"]
    resets = [r for r in recs if r["phase"] == "reset"]
    assert len(pulls) == 3 and all(r["ok"] and r["bytes"] > 8 * 2**20 for r in pulls)
    assert len(resets) == 3 and all(r["ok"] and r["concurrency"] == 1 for r in resets)  # first level only
    # the task image and its loads are gone again: only what was there before
    assert {i.id for i in docker_engine.images.list(all=True)} == images_before
    # calibrate turns them into the image cache's pull rate and the reset distribution
    from simrollout.calibration.fit import pull_rate

    rate = pull_rate(pulls)
    assert rate == pytest.approx(sorted(r["bytes"] / r["latency"] / 2**20 for r in pulls)[1], rel=1e-3)


@pytest.mark.docker
def test_docker_probe_against_the_real_engine(docker_engine, tmp_path):
    out = tmp_path / "d.jsonl"
    run_id = probe(get_backend("docker"), ProbePlan(sandboxes=4, commands=3, levels=(1, 2)), out)
    recs = read_records([out])
    assert sum(r["phase"] == "create" and r["ok"] for r in recs) == 8
    assert all(r["engine_version"] for r in recs)
    dl = [r for r in recs if r["phase"] == "download"]
    assert len(dl) == 4 and all(r["ok"] for r in dl)
    left = docker_engine.containers.list(
        all=True, sparse=True, filters={"label": f"simrollout.probe={run_id}"}
    )
    assert left == []


@pytest.mark.docker
def test_interrupted_docker_probe_keeps_records_and_leaves_no_container(docker_engine, tmp_path):
    out = tmp_path / "i.jsonl"
    before = {c.id for c in docker_engine.containers.list(all=True, sparse=True)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simrollout.cli",
            "probe",
            "docker",
            "-o",
            str(out),
            "--sandboxes",
            "200",
            "--commands",
            "50",
            "--concurrency",
            "4",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if out.exists() and out.read_text().count('"phase": "exec"') >= 8:
            break
        time.sleep(0.1)
    # containers exist mid-probe
    assert {c.id for c in docker_engine.containers.list(all=True, sparse=True)} - before
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    recs = read_records([out])
    assert len(recs) >= 8 and any(r["phase"] == "teardown" for r in recs)
    after = {c.id for c in docker_engine.containers.list(all=True, sparse=True)}
    assert after - before == set()


def test_malformed_probe_file_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"phase": "exec"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl: line 1: probe record lacks field"):
        read_records([p])
    os.remove(p)


@pytest.mark.parametrize("mode", ["staggered", "burst"])
def test_probe_modes(tmp_path, mode):
    out = tmp_path / f"{mode}.jsonl"
    began = time.time()
    probe(get_backend("process"), ProbePlan(sandboxes=6, commands=1, levels=(3,), mode=mode, gap=0.05), out)
    recs = read_records([out])
    creates = sorted(r["start"] for r in recs if r["phase"] == "create")
    assert len(creates) == 6 and {r["mode"] for r in recs} == {mode}
    if mode == "staggered":  # sandbox k is released k gaps after the probe began; a loaded machine
        # can only start it later (two starts may fall closer than a gap when the first was late)
        for r in recs:
            if r["phase"] == "create":
                assert r["start"] >= began + r["sandbox"] * 0.05 - 1e-3, r
    else:  # waves of 3 released together: the 4th starts after the first wave ended
        first_wave_end = max(
            r["start"] + r["latency"] for r in recs if r["sandbox"] < 3 and r["phase"] == "teardown"
        )
        assert creates[3] >= first_wave_end - 1e-3


def test_think_time_spaces_each_sandboxs_commands_like_an_agents_turns(tmp_path):
    out = tmp_path / "think.jsonl"
    probe(get_backend("process"), ProbePlan(sandboxes=2, commands=3, levels=(2,), think=0.3), out)
    recs = read_records([out])
    execs = [r for r in recs if r["phase"] == "exec"]
    assert len(execs) == 6 and {r["think"] for r in execs} == {0.3}
    for box in (0, 1):
        mine = sorted((r for r in recs if r["sandbox"] == box and r["phase"] in ("create", "exec")),
                      key=lambda r: r["start"])  # fmt: skip
        # each command starts at least the think time after the operation before it ended
        assert all(b["start"] - (a["start"] + a["latency"]) >= 0.29 for a, b in zip(mine, mine[1:]))
    # records written before the field existed still read
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "think"}) + "\n" for r in recs))
    assert len(read_records([old])) == len(recs)


def test_drawn_think_times_spread_sandboxes_that_started_together(tmp_path):
    plan = ProbePlan(sandboxes=10, commands=4, levels=(2,), think=0.05, think_draw="exponential", seed=5)
    # each sandbox draws its own waits, the same ones each time the plan runs
    assert plan.waits(2, 0) == plan.waits(2, 0) != plan.waits(2, 1)
    many = np.concatenate([ProbePlan(commands=50, think=0.2, think_draw="exponential").waits(8, k)
                           for k in range(40)])  # fmt: skip
    assert abs(many.mean() / 0.2 - 1) < 0.1 and np.std(many) / many.mean() > 0.8  # exponential: CV 1
    with pytest.raises(ValueError, match="think_draw"):
        ProbePlan(think=0.2, think_draw="gamma")  # refused when the plan is made
    out = tmp_path / "drawn.jsonl"
    probe(get_backend("process"), plan, out)
    recs = read_records([out])
    for box in range(10):
        mine = sorted((r for r in recs if r["sandbox"] == box and r["phase"] in ("create", "exec")),
                      key=lambda r: r["start"])  # fmt: skip
        # each command's record holds the wait drawn before it, and waited it
        assert [r["think"] for r in mine[1:]] == plan.waits(2, box)
        assert all(
            b["start"] - (a["start"] + a["latency"]) >= b["think"] - 0.01 for a, b in zip(mine, mine[1:])
        )
    prov = calibrate(recs, "drawn")[0]["provenance"]["think_s"]
    assert set(prov) == {"drawn_mean", "p50", "p99"} and prov["p50"] < prov["drawn_mean"] < prov["p99"]


@pytest.mark.slow
def test_probe_refuses_an_unknown_think_draw(tmp_path):
    from tests.conftest import cli

    res = cli("probe", "process", "-o", tmp_path / "p.jsonl", "--think", "1", "--think-draw", "gamma")
    assert res.returncode == 2 and "--think-draw" in res.stderr and "exponential" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "p.jsonl").exists()


@pytest.mark.slow
def test_probe_refuses_a_negative_think_time(tmp_path):
    from tests.conftest import cli

    res = cli("probe", "process", "-o", tmp_path / "p.jsonl", "--think", "-1")
    assert (
        res.returncode == 2
        and "--think: expected seconds >= 0" in res.stderr
        and "Traceback" not in res.stderr
    )
    assert not (tmp_path / "p.jsonl").exists()


class _Unanswering:
    """The process backend, whose engine stops answering when the probe removes its sandboxes."""

    def __init__(self):
        self._be = get_backend("process")
        self.name = "process"

    def __getattr__(self, attr):
        return getattr(self._be, attr)

    def sweep(self, label):
        raise TimeoutError("timed out")


def test_an_engine_that_stops_answering_at_the_end_keeps_the_records_and_says_what_is_left(tmp_path):
    from simrollout.errors import SubstrateError

    out = tmp_path / "p.jsonl"
    with pytest.raises(SubstrateError) as info:
        probe(_Unanswering(), ProbePlan(sandboxes=2, commands=2, levels=(1,)), out)
    msg = str(info.value)
    assert "did not answer" in msg and "TimeoutError" in msg and "simrollout cleanup process" in msg
    assert str(out) in msg
    assert len(read_records([out])) >= 2 * (1 + 2 + 1)  # every lifecycle's records were kept


def test_the_cli_prints_a_substrate_error_as_one_paragraph_and_exits_1(monkeypatch, capsys):
    import simrollout.calibration.backends as backends
    from simrollout import cli

    class Dead:
        name = "docker"

        def owned(self):
            raise TimeoutError("UnixHTTPConnectionPool: Read timed out. (read timeout=60)")

    monkeypatch.setattr(backends, "get_backend", lambda name: Dead())
    monkeypatch.setattr(sys, "argv", ["simrollout", "cleanup", "docker"])
    with pytest.raises(SystemExit) as info:
        cli.main()
    err = capsys.readouterr().err
    assert info.value.code == 1
    assert "cleanup docker: the engine did not answer" in err and "Read timed out" in err
    assert "Traceback" not in err
