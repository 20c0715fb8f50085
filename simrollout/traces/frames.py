"""A trace set as two tables: one row per step, one row per tool call."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .model import TraceSet, call_pieces, tool_time


def steps_frame(ts: TraceSet, overlap: str = "trace") -> pd.DataFrame:
    rows = {
        k: []
        for k in ("traj", "step", "llm", "tool", "calls", "overlap", "input", "cached", "output", "human")
    }
    for i, t in enumerate(ts.trajectories):
        for k, s in enumerate(t.steps):
            rows["traj"].append(i)
            rows["step"].append(k)
            rows["llm"].append(s.llm)
            rows["tool"].append(tool_time(s, overlap))
            rows["calls"].append(len(s.calls))
            rows["overlap"].append(s.overlap)
            rows["input"].append(s.input_tokens)
            rows["cached"].append(s.cached_tokens)
            rows["output"].append(s.output_tokens)
            rows["human"].append(s.human)
    df = pd.DataFrame(rows)
    df["appended"] = df["input"] - df["cached"].fillna(0.0)
    return df


def calls_frame(ts: TraceSet, overlap: str = "trace") -> pd.DataFrame:
    rows = {k: [] for k in ("traj", "step", "name", "category", "latency", "piece")}
    for i, t in enumerate(ts.trajectories):
        for k, s in enumerate(t.steps):
            for c, piece in zip(s.calls, call_pieces(s, overlap)):
                rows["traj"].append(i)
                rows["step"].append(k)
                rows["name"].append(c.name)
                rows["category"].append(c.category)
                rows["latency"].append(c.latency)
                rows["piece"].append(piece)
    return pd.DataFrame(rows)


def trajectories_frame(ts: TraceSet, overlap: str = "trace") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": [t.id for t in ts.trajectories],
            "steps": [len(t.steps) for t in ts.trajectories],
            "duration": [t.duration(overlap) for t in ts.trajectories],
            "wall": [t.wall for t in ts.trajectories],
            "setup": [t.setup for t in ts.trajectories],
            "reward": [t.reward for t in ts.trajectories],
            "human": [sum(s.human for s in t.steps) for t in ts.trajectories],
        }
    )


def quantiles(x, qs=(0.5, 0.9, 0.99)) -> dict[str, float]:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if not x.size:
        return {}
    return {f"p{q * 100:g}": float(np.quantile(x, q)) for q in qs} | {
        "mean": float(x.mean()),
        "n": int(x.size),
    }
