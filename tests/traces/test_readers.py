"""Each reader recovers what the generator wrote in its format."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simrollout.traces import read_trace
from simrollout.traces.characterise import characterise

from .conftest import SAMPLE


@pytest.mark.parametrize("fmt", ["tracelab", "atif", "verifiers", "mini-swe-agent", "swe-agent"])
def test_steps_and_tool_latencies(traces, fmt):
    trajs, paths = traces[fmt]
    ts = read_trace(fmt, paths)
    assert [len(t.steps) for t in ts.trajectories] == [len(t.steps) for t in trajs]
    if fmt == "swe-agent":  # one action per step: the generator's first call
        want = [s.calls[0][1] for t in trajs for s in t.steps if s.calls]
        got = [
            s.calls[0].latency
            for t in ts.trajectories
            for s in t.steps
            if s.calls and s.calls[0].name != "submit"
        ]
        assert np.allclose(sorted(got), sorted(want), atol=1e-6)
        return
    for t, g in zip(trajs, ts.trajectories):
        for s, r in zip(t.steps, g.steps):
            assert len(r.calls) == len(s.calls)
            truth = max((c[1] for c in s.calls), default=0.0) if s.parallel else sum(c[1] for c in s.calls)
            assert r.tool == pytest.approx(truth, abs=1e-4)
            assert r.output_tokens == s.output_tokens and r.input_tokens == s.input_tokens
    # the LLM time of every step the format times (mini-swe-agent: not the first response)
    skip_first = fmt == "mini-swe-agent"
    want = [s.llm for t in trajs for k, s in enumerate(t.steps) if not (skip_first and k == 0)]
    got = [s.llm for t in ts.trajectories for k, s in enumerate(t.steps) if not (skip_first and k == 0)]
    assert np.allclose(got, want, atol=1e-4)


def test_tracelab_overlap_and_human_gaps(traces):
    trajs, paths = traces["tracelab"]
    ch = characterise(read_trace("tracelab", paths))
    multi = [s for t in trajs for s in t.steps if len(s.calls) > 1]
    assert ch["overlapping_multi_call_steps"] == pytest.approx(np.mean([s.parallel for s in multi]))
    gaps = sum(s.human for t in trajs for s in t.steps)
    assert gaps > 0 and ch["human_gaps"]["total_s"] == pytest.approx(gaps, rel=1e-6)
    # excluded from every LLM time: the steps after a gap keep their own generation time
    ts = read_trace("tracelab", paths)
    assert (
        max(abs(a.llm - b.llm) for t, g in zip(trajs, ts.trajectories) for a, b in zip(t.steps, g.steps))
        < 1e-4
    )
    inc = read_trace("tracelab", paths, human="include")
    assert sum(s.llm for t in inc.trajectories for s in t.steps) == pytest.approx(
        sum(s.llm for t in trajs for s in t.steps) + gaps, rel=1e-6
    )


def test_categories_and_override(traces):
    trajs, paths = traces["tracelab"]
    ch = characterise(read_trace("tracelab", paths))
    assert set(ch["tool_latency_s"]) == {"shell", "read", "edit", "search", "test"}
    ts = read_trace("tracelab", paths, tool_map={"run_tests": "shell"})
    assert "test" not in characterise(ts)["tool_latency_s"]
    mini = characterise(read_trace("mini-swe-agent", traces["mini-swe-agent"][1]))
    assert set(mini["tool_latency_s"]) == {"shell", "read", "edit", "search", "test"}


def test_real_tracelab_sample():
    """The 19-row TraceLab sample (CC BY 4.0, TraceLab, SyFI Lab, University of Washington)."""
    ts = read_trace("tracelab", [SAMPLE])
    assert len(ts.trajectories) == 2 and ts.steps == 19
    first = ts.trajectories[0].steps[0]
    # TraceLab's generation time: the user message at 05:40:20.151 to the last output at 31.647
    assert first.llm == pytest.approx(11.496, abs=1e-6)
    # effective latency: internal when present (WebSearch 19,287 ms), else wall (Bash 860 ms)
    assert [c.latency for c in first.calls] == pytest.approx([0.860, 19.287])
    assert [c.category for c in first.calls] == ["shell", "web"]
    ch = characterise(ts)
    assert ch["tool_calls"] == 19
    assert 0.8 < ch["prefix_cache_hit"]["overall"] < 1.0
    assert all(not math.isnan(s.llm) for t in ts.trajectories for s in t.steps)
