"""Agent traces: readers per format into one normalised trajectory model
(:mod:`simrollout.traces.model`), a characterisation in TraceLab's terms, fitted workloads and
replays. Formats and the fields taken from each: docs/scenario.md, "Workloads from traces"."""

from __future__ import annotations

import importlib
import inspect
import math
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from .formats import FORMATS, reader_module, spoken

if TYPE_CHECKING:  # numpy is imported when a trace is read, not at ``simrollout --help``
    from .model import Problems, TraceSet

__all__ = ["FORMATS", "read_trace"]


def read_trace(
    fmt: str,
    paths: list[str | Path],
    on_bad: str = "refuse",
    tool_map: dict[str, str] | None = None,
    human: str = "exclude",
    tool_latency: float | None = None,
) -> TraceSet:
    """Read trace files of one format; refuse or skip-and-count bad rows per ``on_bad``.
    ``human``: ``exclude`` leaves human-paced gaps out (reported apart); ``include`` adds each to
    the LLM time of the step it precedes (the agent waited). ``tool_latency``: seconds each tool
    call takes where the trace records none (SWE-agent before 0.7; verifiers' per-rollout
    times, which hold model and tool time together)."""
    if fmt not in FORMATS:
        raise InputError(f"trace format '{fmt}': expected {spoken()}.")
    if not paths:
        raise InputError("give at least one trace file.")
    if tool_latency is not None and not (math.isfinite(tool_latency) and tool_latency >= 0):
        raise InputError(f"--tool-latency: expected seconds >= 0, got {tool_latency!r}.")
    reader = importlib.import_module(f".{reader_module(fmt)}", __name__)
    from .model import Problems

    problems = Problems(on_bad)
    kw = {"tool_latency": tool_latency} if "tool_latency" in inspect.signature(reader.read).parameters else {}
    ts = reader.read([Path(p) for p in paths], problems, tool_map, **kw)
    if not ts.trajectories:
        raise InputError(_none_usable(fmt, paths, problems))
    if tool_latency is not None and not kw:
        ts.notes.append(f"--tool-latency not used: {fmt} times every tool call itself")
    ts.fill_llm()
    if human == "include":
        for t in ts.trajectories:
            for st in t.steps:
                st.llm += st.human
        ts.notes.append("human-paced gaps included: each added to the LLM time of the step it precedes")
    elif human != "exclude":
        raise InputError(f"--human: expected exclude or include, got '{human}'.")
    return ts


def _none_usable(fmt: str, paths, problems: Problems) -> str:
    """Why nothing was read: each cause with its count and first example, and what to check."""
    files = ", ".join(map(str, paths))
    if not problems.skipped:
        return f"{files}: no {fmt} trajectory in the file(s)."
    causes = "; ".join(f"{c} ({n}): {problems.examples[c]}" for c, n in sorted(problems.skipped.items()))
    if set(problems.skipped) <= {"not_format"}:
        hint = " Check the format name against the file."
    elif set(problems.skipped) <= {"not_format", "no_timing"}:
        hint = ""  # the example says what the file lacks and what to give instead
    else:
        hint = " Every trajectory had such a row, so none is left: fix the trace where named."
    return f"{files}: no usable {fmt} trajectory; skipped by cause: {causes}.{hint}"
