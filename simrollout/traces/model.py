"""The normalised trajectory every trace reader produces, and the import report.

A trajectory is a list of steps (LLM turns). A step holds its LLM time, the tool calls that
followed it (name, category, latency) and the tool time as the trace shows it ran (overlapping
calls: the time their union covers), its tokens (input, cached prefix, output) and the
human-paced gap before it. Unknown values are NaN. Definitions per format: docs/scenario.md.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError

ON_BAD = ("skip", "refuse")
# what to do about a refused row, by cause (default: fix it, or skip such rows)
ADVICE = {
    "not_format": "Check the format name against the file, or pass --on-bad skip to leave such files out",
    "no_timing": "Pass --on-bad skip to leave such files out",
}


@dataclass
class Call:
    name: str
    category: str
    latency: float  # s: the call's own latency (TraceLab: internal if present, else wall)
    start: float = math.nan  # s since the trajectory's start, when the trace times calls


@dataclass
class Step:
    llm: float = math.nan  # s of LLM generation
    calls: list[Call] = field(default_factory=list)
    tool: float = math.nan  # s the step's calls took as they ran (the union of overlapping calls)
    input_tokens: float = math.nan  # the whole prompt of the turn (cached prefix included)
    cached_tokens: float = math.nan  # of which served from the prefix cache
    output_tokens: float = math.nan
    human: float = 0.0  # s of human-paced gap before this step (excluded from the workload)

    @property
    def overlap(self) -> bool:
        """The calls overlapped in time: the step's tool time is below their sum."""
        return len(self.calls) > 1 and self.tool < sum(c.latency for c in self.calls) - 1e-3  # ms resolution


@dataclass
class Trajectory:
    id: str
    file: str
    line: int  # where the trajectory starts (1-based; 0: one JSON document per file)
    steps: list[Step]
    start: dt.datetime | None = None
    setup: float = math.nan  # s (verifiers: the setup span)
    reward: float = math.nan  # s (verifiers: the scoring span)
    wall: float = math.nan  # s from the first to the last event, human gaps left out

    def duration(self, overlap: str = "trace") -> float:
        """Seconds of LLM and tool time (setup and scoring when known): what a replay runs."""
        llm = sum(s.llm for s in self.steps)
        return llm + sum(tool_time(s, overlap) for s in self.steps) + _zero(self.setup) + _zero(self.reward)


def _zero(x: float) -> float:
    return 0.0 if math.isnan(x) else x


def tool_time(step: Step, overlap: str = "trace") -> float:
    """A step's tool time: ``trace``, as the trace shows it ran; ``max``, the longest call;
    ``sum``, every call one after another."""
    lat = [c.latency for c in step.calls]
    if overlap == "max":
        return max(lat, default=0.0)
    if overlap == "sum":
        return float(sum(lat))
    return step.tool if not math.isnan(step.tool) else float(sum(lat))


def call_pieces(step: Step, overlap: str = "trace") -> list[float]:
    """Per call, its share of the step's tool time when the calls run one after another (as the
    simulator runs them): the calls' own latencies, scaled to the step's tool time (so
    overlapping calls add up to the time their union covers)."""
    lat = np.array([c.latency for c in step.calls], dtype=float)
    if not lat.size:
        return []
    total = tool_time(step, overlap)
    own = float(lat.sum())
    if own <= 0:
        return (np.full(lat.size, total / lat.size)).tolist()
    return (lat * (total / own)).tolist()


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of ``(start, end)`` intervals."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


@dataclass
class Problems:
    """Bad rows met while reading: refused (an InputError naming the file and line) or skipped
    and counted by cause, per ``on_bad``."""

    on_bad: str = "refuse"
    skipped: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.on_bad not in ON_BAD:
            raise InputError(f"--on-bad: expected one of {list(ON_BAD)}, got '{self.on_bad}'.")

    def bad(self, cause: str, file: str, line: int, msg: str, count: int = 1) -> None:
        where = f"{file}: line {line}" if line else file
        msg = msg.rstrip(" .")
        if self.on_bad == "refuse":
            advice = ADVICE.get(cause, "Fix the trace, or pass --on-bad skip to skip such rows")
            raise InputError(f"{where}: {msg}. {advice} (the report counts them).")
        self.skipped[cause] += count
        self.examples.setdefault(cause, f"{where}: {msg}")

    def as_dict(self) -> dict:
        return {c: {"count": n, "first": self.examples[c]} for c, n in sorted(self.skipped.items())}


@dataclass
class TraceSet:
    """The trajectories read from one or more files, with what was left out."""

    format: str
    files: list[str]
    trajectories: list[Trajectory]
    problems: Problems
    notes: list[str] = field(default_factory=list)  # definitions applied (e.g. ATIF's split)
    adjusted: dict[str, int] = field(default_factory=dict)  # what the reader changed, counted

    @property
    def steps(self) -> int:
        return sum(len(t.steps) for t in self.trajectories)

    def dates(self) -> list[str]:
        ts = [t.start for t in self.trajectories if t.start is not None]
        return [min(ts).isoformat(), max(ts).isoformat()] if ts else []

    def fill_llm(self) -> int:
        """Steps whose LLM time the trace does not give get the median of those it gives;
        returns how many were filled (0 when none is known: the scenario must give llm_time)."""
        known = [s.llm for t in self.trajectories for s in t.steps if not math.isnan(s.llm)]
        missing = [s for t in self.trajectories for s in t.steps if math.isnan(s.llm)]
        if not known or not missing:
            return 0
        med = float(np.median(known))
        for s in missing:
            s.llm = med
        self.notes.append(f"{len(missing)} steps without an LLM time took the trace's median ({med:.3g} s)")
        return len(missing)
