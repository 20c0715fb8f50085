"""Bad traces get an answer naming the file and the line: refused, or skipped and counted."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from simrollout.errors import InputError
from simrollout.traces import read_trace
from simrollout.traces import synthetic as sy

from .conftest import write


@pytest.fixture
def rows(tmp_path):
    trajs = sy.generate(6, seed=2, steps_median=6)
    (path,) = write("tracelab", trajs, tmp_path)
    return trajs, path, path.read_text().splitlines()


def _save(tmp_path, lines, name="bad.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_file_in_another_format(traces):
    _, paths = traces["atif"]
    with pytest.raises(InputError, match=r"not a TraceLab round_trace row") as e:
        read_trace("tracelab", paths[:1])
    assert str(paths[0]) in str(e.value)
    _, (tl,) = traces["tracelab"]
    with pytest.raises(InputError, match=rf"{tl}: line 1: not an ATIF trajectory"):
        read_trace("atif", [tl])
    # skip: the other file is read, the report counts the foreign one
    ts = read_trace("atif", [*paths[:2], tl], on_bad="skip")
    assert len(ts.trajectories) == 2 and ts.problems.skipped["not_format"] >= 1
    with pytest.raises(InputError, match="no usable verifiers trajectory"):
        read_trace("verifiers", [tl], on_bad="skip")


def test_truncated_line(tmp_path, rows):
    trajs, _, lines = rows
    p = tmp_path / "cut.jsonl"
    p.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40])  # the writer died mid-line
    with pytest.raises(InputError, match=rf"{p}: line {len(lines)}: a truncated last line"):
        read_trace("tracelab", [p])
    ts = read_trace("tracelab", [p], on_bad="skip")
    assert ts.problems.skipped == {"bad_json": 1}
    assert sum(len(t.steps) for t in ts.trajectories) == len(lines) - 1
    assert f"line {len(lines)}" in ts.problems.as_dict()["bad_json"]["first"]


def test_duplicate_rows_deduped(tmp_path, rows):
    trajs, good, lines = rows
    p = _save(tmp_path, lines[:3] + [lines[1]] + lines[3:])
    with pytest.raises(InputError, match=r"line 4: session '.*' round 1 again \(first at line 2\)"):
        read_trace("tracelab", [p])
    ts = read_trace("tracelab", [p], on_bad="skip")
    assert ts.problems.skipped == {"duplicate": 1}
    ref = read_trace("tracelab", [good])
    assert [t.duration() for t in ts.trajectories] == [t.duration() for t in ref.trajectories]


def test_rounds_out_of_order(tmp_path, rows):
    _, good, lines = rows
    p = _save(tmp_path, [lines[1], lines[0]] + lines[2:])
    with pytest.raises(InputError, match=r"line 2: session .* round 0 after round 1"):
        read_trace("tracelab", [p])
    ts = read_trace("tracelab", [p], on_bad="skip")  # put in round order, counted
    assert ts.problems.skipped == {"out_of_order": 1}
    ref = read_trace("tracelab", [good])
    assert [t.duration() for t in ts.trajectories] == pytest.approx([t.duration() for t in ref.trajectories])


@pytest.mark.parametrize(
    ("edit", "cause", "match"),
    [
        ({"tool_wall_latency_ms": -5.0, "tool_internal_latency_ms": None}, "negative_latency", "negative latency"),
        ({"tool_wall_latency_ms": None, "tool_internal_latency_ms": None, "result_at": None}, "missing_latency",
         "has no latency"),
    ],
)  # fmt: skip
def test_negative_or_missing_latency(tmp_path, rows, edit, cause, match):
    trajs, _, lines = rows
    k = next(i for i, line in enumerate(lines) if json.loads(line)["tools"])
    row = json.loads(lines[k])
    row["tools"][0].update(edit)
    p = _save(tmp_path, lines[:k] + [json.dumps(row)] + lines[k + 1 :])
    with pytest.raises(InputError, match=rf"line {k + 1}: tools\[0\] .*{match}"):
        read_trace("tracelab", [p])
    ts = read_trace("tracelab", [p], on_bad="skip")
    assert ts.problems.skipped == {cause: 1}
    assert len(ts.trajectories) == len(trajs) - 1  # its session is left out whole


def test_trajectory_with_no_steps(tmp_path, traces):
    doc = {"schema_version": "ATIF-v1.4", "session_id": "empty", "agent": {"name": "a", "version": "1"},
           "steps": [{"step_id": 1, "timestamp": "2026-06-01T00:00:00Z", "source": "user", "message": "hi"}]}  # fmt: skip
    p = tmp_path / "empty.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=rf"{p}: trajectory 'empty' has no agent step"):
        read_trace("atif", [p])
    _, paths = traces["atif"]
    ts = read_trace("atif", [p, paths[0]], on_bad="skip")
    assert ts.problems.skipped == {"no_steps": 1} and len(ts.trajectories) == 1
    rec = {"example_id": 3, "timing": {"model": {"spans": []}, "env": {"spans": []}}}
    v = tmp_path / "results.jsonl"
    v.write_text(json.dumps(rec) + "\n")
    with pytest.raises(InputError, match=rf"{v}: line 1: rollout 3@results.jsonl:1 has no model spans"):
        read_trace("verifiers", [v])


def test_verifiers_negative_span(tmp_path, traces):
    _, (path,) = traces["verifiers"]
    lines = path.read_text().splitlines()
    rec = json.loads(lines[2])
    span = rec["timing"]["model"]["spans"][1]
    span["end"] = span["start"] - 1.0
    p = _save(tmp_path, lines[:2] + [json.dumps(rec)] + lines[3:])
    with pytest.raises(InputError, match=r"line 3: timing.model.spans\[1\] ends before it starts"):
        read_trace("verifiers", [p])
    assert read_trace("verifiers", [p], on_bad="skip").problems.skipped == {"negative_latency": 1}


def test_large_file_streams(tmp_path):
    """A trace many times larger than what is kept of it is read a line at a time."""
    trajs = sy.generate(100, seed=3, steps_median=20)
    p = sy.write_tracelab(trajs, tmp_path / "large.jsonl", pad=8000)
    size = p.stat().st_size
    assert size > 15e6
    tracemalloc.start()
    ts = read_trace("tracelab", [p])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert ts.steps == sum(len(t.steps) for t in trajs)
    assert peak < 0.25 * size, f"peak {peak:,} bytes reading a {size:,}-byte file"


def test_messages_end_cleanly(tmp_path, traces):
    """Refused or all skipped, in every format: one sentence end each, no '?.' or '..'."""
    junk = tmp_path / "junk.json"
    junk.write_text(json.dumps({"something": "else"}))
    lines = tmp_path / "junk.jsonl"
    lines.write_text(json.dumps({"something": "else"}) + "\n")
    seen = 0
    for fmt in ("tracelab", "atif", "verifiers", "swe-agent", "mini-swe-agent"):
        for path in (junk, lines):
            for on_bad in ("refuse", "skip"):
                try:
                    read_trace(fmt, [path], on_bad=on_bad)
                except InputError as e:
                    msg, seen = str(e), seen + 1
                    assert "?." not in msg and ".." not in msg and ". ." not in msg, msg
                    assert str(path) in msg and msg.endswith("."), msg
    assert seen == 20
