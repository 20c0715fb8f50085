"""Every reader on real files from public repositories (tests/data/traces/README.md): counts and
medians checked against values computed here from the raw JSON, not by the reader."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest

from simrollout.errors import InputError
from simrollout.traces import read_trace
from simrollout.traces.characterise import characterise

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def files(fmt: str, pattern: str = "*") -> list[Path]:
    return sorted((DATA / fmt).glob(pattern))


def _epoch(s) -> float:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def test_every_format_has_two_real_files():
    for fmt, pattern in [
        ("tracelab", "*.jsonl"),
        ("atif", "*.json"),
        ("verifiers", "[!e]*.jsonl"),  # readable ones (the early layout is refused)
        ("swe-agent", "[!p]*.traj"),  # timed ones (before 0.7: refused)
        ("mini-swe-agent", "*.json"),
    ]:
        assert len(files(fmt, pattern)) >= 2, fmt
    assert (DATA / "README.md").read_text().count("License") >= 5


@pytest.mark.parametrize("path", files("tracelab", "*.jsonl"), ids=lambda p: p.name)
def test_tracelab(path):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    ts = read_trace("tracelab", [path])
    ch = characterise(ts)
    assert ch["trajectories"] == len({r["session_id"] for r in rows})
    assert ch["steps"] == len(rows)
    assert ch["tool_calls"] == sum(len(r["tools"]) for r in rows)
    assert ch["tokens_per_step"]["output"]["p50"] == np.median([r["output_tokens"] for r in rows])
    assert ch["tokens_per_step"]["input"]["p50"] == np.median([r["input_tokens_total"] for r in rows])
    # a call's latency: internal if recorded, else wall (TraceLab's definition)
    lat = [
        (
            t["tool_internal_latency_ms"]
            if t["tool_internal_latency_ms"] is not None
            else t["tool_wall_latency_ms"]
        )
        / 1e3
        for r in rows
        for t in r["tools"]
    ]
    got = [c.latency for t in ts.trajectories for s in t.steps for c in s.calls]
    assert np.median(got) == pytest.approx(np.median(lat))


@pytest.mark.parametrize("path", files("atif", "*.json"), ids=lambda p: p.name)
def test_atif_claude_code(path):
    doc = json.loads(path.read_text())
    agent = [s for s in doc["steps"] if s["source"] == "agent"]
    ts = read_trace("atif", [path])
    ch = characterise(ts)
    assert doc["agent"]["name"] == "claude-code"  # written by Harbor from a Claude Code run
    assert ch["trajectories"] == 1 and ch["steps"] == len(agent)  # one API response per step here
    assert ch["tool_calls"] == sum(len(s.get("tool_calls") or []) for s in doc["steps"])
    assert ch["tokens_per_step"]["input"]["p50"] == np.median([s["metrics"]["prompt_tokens"] for s in agent])
    assert ch["tokens_per_step"]["output"]["p50"] == np.median(
        [s["metrics"]["completion_tokens"] for s in agent]
    )
    times = [_epoch(s["timestamp"]) for s in doc["steps"]]
    (t,) = ts.trajectories
    assert t.wall == pytest.approx(times[-1] - times[0], abs=1e-6)
    # the first response follows the task (a user step): its whole interval is generation
    assert t.steps[0].llm == pytest.approx(times[1] - times[0], abs=1e-6)
    # LLM plus tool time of the steps that have a later timestamp is the file's span
    inner = sum(s.llm for s in t.steps) + sum(s.tool for s in t.steps[:-1])
    assert inner == pytest.approx(times[-1] - times[0], abs=1e-6)
    assert ch["read_as"] == {
        "steps_reordered": 0,
        "steps_merged": 0,
        "steps_split_off": 0,
        "subagent_trajectories": 0,
    }


def _rollout_turns(rec: dict) -> list[int]:
    """Tool calls per assistant message, from the raw record."""
    return [len(m.get("tool_calls") or []) for m in rec["completion"] if m["role"] == "assistant"]


@pytest.mark.parametrize("path", files("verifiers", "[!e]*.jsonl"), ids=lambda p: p.name)
@pytest.mark.parametrize("tool_latency", [None, 0.25])
def test_verifiers_per_rollout(path, tool_latency):
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    ts = read_trace("verifiers", [path], tool_latency=tool_latency)
    ch = characterise(ts)
    assert ch["trajectories"] == len(recs)
    assert [len(t.steps) for t in ts.trajectories] == [len(_rollout_turns(r)) for r in recs]
    assert ch["tool_calls"] == sum(sum(_rollout_turns(r)) for r in recs)
    for r, t in zip(recs, ts.trajectories):
        if "total_tool_calls" in r:  # verifiers' own count of the rollout's calls
            assert sum(len(s.calls) for s in t.steps) == r["total_tool_calls"]
        # the rollout's generation time, spread over its turns, is all there (LLM + tools)
        assert t.duration() - t.reward == pytest.approx(r["generation_ms"] / 1e3, rel=1e-9)
        assert t.reward == pytest.approx(r["scoring_ms"] / 1e3)
    lat = 0.0 if tool_latency is None else tool_latency
    want = [(r["generation_ms"] / 1e3 - lat * sum(_rollout_turns(r))) / len(_rollout_turns(r)) for r in recs]
    per_step = [w for r, w in zip(recs, want) for _ in _rollout_turns(r)]
    assert ch["llm_time_per_step_s"]["p50"] == pytest.approx(np.median(per_step))
    assert "spread equally over the rollout's turns" in ts.notes[0]


def test_verifiers_untimed_layout_refused_naming_it():
    (path,) = files("verifiers", "early-*.jsonl")
    n = sum(1 for line in path.read_text().splitlines() if line.strip())
    rec = json.loads(path.read_text().splitlines()[0])
    assert "generation_ms" not in rec and "timing" not in rec  # the layout, seen in the raw record
    with pytest.raises(InputError, match="written before verifiers timed rollouts") as e:
        read_trace("verifiers", [path])
    assert f"({n} such records)" in str(e.value) and "?." not in str(e.value)
    with pytest.raises(InputError, match=rf"skipped by cause: no_timing \({n}\)"):
        read_trace("verifiers", [path], on_bad="skip")


@pytest.mark.parametrize("path", files("swe-agent", "[!p]*.traj"), ids=lambda p: p.name)
def test_swe_agent_timed(path):
    doc = json.loads(path.read_text())
    steps = doc["trajectory"]
    ts = read_trace("swe-agent", [path])
    ch = characterise(ts)
    assert ch["steps"] == len(steps) and ch["tool_calls"] == sum(bool(s["action"].strip()) for s in steps)
    got = sorted(c.latency for t in ts.trajectories for s in t.steps for c in s.calls)
    assert got == sorted(s["execution_time"] for s in steps if s["action"].strip())
    assert ch["tool_time_per_step_s"]["p50"] == pytest.approx(np.median([s["execution_time"] for s in steps]))


def test_swe_agent_before_0_7_says_it_has_no_timing():
    (path,) = files("swe-agent", "pre-0.7*.traj")
    doc = json.loads(path.read_text())
    assert all("execution_time" not in s for s in doc["trajectory"])
    with pytest.raises(InputError, match=r"before 0\.7.*--tool-latency SECONDS.*llm_time"):
        read_trace("swe-agent", [path])
    ts = read_trace("swe-agent", [path], tool_latency=2.0)
    assert ts.steps == len(doc["trajectory"])
    assert all(c.latency == 2.0 for t in ts.trajectories for s in t.steps for c in s.calls)


@pytest.mark.parametrize("path", files("mini-swe-agent", "*.json"), ids=lambda p: p.name)
def test_mini_swe_agent(path):
    doc = json.loads(path.read_text())
    msgs = [m for m in doc["messages"] if (m.get("extra") or {}).get("timestamp") is not None]
    ts = read_trace("mini-swe-agent", [path])
    (t,) = ts.trajectories
    resp = [k for k, m in enumerate(msgs) if m["role"] == "assistant"]
    assert len(t.steps) == len(resp)
    stamp = [m["extra"]["timestamp"] for m in msgs]
    # a later response's LLM time: from the message before it; its tool time: to its last output
    llm = [stamp[k] - stamp[k - 1] for k in resp[1:]]
    assert [s.llm for s in t.steps[1:]] == pytest.approx(llm, abs=1e-5)  # stamps to the microsecond
    ends = resp[1:] + [len(msgs)]
    tool = [stamp[e - 1] - stamp[k] for k, e in zip(resp, ends)]
    assert [s.tool for s in t.steps] == pytest.approx(tool, abs=1e-5)
    usage = [m["extra"]["response"]["usage"] for m in msgs if m["role"] == "assistant"]
    assert characterise(ts)["tokens_per_step"]["input"]["p50"] == np.median(
        [u["prompt_tokens"] for u in usage]
    )


def test_verifiers_timing_mapping_layout_reads_as_top_level(tmp_path):
    """Early 2026 verifiers wrote the same per-rollout times under ``timing`` (with the start):
    the real records moved there read the same, and start where ``start_time`` says."""
    (path,) = files("verifiers", "math-*.jsonl")
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    moved = []
    for k, r in enumerate(recs):
        r = dict(r)
        r["timing"] = {
            "start_time": 1.77e9 + k,
            **{f: r.pop(f) for f in ("generation_ms", "scoring_ms", "total_ms")},
        }
        moved.append(json.dumps(r))
    p = tmp_path / "results.jsonl"
    p.write_text("\n".join(moved) + "\n")
    a, b = read_trace("verifiers", [path]), read_trace("verifiers", [p])
    assert [t.duration() for t in b.trajectories] == [t.duration() for t in a.trajectories]
    assert b.trajectories[3].start.timestamp() == 1.77e9 + 3


def test_verifiers_v1_episode_refused_naming_it(tmp_path):
    ep = {"id": "e", "traces": [{"timing": {"start": 1.7e9, "agent": {"start": 1.7e9, "end": 1.7e9 + 5}}}]}
    p = tmp_path / "traces.jsonl"
    p.write_text(json.dumps(ep) + "\n" + json.dumps(ep) + "\n")
    with pytest.raises(
        InputError, match=r"line 1: a verifiers v1 traces.jsonl episode .*not read; expected .*"
    ):
        read_trace("verifiers", [p])
    with pytest.raises(InputError, match=r"not_format \(2\).*Check the format name"):
        read_trace("verifiers", [p], on_bad="skip")
