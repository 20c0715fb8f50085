"""SWE-agent ``.traj`` files: one JSON document per trajectory.

Fields taken: ``trajectory[]``: per step ``action`` (the command line: its category) and
``execution_time`` (seconds the action ran: the step's tool time). SWE-agent records no LLM
time, no timestamps and only the run's token totals, so a replay of it needs ``llm_time`` (or
``tokens``) beside ``replay`` and a fitted workload has no ``llm_time``.
"""

from __future__ import annotations

import math
from pathlib import Path

from .categories import category
from .io import documents, number
from .model import Call, Problems, Step, TraceSet, Trajectory


def read(paths: list[Path], problems: Problems, tool_map: dict[str, str] | None = None) -> TraceSet:
    out = []
    refusal = "not a SWE-agent .traj (no 'trajectory' array at the root); is it another format?"
    for path, doc in documents(paths, problems, "trajectory", refusal):
        file = str(path)
        steps, ok = [], True
        for k, st in enumerate(doc["trajectory"]):
            if not isinstance(st, dict):
                continue
            lat = number(st.get("execution_time"))
            if math.isnan(lat) or lat < 0:
                cause = "missing_latency" if math.isnan(lat) else "negative_latency"
                problems.bad(
                    cause,
                    file,
                    0,
                    f"trajectory[{k}].execution_time is {st.get('execution_time')!r}; expected seconds >= 0",
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
    return TraceSet(
        "swe-agent",
        [str(p) for p in paths],
        out,
        problems,
        notes=["SWE-agent records no LLM time: give llm_time (or tokens) beside the import or replay"],
    )
