"""SWE-agent ``.traj`` files: one JSON document per trajectory.

Fields taken: ``trajectory[]``: per step ``action`` (the command line: its category) and
``execution_time`` (seconds the action ran: the step's tool time; SWE-agent 0.7 on).
SWE-agent records no LLM time, no timestamps and only the run's token totals, so a replay of it
needs ``llm_time`` (or ``tokens``) beside ``replay`` and a fitted workload has no ``llm_time``.
Before 0.7 (August 2024) it recorded no ``execution_time`` either: ``tool_latency``
(``--tool-latency``) then gives every action's latency.
"""

from __future__ import annotations

import math
from pathlib import Path

from .categories import category
from .io import documents, number
from .model import Call, Problems, Step, TraceSet, Trajectory

NO_TIMING = (
    "written by SWE-agent before 0.7, which recorded no execution_time per action (and no LLM time): "
    "give each action's latency with --tool-latency SECONDS (and llm_time beside the import), or "
    "give 'tools' and 'llm_time' beside 'workload: {import: ...}' in the scenario"
)


def read(
    paths: list[Path],
    problems: Problems,
    tool_map: dict[str, str] | None = None,
    tool_latency: float | None = None,
) -> TraceSet:
    out, filled = [], 0
    refusal = "not a SWE-agent .traj (no 'trajectory' array at the root): another format, or not a trace"
    for path, doc in documents(paths, problems, "trajectory", refusal):
        file = str(path)
        raw = [st for st in doc["trajectory"] if isinstance(st, dict)]
        if raw and all(st.get("execution_time") is None for st in raw) and tool_latency is None:
            problems.bad("no_timing", file, 0, f"{len(raw)} steps and none timed: " + NO_TIMING)
            continue
        steps, ok = [], True
        for k, st in enumerate(raw):
            lat = number(st.get("execution_time"))
            if st.get("execution_time") is None and tool_latency is not None:
                lat, filled = tool_latency, filled + 1
            if math.isnan(lat) or lat < 0:
                cause = "missing_latency" if math.isnan(lat) else "negative_latency"
                problems.bad(
                    cause,
                    file,
                    0,
                    f"trajectory[{k}].execution_time is {st.get('execution_time')!r}; expected seconds >= 0 "
                    "(--tool-latency gives the actions without one)",
                )
                ok = False
                break
            action = str(st.get("action") or "").strip()
            word = action.split()[0] if action else "<none>"
            calls = [Call(word, category(word, action, tool_map), lat)] if action else []
            steps.append(Step(calls=calls, tool=lat if calls else 0.0))
        if not ok:
            continue
        if not steps:
            problems.bad("no_steps", file, 0, "the trajectory has no steps")
            continue
        out.append(Trajectory(path.stem, file, 0, steps))
    notes = ["SWE-agent records no LLM time: give llm_time (or tokens) beside the import or replay"]
    if filled:
        notes.append(f"{filled} actions without execution_time took --tool-latency ({tool_latency:g} s)")
    return TraceSet("swe-agent", [str(p) for p in paths], out, problems, notes=notes)
