"""The Chrome trace of a run: valid Trace Event Format, and faithful to the simulated cell."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from simrollout.run.timeline import write_timeline
from simrollout.scenario import scenario_from_dict
from tests.conftest import cli, make

KEYS = {"X": {"name", "ph", "ts", "dur", "pid", "tid"}, "C": {"name", "ph", "ts", "pid", "args"},
        "M": {"name", "ph", "pid", "args"}}  # fmt: skip


def _scenario(tmp_path):
    d = make(**{"workload.steps": 4, "workload.llm_time": {"kind": "lognormal", "median": 2, "p99": 12},
                "workload.calls_per_step": 1, "substrates.0.cold_start": 0.4, "substrates.0.teardown": 0.1,
                "cluster.concurrency": 16, "cluster.inference": {"engines": 2, "slowdown": 0.05}})  # fmt: skip
    d["workload"].pop("trajectories")
    d["training"] = {"prompts_per_step": 2, "samples_per_prompt": 4, "steps": 5, "train_time": 6,
                     "weight_sync_time": 2, "over_sampling": 0.5}  # fmt: skip
    return d


def validate_trace(trace: dict) -> None:
    """The JSON object form of the Trace Event Format: known phases with their required fields,
    numeric times, and complete events that nest on each thread (what Perfetto needs to draw)."""
    assert set(trace) >= {"traceEvents"}
    lanes = defaultdict(list)
    for e in trace["traceEvents"]:
        assert e["ph"] in KEYS, e
        assert KEYS[e["ph"]] <= set(e), e
        if e["ph"] != "M":
            assert isinstance(e["ts"], float | int) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0
            lanes[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        if e["ph"] == "C":
            assert all(isinstance(v, int | float) for v in e["args"].values())
    for spans in lanes.values():
        stack: list[float] = []
        for a, b in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= a + 1e-6:
                stack.pop()
            assert not stack or b <= stack[-1] + 1e-6, "spans on one thread overlap without nesting"
            stack.append(b)


def test_timeline_is_a_valid_trace_of_the_loop(tmp_path):
    scn = scenario_from_dict(_scenario(tmp_path))
    path = tmp_path / "t.json"
    n = write_timeline(scn, path)
    trace = json.loads(path.read_text())
    assert len(trace["traceEvents"]) == n
    validate_trace(trace)
    ev = trace["traceEvents"]
    trains = [e for e in ev if e["ph"] == "X" and e["name"].startswith("train step")]
    syncs = [e for e in ev if e["ph"] == "X" and e["name"].startswith("weight sync")]
    assert len(trains) == len(syncs) == 5
    assert all(e["dur"] == 6e6 for e in trains) and all(e["dur"] == 2e6 for e in syncs)
    trajs = [e for e in ev if e["ph"] == "X" and e["name"].startswith("trajectory")]
    assert {e["args"]["status"] for e in trajs} >= {"ok", "cancelled"}  # over-sampled groups cancelled
    assert max(e["args"]["version"] for e in trajs) == 4
    # colocated: no trajectory of a step starts before the previous step's weights are synced
    for e in trajs:
        v = e["args"]["version"]
        if v:
            assert e["ts"] >= syncs[v - 1]["ts"] + syncs[v - 1]["dur"] - 1e-3
    engines = [e for e in ev if e["ph"] == "C" and e["name"].startswith("engine")]
    assert engines and max(e["args"]["requests"] for e in engines) >= 2


@pytest.mark.slow
def test_run_writes_a_timeline_and_the_training_tables(tmp_path):
    import yaml

    p = tmp_path / "g.yaml"
    p.write_text(yaml.safe_dump(_scenario(tmp_path)))
    out = tmp_path / "out"
    r = cli("run", str(p), "-o", str(out), "--timeline", str(tmp_path / "trace.json"), "--no-records")
    assert r.returncode == 0, r.stderr
    assert "training loop: sync, 2 prompts x 4 samples" in r.stdout
    assert "cancelled" in r.stdout  # the over-sampled trajectories are shown, not hidden
    validate_trace(json.loads((tmp_path / "trace.json").read_text()))
    import pandas as pd

    steps = pd.read_csv(out / "training_steps.csv")
    assert len(steps) == 5
    assert (
        steps.step_s - steps.generation_s - steps.last_group_s - steps.train_s - steps.sync_s
    ).abs().max() < 1e-6
    summary = pd.read_csv(out / "summary.csv")
    assert summary.training_steps_done.iloc[0] == 5
    assert summary.discarded_over_sampling.iloc[0] > 0
    assert (out / "training_steps.png").stat().st_size > 0


@pytest.mark.slow
def test_timeline_refuses_a_large_run(tmp_path):
    p = tmp_path / "big.yaml"
    import yaml

    p.write_text(yaml.safe_dump(make(**{"workload.trajectories": 200_000})))
    r = cli("run", str(p), "-o", str(tmp_path / "o"), "--timeline", str(tmp_path / "t.json"), "--no-records")
    assert r.returncode == 2 and "--timeline is for small runs" in r.stderr
    assert "Traceback" not in r.stderr
