"""ATIF's one timestamp per step, split into LLM and tool time.

A step's timestamp is taken as the end of its response, so the interval before an agent step
holds the previous agent step's tool time and this step's generation. The split: generation =
a + b x completion tokens, with a and b fitted (Theil-Sen) on the intervals that hold generation
only (after a user or system step, or after an agent step without tool calls), capped at the
interval; the rest is the previous step's tool time, shared equally by its calls. The interval
that ends at a later user step is human-paced (reported on the agent step after it).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy import stats

from .categories import category
from .model import Call, Problems, Step, TraceSet, Trajectory

TOKENS_PER_SECOND = 50.0  # generation speed assumed when too few intervals hold generation only
MIN_PURE = 8


def _split_model(chains) -> tuple[float, float, str]:
    """``a + b x completion tokens`` from the intervals holding generation only."""
    x, y = [], []
    for c in chains:
        for k in range(1, len(c.steps)):
            prev, cur = c.steps[k - 1], c.steps[k]
            prev_tools = prev.source == "agent" and prev.names
            if cur.source == "agent" and not prev_tools and not math.isnan(cur.tokens[2]):
                x.append(cur.tokens[2])
                y.append(cur.time - prev.time)
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


def _trajectory(c, a: float, b: float, tool_map) -> Trajectory:
    steps: list[Step] = []
    prev_agent: Step | None = None
    human = pending = 0.0
    for k, s in enumerate(c.steps):
        gap = s.time - c.steps[k - 1].time if k else math.nan
        if s.source == "user" and k and any(x.source == "agent" for x in c.steps[:k]):
            human += gap
            pending += gap
        if s.source != "agent":
            prev_agent = None if s.source == "user" else prev_agent
            continue
        p, cached, o = s.tokens
        step = Step(input_tokens=p, cached_tokens=cached, output_tokens=o, human=pending)
        pending = 0.0
        if not math.isnan(gap):
            want = a + b * (o if not math.isnan(o) else 0.0)
            owes = prev_agent is not None and prev_agent.calls and c.steps[k - 1].source == "agent"
            step.llm = min(want, gap) if owes else gap
            if owes:
                _set_tool(prev_agent, gap - step.llm)
        step.calls = [Call(n, category(n, override=tool_map), math.nan) for n in s.names]
        step.tool = 0.0 if not step.calls else math.nan
        steps.append(step)
        prev_agent = step
    return Trajectory(c.id, c.file, c.line, steps, c.start, wall=c.times[-1] - c.times[0] - human)


def build(chains, paths: list[Path], problems: Problems, tool_map) -> TraceSet:
    a, b, how = _split_model(chains)
    out = [_trajectory(c, a, b, tool_map) for c in chains]
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
