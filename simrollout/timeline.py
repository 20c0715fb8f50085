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

from .errors import InputError
from .runner import work_for
from .scenario import Scenario
from .sim.model import Cell

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
    cell = Cell(scn, scn.substrates[substrate], c, 0, work_for(scn, 0, True), "step")
    cell.trace, cell.tier.trace = [], []
    cell.run()
    return cell.trace, cell.tier.trace


def _lanes(spans: list) -> dict[int, int]:
    """A lane (thread) per trajectory so that no two overlap on one lane (interval partitioning)."""
    free: list[int] = []  # lanes released, lowest first
    busy: list[tuple[float, int]] = []  # (end, lane) of spans in progress
    lane_of: dict[int, int] = {}
    tops = sorted((s for s in spans if s[0] == "trajectories" and s[2].startswith("trajectory")), key=lambda s: s[3])
    for _, key, _, start, dur, _ in tops:
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(lane_of) and max(lane_of.values()) + 1
        lane_of[key] = lane
        heapq.heappush(busy, (start + dur, lane))
    return lane_of


def chrome_trace(spans: list, engines: list, name: str) -> dict:
    """The Trace Event Format (JSON object form); times in microseconds."""
    us = 1e6
    events: list[dict] = []
    for proc, pid in _PIDS.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": proc}})
    lanes = _lanes(spans)
    for lane in sorted(set(lanes.values())):
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": lane, "args": {"name": f"slot {lane}"}})
    events.append({"name": "thread_name", "ph": "M", "pid": 3, "tid": 0, "args": {"name": "trainer"}})
    for proc, key, label, start, dur, args in spans:
        pid = _PIDS[proc]
        tid = lanes.get(key, 0) if proc == "trajectories" else 0
        events.append({"name": label, "cat": proc, "ph": "X", "ts": start * us, "dur": max(dur, 0.0) * us,
                       "pid": pid, "tid": tid, "args": args})  # fmt: skip
    # trajectories in flight, and running requests per engine, as counters
    edges = sorted([(s[3], 1) for s in spans if s[2].startswith("trajectory")]
                   + [(s[3] + s[4], -1) for s in spans if s[2].startswith("trajectory")])  # fmt: skip
    n = 0
    for t, d in edges:
        n += d
        events.append({"name": "in flight", "ph": "C", "ts": t * us, "pid": 1, "tid": 0, "args": {"trajectories": n}})
    for t, e, running in engines:
        events.append({"name": f"engine {e}", "ph": "C", "ts": t * us, "pid": 2, "tid": 0, "args": {"requests": running}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"scenario": name}}


def write_timeline(scn: Scenario, path: Path) -> int:
    """Simulate the first cell with tracing and write its Chrome trace; returns the events written."""
    spans, engines = record(scn)
    trace = chrome_trace(spans, engines, scn.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(trace))
    tmp.replace(path)
    return len(trace["traceEvents"])
