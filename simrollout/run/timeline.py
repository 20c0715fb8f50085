"""A run's timeline as a Chrome trace (the Trace Event Format that ui.perfetto.dev and
chrome://tracing open): trajectories with their sandbox creates, the engines' running requests,
trajectories in flight, and the trainer's wait, train and weight-sync spans.

One cell is simulated again with every step as an event (first substrate and concurrency level,
replication 0, unless asked otherwise), so a timeline is for small runs.
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path

from ..errors import InputError
from ..outputs import atomic_file
from ..scenario import Scenario
from ..sim.engines import STEP
from ..sim.model import Cell
from .runner import work_for

MAX_TRAJECTORIES = 50_000
_PIDS = {"trajectories": 1, "engines": 2, "trainer": 3}


def check(scn: Scenario) -> None:
    """Refuse, before anything runs, a run too large to draw."""
    if scn.trajectories > MAX_TRAJECTORIES:
        raise InputError(
            f"{scn._source}: --timeline is for small runs (at most {MAX_TRAJECTORIES:,} trajectories, "
            f"this one has {scn.trajectories:,}); lower workload.trajectories or training.steps."
        )


def record(scn: Scenario, substrate: int = 0, concurrency: int | None = None) -> tuple[list, list]:
    """Simulate one cell with tracing on: ``(spans, engine changes)``."""
    check(scn)
    c = concurrency or scn.cluster.levels[0]
    sub = scn.substrates[substrate]
    cell = Cell(scn, sub, c, 0, work_for(scn, 0, STEP.per_step, sub=sub), STEP.name)
    cell.trace, cell.tier.trace = [], []
    cell.run()
    return cell.trace, cell.tier.trace


def _lanes(spans: list) -> dict[int, int]:
    """A lane (thread) per trajectory so that no two overlap on one lane (interval partitioning)."""
    free: list[int] = []  # lanes released, lowest first
    busy: list[tuple[float, int]] = []  # (end, lane) of spans in progress
    lane_of: dict[int, int] = {}
    tops = sorted((s for s in spans if _is_trajectory(s)), key=lambda s: s[3])
    for _, key, _, start, dur, _ in tops:
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(lane_of) and max(lane_of.values()) + 1
        lane_of[key] = lane
        heapq.heappush(busy, (start + dur, lane))
    return lane_of


def _is_trajectory(span) -> bool:
    return span[0] == "trajectories" and span[2].startswith("trajectory")


def _event(name: str, ph: str, pid: int, tid: int = 0, **fields) -> dict:
    return {"name": name, "ph": ph, "pid": pid, "tid": tid, **fields}


def chrome_trace(spans: list, engines: list, name: str) -> dict:
    """The Trace Event Format (JSON object form); times in microseconds."""
    us = 1e6
    events = [_event("process_name", "M", pid, args={"name": proc}) for proc, pid in _PIDS.items()]
    lanes = _lanes(spans)
    for lane in sorted(set(lanes.values())):
        events.append(_event("thread_name", "M", 1, lane, args={"name": f"slot {lane}"}))
    events.append(_event("thread_name", "M", 3, args={"name": "trainer"}))
    for proc, key, label, start, dur, args in spans:
        tid = lanes.get(key, 0) if proc == "trajectories" else 0
        when = {"ts": start * us, "dur": max(dur, 0.0) * us}
        events.append(_event(label, "X", _PIDS[proc], tid, cat=proc, args=args, **when))
    # trajectories in flight, and running requests per engine, as counters
    tops = [s for s in spans if _is_trajectory(s)]
    n = 0
    for t, d in sorted([(s[3], 1) for s in tops] + [(s[3] + s[4], -1) for s in tops]):
        n += d
        events.append(_event("in flight", "C", 1, ts=t * us, args={"trajectories": n}))
    for t, e, running in engines:
        events.append(_event(f"engine {e}", "C", 2, ts=t * us, args={"requests": running}))
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"scenario": name}}


def write_timeline(scn: Scenario, path: Path) -> int:
    """Simulate the first cell with tracing and write its Chrome trace; returns the events written."""
    spans, engines = record(scn)
    trace = chrome_trace(spans, engines, scn.name)
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(trace))
    return len(trace["traceEvents"])
