"""Replaying a trace: its own trajectories on any substrate, in both fidelities."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from simrollout.errors import InputError
from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from simrollout.sim.workload_draws import draw_work
from simrollout.traces import synthetic as sy

from .conftest import SAMPLE, ZERO, write


def _scn(path, fmt, tmp, subs=ZERO, **wl):
    top = wl.pop("_top", {})
    return scenario_from_dict(
        {"version": 1, "seed": 4, "workload": {"replay": str(path), "format": fmt, **wl}, "substrates": subs,
         "cluster": {"concurrency": 1}, **top}, tmp / "s.yaml")  # fmt: skip


@pytest.mark.parametrize("fidelity", ["step", "trajectory"])
@pytest.mark.parametrize("fmt", ["tracelab", "atif", "verifiers", "mini-swe-agent"])
def test_replay_reproduces_each_duration(traces, tmp_path, fmt, fidelity):
    trajs, paths = traces[fmt]
    if len(paths) > 1:  # one document per trajectory: replay the first
        paths, trajs = paths[:1], trajs[:1]
    scn = _scn(paths[0], fmt, tmp_path).model_copy(update={"fidelity": fidelity})
    d = next(iter(run_scenario(scn).records.values())).duration
    truth = np.array([t.duration for t in trajs])
    if fmt == "verifiers":  # its setup (2 s) and scoring (0.5 s) spans replay too
        truth = truth + 2.5
    if fmt == "mini-swe-agent":  # the first response has no earlier timestamp: the trace's median
        truth = truth - trajs[0].steps[0].llm + d[0] - (truth[0] - trajs[0].steps[0].llm)
    assert len(d) == len(trajs)
    assert np.max(np.abs(d / truth - 1)) < 0.01


def test_replay_tracelab_overlap_modes(traces, tmp_path):
    trajs, (path,) = traces["tracelab"]
    out = {}
    for mode in ("trace", "max", "sum"):
        out[mode] = next(
            iter(run_scenario(_scn(path, "tracelab", tmp_path, overlap=mode)).records.values())
        ).duration
    assert np.all(out["max"] <= out["trace"] + 1e-6) and np.all(out["trace"] <= out["sum"] + 1e-6)
    assert out["sum"].sum() > out["trace"].sum()  # the trace overlaps some calls
    want = [sum(sum(c[1] for c in s.calls) + s.llm for s in t.steps) for t in trajs]
    assert np.allclose(out["sum"], want, rtol=1e-6)


def test_bootstrap_by_whole_trajectory(traces, tmp_path):
    trajs, (path,) = traces["tracelab"]
    scn = _scn(path, "tracelab", tmp_path, trajectories=500)
    w = draw_work(scn, 0, detail=True)
    trace = np.array([(len(t.steps), sum(s.llm for s in t.steps), t.duration) for t in trajs])
    runs = np.column_stack([w.steps, w.llm, w.llm + w.tool])
    # every replayed trajectory is one of the trace's, whole: its steps, LLM and tool time
    near = np.abs(runs[:, None, :] - trace[None, :, :]).max(axis=2).min(axis=1)
    assert near.max() < 1e-3
    assert np.array_equal(w.steps[: len(trajs)], [len(t.steps) for t in trajs])  # in order first
    again = draw_work(_scn(path, "tracelab", tmp_path, trajectories=500), 0, detail=True)
    assert np.array_equal(w.step_llm, again.step_llm)  # same seed, same numbers
    a = draw_work(_scn(path, "tracelab", tmp_path, trajectories=40, resample="always"), 0)
    b = draw_work(_scn(path, "tracelab", tmp_path, trajectories=40, resample="always"), 1)
    assert not np.array_equal(a.steps, b.steps)  # a bootstrap per replication
    with pytest.raises(InputError, match="resample 'never'"):
        _scn(path, "tracelab", tmp_path, trajectories=500, resample="never")


@pytest.mark.slow
def test_replay_keeps_correlations(tmp_path):
    """Long trajectories with slow tools: kept by the replay, lost by the fitted workload."""
    from simrollout.traces import read_trace
    from simrollout.traces.fit import fit_workload

    trajs = sy.generate(300, seed=8, correlated=True)
    (path,) = write("tracelab", trajs, tmp_path)
    rep = draw_work(_scn(path, "tracelab", tmp_path, trajectories=3000), 0)
    wl = fit_workload(read_trace("tracelab", [path]))[0]["workload"] | {"trajectories": 3000}
    fit = draw_work(scenario_from_dict({"version": 1, "workload": wl, "substrates": ZERO,
                                        "cluster": {"concurrency": 1}}), 0)  # fmt: skip

    def rho(w):
        some = w.calls > 0
        return stats.spearmanr(w.steps[some], w.tool[some] / w.calls[some]).statistic

    # independent draws keep a little (a heavy tail's mean over more calls reaches further)
    assert rho(rep) > 0.5 and rho(fit) < rho(rep) - 0.25
    assert np.quantile(rep.llm + rep.tool, 0.99) > 1.1 * np.quantile(fit.llm + fit.tool, 0.99)


def test_replay_tokens_grow_contexts(traces, tmp_path):
    trajs, (path,) = traces["tracelab"]
    eng = {"profile": str(SAMPLE.parents[4] / "calibration/engines/llama3.1-8b-h100-vllm.yaml"), "engines": 2}
    scn = _scn(
        path, "tracelab", tmp_path, llm="tokens", _top={"cluster": {"concurrency": 2, "inference": eng}}
    )
    w = draw_work(scn, 0, detail=True)
    t0 = trajs[0]
    assert w.prompt[0] == t0.steps[0].input_tokens
    # the context the engine sees at each turn is the trace's input: prompt, then growth + outputs
    ctx = w.prompt[0] + np.cumsum(w.step_append[: len(t0.steps)]) + np.concatenate(
        [[0], np.cumsum(w.step_output[: len(t0.steps) - 1])])  # fmt: skip
    assert np.array_equal(ctx, [s.input_tokens for s in t0.steps])
    for fid in ("step", "trajectory"):
        res = run_scenario(scn.model_copy(update={"fidelity": fid}))
        rec = next(iter(res.records.values()))
        assert len(rec.duration) == w.n and np.all(rec.steps_done == w.steps)  # every turn served
        assert np.all(rec.llm > 0)


def test_tool_speed_scales_tool_time(traces, tmp_path):
    trajs, (path,) = traces["tracelab"]
    slow = [ZERO[0] | {"name": "slow", "tool_speed": {"shell": 2.0}}]
    base = _scn(path, "tracelab", tmp_path)
    scn = _scn(path, "tracelab", tmp_path, subs=ZERO + slow)
    a, b = draw_work(base, 0), draw_work(scn, 0, sub=scn.substrates[1])
    shell = np.array([sum(c[1] for s in t.steps for c in s.calls if c[0] == "Bash" and not s.parallel)
                      for t in trajs])  # fmt: skip
    assert np.all(b.tool >= a.tool - 1e-9) and b.tool.sum() > a.tool.sum() + shell.sum() * 0.9
    res = run_scenario(scn).summary.set_index("substrate")
    assert res.loc["slow", "duration_p50"] > res.loc["zero", "duration_p50"]


def test_tool_speed_on_drawn_workload():
    from tests.conftest import make

    d = make(**{"workload.calls_per_step": 1, "workload.tools": {"shell": {"weight": 1, "latency": 1.0},
                "file_read": {"weight": 1, "latency": 1.0, "category": "read"}}})  # fmt: skip
    d["substrates"].append(d["substrates"][0] | {"name": "fast", "tool_speed": {"read": 0.5}})
    scn = scenario_from_dict(d)
    a, b = draw_work(scn, 0), draw_work(scn, 0, sub=scn.substrates[1])
    assert np.array_equal(a.steps, b.steps) and np.array_equal(a.llm, b.llm)  # the same draws
    assert 0.6 < b.tool.sum() / a.tool.sum() < 0.9  # half the calls at half the time


def test_swe_agent_replay_needs_llm_time(traces, tmp_path):
    _, paths = traces["swe-agent"]
    with pytest.raises(InputError, match="records no LLM time"):
        _scn(paths[0], "swe-agent", tmp_path)
    scn = _scn(paths[0], "swe-agent", tmp_path, llm_time=2.0)
    assert scn.workload.replay.draw == ("llm_time",)
    d = next(iter(run_scenario(scn).records.values())).duration
    steps = len(traces["swe-agent"][0][0].steps)
    tool = sum(s.calls[0][1] for s in traces["swe-agent"][0][0].steps if s.calls)
    assert d[0] == pytest.approx(2.0 * steps + tool, rel=1e-6)


def test_replay_scenario_errors(traces, tmp_path):
    _, (path,) = traces["tracelab"]
    with pytest.raises(InputError, match="'workload.steps' beside 'replay'"):
        _scn(path, "tracelab", tmp_path, steps=3)
    with pytest.raises(InputError, match="not found"):
        _scn(tmp_path / "nope.jsonl", "tracelab", tmp_path)
    with pytest.raises(InputError, match="format"):
        _scn(path, "tracelab2", tmp_path)


def test_replay_in_the_training_loop(traces, tmp_path):
    _, (path,) = traces["tracelab"]
    training = {"prompts_per_step": 4, "samples_per_prompt": 4, "steps": 3, "train_time": 5.0}
    scn = _scn(path, "tracelab", tmp_path, _top={"training": training, "cluster": {"concurrency": 8,
               "inference": {"engines": 2}}})  # fmt: skip
    assert scn.workload.trajectories is None and scn.trajectories > 60  # the loop's budget, bootstrapped
    res = run_scenario(scn)
    assert (
        len(res.steps) == 3 and (res.steps["samples"] == 16).all() and (res.steps["generation_s"] > 0).all()
    )
