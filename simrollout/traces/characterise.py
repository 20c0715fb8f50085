"""A trace characterised in TraceLab's terms, and its plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import stats

from .frames import calls_frame, quantiles, steps_frame, trajectories_frame
from .model import TraceSet


def characterise(ts: TraceSet, overlap: str = "trace") -> dict:
    st, calls, tr = steps_frame(ts, overlap), calls_frame(ts, overlap), trajectories_frame(ts, overlap)
    multi = st[st["calls"] > 1]
    tok = st.dropna(subset=["input", "cached"])
    hit = (tok["cached"] / tok["input"].where(tok["input"] > 0)).dropna()
    out = {
        "trajectories": len(tr),
        "steps": int(len(st)),
        "tool_calls": int(len(calls)),
        "steps_per_trajectory": quantiles(tr["steps"]),
        "llm_time_per_step_s": quantiles(st["llm"]),
        "tokens_per_step": {
            k: quantiles(st[k]) for k in ("input", "appended", "cached", "output") if st[k].notna().any()
        },
        "prefix_cache_hit": {
            "overall": float(tok["cached"].sum() / tok["input"].sum()) if len(tok) else None,
            **quantiles(hit, (0.1, 0.5, 0.9)),
        },
        "tool_calls_per_step": {
            str(k): round(float(v), 4)
            for k, v in st["calls"].clip(upper=4).value_counts(normalize=True).sort_index().items()
        },
        "overlapping_multi_call_steps": float(multi["overlap"].mean()) if len(multi) else None,
        "tool_latency_s": {
            c: {"share": round(len(g) / len(calls), 4), **quantiles(g["latency"])}
            for c, g in calls.groupby("category")
        },
        "tool_time_per_step_s": quantiles(st["tool"]),
        "duration_s": quantiles(tr["duration"]),
        "wall_s": quantiles(tr["wall"]),
        "human_gaps": {
            "steps_after_one": int((st["human"] > 0).sum()),
            "total_s": float(st["human"].sum()),
            **quantiles(st.loc[st["human"] > 0, "human"]),
            "excluded": "from every LLM and tool time (an RL rollout has no human)",
        },
    }
    if ts.adjusted:
        out["read_as"] = dict(ts.adjusted)
    if len(tr) >= 8:  # what independent per-step draws lose
        mean_tool = calls.groupby("traj")["piece"].mean().reindex(range(len(tr)))
        ok = mean_tool.notna()
        if ok.sum() >= 8 and mean_tool[ok].nunique() > 1 and tr["steps"][ok].nunique() > 1:
            rho = stats.spearmanr(tr["steps"][ok], mean_tool[ok])
            out["steps_vs_tool_latency_spearman"] = round(float(rho.statistic), 3)
        growth = st.dropna(subset=["input"])
        if len(growth) >= 8 and growth["input"].nunique() > 1 and growth["step"].nunique() > 1:
            rho = stats.spearmanr(growth["step"], growth["input"])
            out["step_index_vs_input_tokens_spearman"] = round(float(rho.statistic), 3)
    return out


def _q(d: dict, unit: str = "", fmt: str = ".3g") -> str:
    if not d:
        return "n/a"
    keys = [k for k in d if k.startswith("p")]
    return ", ".join(f"{k} {d[k]:{fmt}}{unit}" for k in keys)


def summary_lines(ch: dict) -> list[str]:
    lines = [
        f"{ch['trajectories']:,} trajectories, {ch['steps']:,} LLM steps, {ch['tool_calls']:,} tool calls",
        f"steps per trajectory: {_q(ch['steps_per_trajectory'], fmt='.0f')} (long autonomous loops)",
        f"LLM time per step: {_q(ch['llm_time_per_step_s'], ' s')}",
    ]
    for k, v in ch["tokens_per_step"].items():
        lines.append(f"tokens per step, {k}: {_q(v, fmt=',.0f')}")
    hit = ch["prefix_cache_hit"]
    if hit.get("overall") is not None:
        lines.append(
            f"prefix-cache hit: {hit['overall']:.1%} of input tokens overall (per step {_q(hit, fmt='.1%')})"
        )
    lines.append(
        "tool calls per step: "
        + ", ".join(f"{k if k != '4' else '4+'}: {v:.0%}" for k, v in ch["tool_calls_per_step"].items())
    )
    if ch["overlapping_multi_call_steps"] is not None:
        lines.append(
            f"steps with several calls whose calls overlap: {ch['overlapping_multi_call_steps']:.0%}"
        )
    for c, v in ch["tool_latency_s"].items():
        lines.append(f"tool latency, {c} ({v['share']:.0%} of calls): {_q(v, ' s')}")
    lines.append(f"trajectory duration (LLM + tools): {_q(ch['duration_s'], ' s')}")
    h = ch["human_gaps"]
    lines.append(
        f"human-paced gaps: {h['steps_after_one']} steps after one, {h['total_s']:,.0f} s in all "
        "(excluded from the workload)"
    )
    if "read_as" in ch:
        said = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in ch["read_as"].items())
        lines.append(f"as read: {said}")
    for k in ("steps_vs_tool_latency_spearman", "step_index_vs_input_tokens_spearman"):
        if k in ch:
            lines.append(f"{k.replace('_', ' ')}: {ch[k]:+.2f}")
    return lines


def plot(ts: TraceSet, path: Path, overlap: str = "trace") -> Path:
    """Six panels: steps per trajectory, LLM time per step, tokens per step and prefix-cache hit,
    tool calls per step and overlap, tool latency per category, human-paced gaps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    st, calls, tr = steps_frame(ts, overlap), calls_frame(ts, overlap), trajectories_frame(ts, overlap)
    fig, ax = plt.subplots(2, 3, figsize=(15, 8))

    def cdf(a, x, label):
        x = np.sort(np.asarray(x, dtype=float)[np.isfinite(x)])
        if x.size:
            a.step(np.maximum(x, 1e-4), np.arange(1, x.size + 1) / x.size, where="post", label=label)

    cdf(ax[0, 0], tr["steps"], "steps")
    ax[0, 0].set(title="steps per trajectory", xscale="log", ylabel="CDF")
    cdf(ax[0, 1], st["llm"], "LLM time")
    ax[0, 1].set(title="LLM time per step (s)", xscale="log")
    for k in ("appended", "cached", "output"):
        if st[k].notna().any():
            cdf(ax[0, 2], st[k], k)
    hit = (st["cached"] / st["input"]).dropna()
    ax[0, 2].set(
        title=f"tokens per step (prefix-cache hit {st['cached'].sum() / max(st['input'].sum(), 1):.0%})"
        if len(hit)
        else "tokens per step",
        xscale="log",
    )
    if ax[0, 2].get_legend_handles_labels()[0]:  # a trace without tokens has nothing to label
        ax[0, 2].legend()
    counts = st["calls"].clip(upper=6).value_counts().sort_index()
    ax[1, 0].bar(counts.index.astype(str), counts.values)
    multi = st[st["calls"] > 1]
    ax[1, 0].set(
        title=f"tool calls per step ({multi['overlap'].mean():.0%} of multi-call steps overlap)"
        if len(multi)
        else "tool calls per step"
    )
    for c, g in calls.groupby("category"):
        cdf(ax[1, 1], g["latency"], f"{c} ({len(g)})")
    ax[1, 1].set(title="tool latency per category (s)", xscale="log")
    if ax[1, 1].get_legend_handles_labels()[0]:
        ax[1, 1].legend(fontsize=8)
    cdf(ax[1, 2], st.loc[st["human"] > 0, "human"], "human gaps")
    ax[1, 2].set(title="human-paced gaps (s, excluded)", xscale="log")
    fig.tight_layout()
    from ..outputs import atomic_file

    with atomic_file(path) as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)
    return path
