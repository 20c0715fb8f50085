"""Agent traces: readers per format into one normalised trajectory model
(:mod:`simrollout.traces.model`), a characterisation in TraceLab's terms, fitted workloads and
replays. Formats and the fields taken from each: docs/scenario.md, "Workloads from traces"."""

from __future__ import annotations

import importlib
from pathlib import Path

from ..errors import InputError
from .formats import FORMATS, reader_module
from .model import Problems, TraceSet


def read_trace(
    fmt: str,
    paths: list[str | Path],
    on_bad: str = "refuse",
    tool_map: dict[str, str] | None = None,
    human: str = "exclude",
) -> TraceSet:
    """Read trace files of one format; refuse or skip-and-count bad rows per ``on_bad``.
    ``human``: ``exclude`` leaves human-paced gaps out (reported apart); ``include`` adds each to
    the LLM time of the step it precedes (the agent waited)."""
    if fmt not in FORMATS:
        raise InputError(f"trace format '{fmt}': expected one of {list(FORMATS)}.")
    if not paths:
        raise InputError("give at least one trace file.")
    problems = Problems(on_bad)
    reader = importlib.import_module(f".{reader_module(fmt)}", __name__)
    ts = reader.read([Path(p) for p in paths], problems, tool_map)
    if not ts.trajectories:
        skipped = ", ".join(f"{c}: {n}" for c, n in sorted(problems.skipped.items())) or "none"
        first = next(iter(problems.examples.values()), "")
        raise InputError(
            f"{', '.join(map(str, paths))}: no usable {fmt} trajectory (skipped by cause: {skipped}"
            + (f"; first: {first}" if first else "")
            + "). Check the format name against the file."
        )
    ts.fill_llm()
    if human == "include":
        for t in ts.trajectories:
            for st in t.steps:
                st.llm += st.human
        ts.notes.append("human-paced gaps included: each added to the LLM time of the step it precedes")
    elif human != "exclude":
        raise InputError(f"--human: expected exclude or include, got '{human}'.")
    return ts
