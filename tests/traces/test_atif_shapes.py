"""ATIF as Harbor's earlier Claude Code converter wrote it, built from a real file: one step per
content block (metrics repeated, or given once), a subagent's steps interleaved and out of time
order. Read, it must time exactly as the real file does."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path

import pytest

from simrollout.traces import read_trace
from simrollout.traces.characterise import characterise

from .test_real_files import DATA

REAL = DATA / "atif" / "claude-code-pass.trajectory.json"
SUB = DATA / "atif" / "claude-code-hello.trajectory.json"


def _ts(s: str) -> float:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def per_block(doc: dict, how: str) -> tuple[dict, int]:
    """Each agent step as one step per tool call, the last at the step's time (the response
    ends with its last block), 10 ms apart. ``how``: ``repeat`` the metrics on every block;
    ``id``: a response id in ``extra``, metrics on the first block only; ``once``: metrics on
    the first block only, no id (Claude Code). Returns the document and the blocks merged."""
    out, merged = [], 0
    for k, st in enumerate(doc["steps"]):
        calls = st.get("tool_calls") or []
        if st["source"] != "agent" or len(calls) < 2:
            out.append(st)
            continue
        t = _ts(st["timestamp"])
        for j, call in enumerate(calls):
            b = copy.deepcopy(st)
            b["tool_calls"] = [call]
            b["timestamp"] = _iso(t - 0.01 * (len(calls) - 1 - j))
            if how == "id":
                b["extra"] = {**(b.get("extra") or {}), "message_id": f"msg_{k}"}
            if how in ("id", "once") and j:
                b.pop("metrics", None)
            out.append(b)
        merged += len(calls) - 1
    return {**doc, "steps": out}, merged


def _write(tmp_path: Path, doc: dict, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def _timing(ts) -> list[tuple]:
    return [
        (round(s.llm, 6), round(s.tool, 6), [c.name for c in s.calls], s.input_tokens, s.output_tokens)
        for t in ts.trajectories
        for s in t.steps
    ]


@pytest.mark.parametrize("how", ["repeat", "id", "once"])
def test_blocks_of_one_response_are_one_llm_call(tmp_path, how):
    real = json.loads(REAL.read_text())
    doc, merged = per_block(real, how)
    assert merged > 0 and len(doc["steps"]) == len(real["steps"]) + merged
    ref = read_trace("atif", [REAL])
    ts = read_trace("atif", [_write(tmp_path, doc)])
    assert _timing(ts) == _timing(ref)
    ch = characterise(ts)
    agent = [s for s in real["steps"] if s["source"] == "agent"]
    assert ch["steps"] == len(agent)  # LLM calls: one per API response
    assert ch["tool_calls"] == sum(len(s.get("tool_calls") or []) for s in doc["steps"])  # the file's own
    assert ch["read_as"]["steps_merged"] == merged


def test_a_non_claude_agent_step_without_metrics_is_a_call_of_its_own(tmp_path):
    real = json.loads(REAL.read_text())
    doc, merged = per_block(real, "once")
    doc["agent"] = {**doc["agent"], "name": "another-agent"}
    ts = read_trace("atif", [_write(tmp_path, doc)])
    assert ts.steps == sum(s["source"] == "agent" for s in doc["steps"])
    assert ts.adjusted["steps_merged"] == 0


def test_subagent_steps_interleaved_out_of_order(tmp_path):
    """A subagent's steps (``extra.is_sidechain``) between the main chain's, and two main steps
    swapped: the subagent becomes a trajectory of its own, each chain is put in time order."""
    real = json.loads(REAL.read_text())
    sub = json.loads(SUB.read_text())["steps"]
    main = copy.deepcopy(real["steps"])
    t0 = _ts(main[4]["timestamp"])
    side = []
    for st in sub:  # the subagent runs between main steps 4 and 5
        st = copy.deepcopy(st)
        st["timestamp"] = _iso(t0 + 1.0 + (_ts(st["timestamp"]) - _ts(sub[0]["timestamp"])))
        st["extra"] = {**(st.get("extra") or {}), "is_sidechain": True, "agent_id": "a1"}
        side.append(st)
    main[6], main[7] = main[7], main[6]
    steps = main[:3] + side[1:] + main[3:8] + side[:1] + main[8:]  # interleaved, the first last
    times = [_ts(s["timestamp"]) for s in steps]
    assert min(b - a for a, b in zip(times, times[1:])) < 0  # intervals run backwards, as reported
    ts = read_trace("atif", [_write(tmp_path, {**real, "steps": steps})])
    ref = read_trace("atif", [REAL])
    assert len(ts.trajectories) == 2
    main_t, sub_t = ts.trajectories
    assert [v for s in main_t.steps for v in (s.llm, s.tool)] == pytest.approx(
        [v for s in ref.trajectories[0].steps for v in (s.llm, s.tool)]
    )  # flat: pytest 9's approx compares no nested sequences
    assert sub_t.id.endswith("sidechain:a1") and len(sub_t.steps) == sum(s["source"] == "agent" for s in sub)
    assert sub_t.steps[0].llm == pytest.approx(_ts(sub[1]["timestamp"]) - _ts(sub[0]["timestamp"]), abs=1e-6)
    ch = characterise(ts)
    assert ch["tool_calls"] == sum(len(s.get("tool_calls") or []) for s in steps)
    # main: 2 swapped; subagent: its first step came last among its own
    assert ch["read_as"] == {
        "steps_reordered": 2 + len(sub),
        "steps_merged": 0,
        "steps_split_off": len(sub),
        "subagent_trajectories": 1,
    }


def test_embedded_subagent_trajectory_is_its_own(tmp_path):
    real = json.loads(REAL.read_text())
    sub = json.loads(SUB.read_text())
    doc = {**real, "subagent_trajectories": [{**sub, "trajectory_id": "sub-1"}]}
    ts = read_trace("atif", [_write(tmp_path, doc)])
    assert [len(t.steps) for t in ts.trajectories] == [
        sum(s["source"] == "agent" for s in real["steps"]),
        sum(s["source"] == "agent" for s in sub["steps"]),
    ]
    assert ts.adjusted["subagent_trajectories"] == 1


def test_skip_on_a_one_document_file_says_why(tmp_path):
    real = json.loads(REAL.read_text())
    real["steps"][3].pop("timestamp")
    p = _write(tmp_path, real)
    with pytest.raises(
        Exception, match=r"skipped by cause: missing_latency \(1\): .*steps\[3\] has no timestamp"
    ) as e:
        read_trace("atif", [p], on_bad="skip")
    msg = str(e.value)
    assert "format name" not in msg and "?." not in msg and ".." not in msg
