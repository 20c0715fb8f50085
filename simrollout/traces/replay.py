"""A trace's own trajectories as the simulator's per-trajectory arrays (``workload: {replay:}``).

Trajectory ``i`` of a run replays the trace's trajectory ``i`` while the trace has one
(``resample: auto``), beyond that a whole trajectory drawn with replacement from the stream
``(seed, rep, "replay", chunk)`` (a bootstrap by trajectory, never by step); ``always`` draws
every one, ``never`` refuses a run longer than the trace.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..rng import stream
from . import read_trace
from .fit import token_arrays
from .model import TraceSet, call_pieces


@dataclass
class ReplayData:
    """The trace flattened: per trajectory, per step (``step_off``) and per call (``call_off``
    over steps: step ``g``'s calls are ``call_off[g]:call_off[g + 1]``)."""

    steps: np.ndarray
    step_off: np.ndarray
    llm: np.ndarray  # per step, s (NaN: not in the trace)
    calls: np.ndarray  # per step
    call_off: np.ndarray
    tool: np.ndarray  # per call: its share of its step's tool time, s
    category: np.ndarray  # per call, index into ``categories``
    categories: tuple[str, ...]
    setup: np.ndarray  # per trajectory, s (NaN: not in the trace)
    reward: np.ndarray
    prompt: np.ndarray | None  # token terms (fit.token_arrays), when the trace has them
    append: np.ndarray | None
    output: np.ndarray | None
    trace: TraceSet

    @property
    def n(self) -> int:
        return len(self.steps)


def build(ts: TraceSet, overlap: str = "trace") -> ReplayData:
    steps = np.array([len(t.steps) for t in ts.trajectories], dtype=np.int64)
    flat = [s for t in ts.trajectories for s in t.steps]
    cats = tuple(sorted({c.category for s in flat for c in s.calls}))
    index = {c: k for k, c in enumerate(cats)}
    calls = np.array([len(s.calls) for s in flat], dtype=np.int64)
    tool = np.array([p for s in flat for p in call_pieces(s, overlap)], dtype=float)
    tok = token_arrays(ts)
    return ReplayData(
        steps=steps,
        step_off=np.concatenate([[0], np.cumsum(steps)]),
        llm=np.array([s.llm for s in flat], dtype=float),
        calls=calls,
        call_off=np.concatenate([[0], np.cumsum(calls)]),
        tool=tool,
        category=np.array([index[c.category] for s in flat for c in s.calls], dtype=np.int16),
        categories=cats,
        setup=np.array([t.setup for t in ts.trajectories], dtype=float),
        reward=np.array([t.reward for t in ts.trajectories], dtype=float),
        prompt=None if tok is None else tok["prompt"].astype(np.int64),
        append=None if tok is None else tok["appended"].astype(np.int64),
        output=None if tok is None else tok["output"].astype(np.int64),
        trace=ts,
    )


@lru_cache(maxsize=4)
def _load(path: str, fmt: str, on_bad: str, overlap: str, tool_map: tuple, stamp: tuple) -> ReplayData:
    return build(read_trace(fmt, [path], on_bad, dict(tool_map)), overlap)


def load(spec) -> ReplayData:
    """The replay data of a scenario's ``workload.replay`` (read once per process per file)."""
    st = os.stat(spec.path)
    return _load(
        spec.path,
        spec.format,
        spec.on_bad,
        spec.overlap,
        tuple(sorted(spec.tool_map.items())),
        (st.st_mtime_ns, st.st_size),
    )


def _ranges(off: np.ndarray, which: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Flat indices ``off[w] + 0 .. off[w] + length - 1`` for each ``w`` in ``which``."""
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(off[which] - (np.cumsum(lengths) - lengths), lengths)
    return starts + np.arange(total)


def pick(spec, data: ReplayData, seed: int, rep: int, chunk: int, lo: int, m: int) -> np.ndarray:
    """Trace trajectories replayed by run trajectories ``lo .. lo + m - 1``."""
    i = np.arange(lo, lo + m)
    if spec.resample == "always":
        return stream(seed, rep, "replay", chunk).integers(0, data.n, m)
    out = i.copy()
    beyond = i >= data.n
    if beyond.any():
        out[beyond] = stream(seed, rep, "replay", chunk).integers(0, data.n, int(beyond.sum()))
    return out


def gather(data: ReplayData, which: np.ndarray, max_turns: int | None) -> dict[str, np.ndarray]:
    """Per-trajectory and flat per-step / per-call arrays of the picked trajectories (the first
    ``max_turns`` steps of each when the harness stops there)."""
    steps = data.steps[which]
    if max_turns:
        steps = np.minimum(steps, max_turns)
    g = _ranges(data.step_off, which, steps)  # the picked steps, in the trace
    step_calls = data.calls[g]
    c = _ranges(data.call_off, g, step_calls)
    out = {
        "steps": steps,
        "step_llm": data.llm[g],
        "step_calls": step_calls,
        "call_tool": data.tool[c],
        "call_category": data.category[c],
        "setup": np.nan_to_num(data.setup[which]),
        "reward": np.nan_to_num(data.reward[which]),
    }
    if data.prompt is not None:
        out.update(prompt=data.prompt[which], step_append=data.append[g], step_output=data.output[g])
    return out


def check_path(path: Path) -> str:
    return str(path.resolve())


__all__ = ["ReplayData", "build", "load", "pick", "gather", "math"]
