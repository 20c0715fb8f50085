"""Harbor's ATIF (Agent Trajectory Interchange Format, v1.x): one JSON document per trajectory
(a ``trajectory.json``, or one document per line of a JSONL file).

Fields taken: ``session_id``; ``steps[]``: ``step_id``, ``timestamp``, ``source``,
``tool_calls[].function_name``, ``metrics.{prompt_tokens, cached_tokens, completion_tokens}``.
ATIF has one timestamp per step, so the interval before an agent step holds the previous agent
step's tool time and this step's generation. The split: generation = a + b x completion tokens,
with a and b fitted (Theil-Sen) on the intervals that hold generation only (after a user or
system step, or after an agent step without tool calls), capped at the interval; the rest is the
previous step's tool time, shared equally by its calls. The interval that ends at a later user
step is human-paced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from .categories import category
from .io import json_document, json_lines, number, timestamp
from .model import Call, Problems, Step, TraceSet, Trajectory

TOKENS_PER_SECOND = 50.0  # generation speed assumed when too few intervals hold generation only
MIN_PURE = 8


@dataclass
class _Raw:
    id: str
    file: str
    line: int
    start: object
    times: list[float]  # per step, epoch s
    source: list[str]
    names: list[list[str]]
    tokens: list[tuple[float, float, float]]  # prompt, cached, completion


def _docs(paths: list[Path], problems: Problems):
    for path in paths:
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            for line, doc in json_lines(path, problems):
                yield path, line, doc
        else:
            doc = json_document(path, problems)
            if doc is not None:
                yield path, 0, doc


def _raw(path: Path, line: int, doc, problems: Problems, tool_map) -> _Raw | None:
    file = str(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        problems.bad(
            "not_format",
            file,
            line,
            "not an ATIF trajectory (no 'steps' array at the root); is it another format?",
        )
        return None
    sid = str(doc.get("session_id") or f"{path.name}:{line}")
    times, source, names, tokens = [], [], [], []
    for k, st in enumerate(doc["steps"]):
        if not isinstance(st, dict):
            continue
        t = timestamp(st.get("timestamp"))
        if t is None:
            problems.bad(
                "missing_latency",
                file,
                line,
                f"trajectory '{sid}' steps[{k}] has no timestamp, so its LLM and tool time cannot be split",
            )
            return None
        if times and t.timestamp() < times[-1]:
            problems.bad(
                "out_of_order",
                file,
                line,
                f"trajectory '{sid}' steps[{k}] is timed before the step it follows (a negative interval)",
            )
            return None
        times.append(t.timestamp())
        source.append(str(st.get("source")))
        calls = [c for c in st.get("tool_calls") or [] if isinstance(c, dict)]
        names.append([str(c.get("function_name") or "<unknown-tool>") for c in calls])
        m = st.get("metrics") if isinstance(st.get("metrics"), dict) else {}
        tokens.append(
            (
                number(m.get("prompt_tokens")),
                number(m.get("cached_tokens")),
                number(m.get("completion_tokens")),
            )
        )
    if "agent" not in source:
        problems.bad("no_steps", file, line, f"trajectory '{sid}' has no agent step")
        return None
    start = timestamp(doc["steps"][0].get("timestamp")) if doc["steps"] else None
    return _Raw(sid, file, line, start, times, source, names, tokens)


def _split_model(raws: list[_Raw]) -> tuple[float, float, str]:
    """``a + b x completion tokens`` from the intervals holding generation only."""
    x, y = [], []
    for r in raws:
        for k in range(1, len(r.times)):
            prev_tools = r.source[k - 1] == "agent" and r.names[k - 1]
            if r.source[k] == "agent" and not prev_tools and not math.isnan(r.tokens[k][2]):
                x.append(r.tokens[k][2])
                y.append(r.times[k] - r.times[k - 1])
    if len(x) >= MIN_PURE and np.ptp(x) > 0:
        b, a, *_ = stats.theilslopes(y, x)
        a, b = max(float(a), 0.0), max(float(b), 0.0)
        return (
            a,
            b,
            f"generation = {a:.3g} s + {b * 1e3:.3g} ms x completion tokens, fitted on {len(x)} intervals",
        )
    b = 1.0 / TOKENS_PER_SECOND
    return (
        0.0,
        b,
        f"generation = completion tokens / {TOKENS_PER_SECOND:g} tokens/s (assumed: {len(x)} intervals "
        "held generation only)",
    )


def read(paths: list[Path], problems: Problems, tool_map: dict[str, str] | None = None) -> TraceSet:
    raws = [r for p, line, doc in _docs(paths, problems) if (r := _raw(p, line, doc, problems, tool_map))]
    a, b, how = _split_model(raws)
    out = []
    for r in raws:
        steps: list[Step] = []
        prev_agent: Step | None = None
        human = 0.0
        for k, src in enumerate(r.source):
            gap = r.times[k] - r.times[k - 1] if k else math.nan
            if src == "user" and k and "agent" in r.source[:k]:
                human += gap
            if src != "agent":
                prev_agent = None if src == "user" else prev_agent
                continue
            p, c, o = r.tokens[k]
            step = Step(input_tokens=p, cached_tokens=c, output_tokens=o, human=0.0)
            if not math.isnan(gap):
                want = a + b * (o if not math.isnan(o) else 0.0)
                owes = prev_agent is not None and prev_agent.calls and r.source[k - 1] == "agent"
                step.llm = min(want, gap) if owes else gap
                if owes:
                    _set_tool(prev_agent, gap - step.llm)
            step.calls = [Call(n, category(n, override=tool_map), math.nan) for n in r.names[k]]
            step.tool = 0.0 if not step.calls else math.nan
            steps.append(step)
            prev_agent = step
        out.append(Trajectory(r.id, r.file, r.line, steps, r.start, wall=r.times[-1] - r.times[0] - human))
    ts = TraceSet("atif", [str(p) for p in paths], out, problems, notes=[f"ATIF split: {how}"])
    _fill_last_tools(ts)
    return ts


def _set_tool(step: Step, seconds: float) -> None:
    step.tool = seconds
    for c in step.calls:
        c.latency = seconds / len(step.calls)


def _fill_last_tools(ts: TraceSet) -> None:
    """A final agent step's calls have no later timestamp: each takes the median call latency."""
    known = [
        c.latency for t in ts.trajectories for s in t.steps for c in s.calls if not math.isnan(c.latency)
    ]
    med = float(np.median(known)) if known else 0.0
    n = 0
    for t in ts.trajectories:
        for s in t.steps:
            if s.calls and math.isnan(s.tool):
                _set_tool(s, med * len(s.calls))
                n += 1
    if n:
        ts.notes.append(
            f"{n} last steps' tool calls (no later timestamp) took the median call latency ({med:.3g} s)"
        )
