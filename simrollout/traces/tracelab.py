"""TraceLab ``round_trace`` JSONL: one line per LLM step (a "round"), grouped by session.

Fields taken: ``session_id``, ``round_index``, ``timing_events[]`` (``event_type``,
``timestamp``), ``tools[]`` (``tool_name``, ``emitted_at``, ``result_at``,
``tool_wall_latency_ms``, ``tool_internal_latency_ms``), ``input_tokens_total``,
``prefix_tokens``, ``output_tokens``. Definitions (TraceLab's own, artifacts/utils/timing.py):
generation time runs from the latest input event at or before the first model-output event to
the last model-output event; a tool's latency is its internal latency if present, else its wall
latency; a human-paced gap is the time from the event before a ``user_message`` to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from .categories import category
from .io import json_lines, number, timestamp
from .model import Call, Problems, Step, TraceSet, Trajectory, union_length

INPUT = {"user_message", "tool_result"}
OUTPUT = {"reasoning", "text", "tool_call"}
REQUIRED = ("session_id", "round_index", "timing_events")


@dataclass
class _Round:
    index: int
    line: int
    step: Step
    events: list[tuple[float, bool]]  # (epoch s, is a user message), sorted
    end: float  # the round's last event or tool result, epoch s


@dataclass
class _Session:
    file: str
    rounds: dict[int, _Round] = field(default_factory=dict)
    last_index: int = -1
    bad: bool = False


def _epoch(value) -> float:
    t = timestamp(value)
    return t.timestamp() if t is not None else math.nan


def _round(row: dict, file: str, line: int, problems: Problems, tool_map) -> _Round | None:
    events = []
    for e in row.get("timing_events") or []:
        if isinstance(e, dict):
            t = _epoch(e.get("timestamp"))
            if not math.isnan(t):
                events.append((t, e.get("event_type")))
    events.sort(key=lambda x: x[0])
    outs = [t for t, k in events if k in OUTPUT]
    llm = math.nan
    if outs:
        ins = [t for t, k in events if k in INPUT and t <= outs[0]]
        if ins:
            llm = max(outs) - max(ins)
    calls, spans, end = [], [], max((t for t, _ in events), default=math.nan)
    for k, tool in enumerate(row.get("tools") or []):
        if not isinstance(tool, dict):
            continue
        name = str(tool.get("tool_name") or "<unknown-tool>")
        emitted, result = _epoch(tool.get("emitted_at")), _epoch(tool.get("result_at"))
        lat = number(tool.get("tool_internal_latency_ms"))
        if math.isnan(lat):
            lat = number(tool.get("tool_wall_latency_ms"))
        lat = lat / 1000.0
        if math.isnan(lat) and not (math.isnan(emitted) or math.isnan(result)):
            lat = result - emitted
        if math.isnan(lat):
            problems.bad(
                "missing_latency",
                file,
                line,
                f"tools[{k}] ('{name}') has no latency "
                "(tool_internal_latency_ms, tool_wall_latency_ms and result_at are all missing)",
            )
            return None
        if lat < 0:
            problems.bad(
                "negative_latency",
                file,
                line,
                f"tools[{k}] ('{name}') has a negative latency ({lat * 1000:g} ms)",
            )
            return None
        calls.append(Call(name, category(name, override=tool_map), lat, emitted))
        if not math.isnan(emitted):
            spans.append((emitted, emitted + lat))
        if not math.isnan(result):
            end = max(end, result) if not math.isnan(end) else result
    tool = union_length(spans) if len(spans) == len(calls) else float(sum(c.latency for c in calls))
    step = Step(
        llm=llm,
        calls=calls,
        tool=tool,
        input_tokens=number(row.get("input_tokens_total")),
        cached_tokens=number(row.get("prefix_tokens")),
        output_tokens=number(row.get("output_tokens")),
    )
    return _Round(int(row["round_index"]), line, step, [(t, k == "user_message") for t, k in events], end)


def read(paths: list[Path], problems: Problems, tool_map: dict[str, str] | None = None) -> TraceSet:
    sessions: dict[str, _Session] = {}
    for path in paths:
        file, seen = str(path), False
        for line, row in json_lines(path, problems):
            if not all(k in row for k in REQUIRED) or not isinstance(row.get("round_index"), int):
                if not seen:
                    problems.bad(
                        "not_format",
                        file,
                        line,
                        "not a TraceLab round_trace row (no session_id, "
                        "round_index and timing_events): another format, or not a trace",
                    )
                    break
                problems.bad(
                    "bad_row", file, line, "a row without session_id, an integer round_index or timing_events"
                )
                continue
            seen = True
            sid = str(row["session_id"])
            s = sessions.setdefault(sid, _Session(file))
            idx = row["round_index"]
            if idx in s.rounds:
                problems.bad(
                    "duplicate",
                    file,
                    line,
                    f"session '{sid}' round {idx} again (first at line "
                    f"{s.rounds[idx].line}); deduped on session_id + round_index",
                )
                continue
            if idx < s.last_index:
                problems.bad(
                    "out_of_order",
                    file,
                    line,
                    f"session '{sid}' round {idx} after round {s.last_index}; put in round order",
                )
            s.last_index = max(s.last_index, idx)
            r = _round(row, file, line, problems, tool_map)
            if r is None:
                s.bad = True
                continue
            s.rounds[idx] = r
    trajectories = []
    for sid, s in sessions.items():
        if s.bad:
            continue
        if not s.rounds:
            problems.bad("no_steps", s.file, 0, f"session '{sid}' has no usable rounds")
            continue
        trajectories.append(_trajectory(sid, s))
    return TraceSet("tracelab", [str(p) for p in paths], trajectories, problems)


def _trajectory(sid: str, s: _Session) -> Trajectory:
    import datetime as dt

    rounds = [s.rounds[k] for k in sorted(s.rounds)]
    prev, human_total = math.nan, 0.0
    first = min((r.events[0][0] for r in rounds if r.events), default=math.nan)
    for r in rounds:
        for t, user in r.events:
            if user and not math.isnan(prev) and t > prev:
                r.step.human += t - prev
            prev = t
        prev = max(prev, r.end) if not math.isnan(r.end) else prev
        human_total += r.step.human
    last = max((r.end for r in rounds if not math.isnan(r.end)), default=math.nan)
    start = dt.datetime.fromtimestamp(first, dt.timezone.utc) if not math.isnan(first) else None
    return Trajectory(
        sid, s.file, rounds[0].line, [r.step for r in rounds], start, wall=last - first - human_total
    )
