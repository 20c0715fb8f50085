"""The tool speed command set, run for real in a sandbox and on the host."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from simrollout.calibration import tool_speed
from simrollout.calibration.backends import get_backend
from simrollout.calibration.calibrate import calibrate
from simrollout.calibration.probe import ProbePlan, probe, read_records


def _docker_ok() -> bool:
    if not shutil.which("docker"):
        return False
    return (
        subprocess.run(
            ["docker", "image", "inspect", "simrollout-busybox:local"], capture_output=True
        ).returncode
        == 0
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["process", pytest.param("docker", marks=pytest.mark.skipif(
    not _docker_ok(), reason="no Docker engine with simrollout-busybox:local"))])  # fmt: skip
def test_probe_measures_tool_speed(tmp_path, monkeypatch, backend):
    monkeypatch.setattr(tool_speed, "REPEATS", 2)
    out = tmp_path / "p.jsonl"
    be = get_backend(backend)
    plan = ProbePlan(
        sandboxes=1, commands=1, levels=(1,), image=be.default_image, tool_speed=True, files=False
    )
    probe(be, plan, out)
    recs = read_records([out])
    tools = [r for r in recs if r["phase"] == "tool"]
    assert len(tools) == 2 * 2 * len(tool_speed.COMMANDS) and all(r["ok"] for r in tools)
    assert {r["command"] for r in tools} >= {"cpu:loop", "host:cpu:loop", "io:files", "host:io:files"}
    f = tool_speed.factors(recs)
    assert set(f) == {"shell", "test", "read", "edit", "search"} and all(v > 0 for v in f.values())
    assert f["shell"] == f["test"] and f["read"] == f["edit"]


def test_calibrate_writes_tool_speed():
    rec = dict(run_id="r", backend="process", backend_version="", engine_version="", host="h", image="i",
               concurrency=1, mode="sequential", ok=True, error=None, sandbox=0, think=0.0, bytes=None)  # fmt: skip
    recs = []
    for k in range(12):
        for phase in ("create", "exec", "teardown"):
            recs.append(
                rec | {"phase": phase, "start": float(k), "latency": 0.1 + 0.001 * k, "command": None}
            )
    times = {"base": 0.01, "cpu:loop": 0.31, "cpu:hash": 0.21, "io:write-read": 0.41, "io:files": 0.21}
    for label, t in times.items():
        recs.append(rec | {"phase": "tool", "start": 0.0, "latency": t, "command": label})
        host = 0.01 + (t - 0.01) / (2.0 if label.startswith("cpu") else 1.0) if label != "base" else 0.01
        recs.append(rec | {"phase": "tool", "start": 0.0, "latency": host, "command": f"host:{label}"})
    for r in recs:
        r["_file"], r["_line"] = "p.jsonl", 1
    profile, _ = calibrate(recs, "x")
    assert profile["substrate"]["tool_speed"] == {
        "shell": 2.0,
        "test": 2.0,
        "read": 1.0,
        "edit": 1.0,
        "search": 1.0,
    }
