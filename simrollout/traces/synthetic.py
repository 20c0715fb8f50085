"""Synthetic traces with known distributions, written in each format's shape (for tests and
the shipped replay example). Every step runs its generation, then its tool calls (one after
another, or together when the step overlaps them), then the next step starts: a trajectory's
wall time is its LLM and tool time plus its human-paced gaps."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAX_CONTEXT = 160_000  # tokens: beyond, the harness compacts the context to the prompt
TOOLS = {  # name: (category, median s, sigma of the log)
    "Bash": ("shell", 0.8, 1.2),
    "Read": ("read", 0.05, 0.8),
    "Edit": ("edit", 0.08, 0.9),
    "Grep": ("search", 0.12, 0.7),
    "run_tests": ("test", 6.0, 0.8),
}


@dataclass
class SynthStep:
    llm: float
    calls: list[tuple[str, float]]  # (tool name, latency s)
    parallel: bool
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    human: float = 0.0  # s before the step (a user message)


@dataclass
class SynthTrajectory:
    id: str
    start: float  # epoch s
    steps: list[SynthStep] = field(default_factory=list)

    @property
    def duration(self) -> float:
        """LLM and tool time (overlapping calls: the longest), human gaps left out."""
        tool = sum(
            max(c[1] for c in s.calls) if s.parallel else sum(c[1] for c in s.calls)
            for s in self.steps
            if s.calls
        )
        return sum(s.llm for s in self.steps) + tool


def generate(
    n: int,
    seed: int = 0,
    steps_median: float = 20.0,
    correlated: bool = False,
    overlap: float = 0.0,
    human: float = 0.0,
    linear_llm: bool = False,
) -> list[SynthTrajectory]:
    """``n`` trajectories: steps ~ lognormal (median ``steps_median``, sigma 0.6), LLM time per
    step ~ lognormal (median 2 s, sigma 0.7) (``linear_llm``: 0.4 s + 8 ms per output token),
    calls per step 0-3, tool latencies per :data:`TOOLS`, a growing context. ``correlated``:
    a per-trajectory factor lengthens both its steps and its tool latencies (long trajectories
    with slow tools). ``overlap``: share of multi-call steps whose calls run together.
    ``human``: chance of a human-paced gap before a step."""
    rng = np.random.default_rng(seed)
    names = list(TOOLS)
    out = []
    t0 = dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc).timestamp()
    for i in range(n):
        f = float(np.exp(rng.normal(0.0, 0.7))) if correlated else 1.0
        k = max(1, int(round(steps_median * np.exp(rng.normal(0.0, 0.6)) * (f if correlated else 1.0))))
        traj = SynthTrajectory(f"sess-{seed}-{i:05d}", t0 + 3600.0 * i)
        ctx = prompt = int(rng.integers(4000, 12000))
        for s in range(k):
            out_tok = int(max(1, round(np.exp(rng.normal(np.log(250), 0.9)))))
            llm = 0.4 + 0.008 * out_tok if linear_llm else float(np.exp(rng.normal(np.log(2.0), 0.7)))
            n_calls = int(rng.choice([0, 1, 2, 3], p=[0.15, 0.55, 0.2, 0.1])) if s < k - 1 else 0
            calls = []
            for _ in range(n_calls):
                name = names[int(rng.choice(len(names), p=[0.5, 0.2, 0.12, 0.1, 0.08]))]
                _, med, sig = TOOLS[name]
                calls.append((name, round(float(med * f * np.exp(rng.normal(0.0, sig))), 4)))
            append = int(np.exp(rng.normal(np.log(900), 1.0)) * f) if s else 0
            ctx = ctx + append if ctx + append <= MAX_CONTEXT else prompt + append  # the harness compacts
            cached = int(ctx - append - (0 if rng.random() < 0.9 else min(ctx - append, 2000)))
            gap = float(np.exp(rng.normal(np.log(30), 1.0))) if s and rng.random() < human else 0.0
            traj.steps.append(
                SynthStep(
                    round(llm, 4),
                    calls,
                    len(calls) > 1 and rng.random() < overlap,
                    ctx,
                    max(cached, 0),
                    out_tok,
                    round(gap, 3),
                )
            )
            ctx += out_tok
        out.append(traj)
    return out


def _iso(t: float) -> str:
    return (
        dt.datetime.fromtimestamp(t, dt.timezone.utc)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )


def _timeline(traj: SynthTrajectory):
    """Per step: (generation start, generation end, [(name, latency, emitted, result)], user at)."""
    t = traj.start
    for s in traj.steps:
        user = None
        if s.human:
            t += s.human
            user = t
        g0, g1 = t, t + s.llm
        calls, at = [], g1
        for name, lat in s.calls:
            start = g1 if s.parallel else at
            calls.append((name, lat, start, start + lat))
            at = start + lat
        yield s, g0, g1, calls, user
        t = max([g1] + [c[3] for c in calls])


def write_tracelab(trajs: list[SynthTrajectory], path: Path, pad: int = 0) -> Path:
    """TraceLab round_trace JSONL, gzipped when ``path`` ends in .gz (``pad``: characters of
    filler per row, for streaming tests)."""
    import gzip

    opener = gzip.open if Path(path).suffix == ".gz" else open
    with opener(path, "wt") as f:
        for traj in trajs:
            prev: list = []
            for k, (s, g0, g1, calls, user) in enumerate(_timeline(traj)):
                ev = [{"event_type": "tool_result", "timestamp": _iso(c[3])} for c in prev]
                if user is not None or not prev:  # after a step without calls, the user speaks
                    ev.append({"event_type": "user_message", "timestamp": _iso(g0)})
                ev += [
                    {"event_type": "reasoning", "timestamp": _iso(g0 + 0.3 * s.llm), "content_chars": pad},
                    {"event_type": "text", "timestamp": _iso(g1)},
                ]
                ev += [{"event_type": "tool_call", "timestamp": _iso(g1), "tool_name": c[0]} for c in calls]
                tools = [
                    {
                        "tool_index": j,
                        "tool_name": c[0],
                        "emitted_at": _iso(c[2]),
                        "result_at": _iso(c[3]),
                        "tool_wall_latency_ms": round(c[1] * 1000, 1),
                        "tool_internal_latency_ms": None if j % 2 else round(c[1] * 1000, 1),
                        "is_error": False,
                    }
                    for j, c in enumerate(calls)
                ]
                row = {
                    "provider": "synthetic",
                    "session_id": traj.id,
                    "round_index": k,
                    "model": "synthetic",
                    "input_tokens_total": s.input_tokens,
                    "prefix_tokens": s.cached_tokens,
                    "newly_append_tokens": s.input_tokens - s.cached_tokens,
                    "output_tokens": s.output_tokens,
                    "timing_events": ev,
                    "tools": tools,
                }
                if pad:
                    row["filler"] = "x" * pad
                f.write(json.dumps(row) + "\n")
                prev = calls
    return path


def atif_document(traj: SynthTrajectory) -> dict:
    """ATIF: a user step, then one agent step per LLM step timed at the end of its generation."""
    steps = [{"step_id": 1, "timestamp": _iso(traj.start), "source": "user", "message": "task"}]
    for s, _g0, g1, calls, user in _timeline(traj):
        if user is not None:
            steps.append(
                {"step_id": len(steps) + 1, "timestamp": _iso(user), "source": "user", "message": "more"}
            )
        steps.append(
            {
                "step_id": len(steps) + 1,
                "timestamp": _iso(g1),
                "source": "agent",
                "message": "",
                "tool_calls": [
                    {"tool_call_id": f"c{j}", "function_name": c[0], "arguments": {}}
                    for j, c in enumerate(calls)
                ],
                "observation": {
                    "results": [{"source_call_id": f"c{j}", "content": "ok"} for j in range(len(calls))]
                },
                "metrics": {
                    "prompt_tokens": s.input_tokens,
                    "cached_tokens": s.cached_tokens,
                    "completion_tokens": s.output_tokens,
                },
            }
        )
    return {
        "schema_version": "ATIF-v1.4",
        "session_id": traj.id,
        "agent": {"name": "synthetic", "version": "1"},
        "steps": steps,
        "final_metrics": {"total_steps": len(steps)},
    }


def verifiers_record(traj: SynthTrajectory, k: int) -> dict:
    model, env, turns = [], [], []
    for s, g0, g1, calls, _ in _timeline(traj):
        model.append({"start": g0, "end": g1})
        env.append({"start": g1, "end": max([g1] + [c[3] for c in calls])})  # before the next turn
        turns.append(
            {
                "completion": [
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {"id": f"c{j}", "name": c[0], "arguments": "{}"} for j, c in enumerate(calls)
                        ],
                    }
                ],
                "response": {
                    "usage": {"prompt_tokens": s.input_tokens, "completion_tokens": s.output_tokens}
                },
            }
        )
    t0 = traj.start
    return {
        "example_id": k,
        "reward": 1.0,
        "is_completed": True,
        "is_truncated": False,
        "metrics": {},
        "timing": {
            "start_time": t0,
            "setup": {"start": t0 - 2.0, "end": t0},
            "generation": {"start": t0, "end": model[-1]["end"]},
            "scoring": {"start": model[-1]["end"], "end": model[-1]["end"] + 0.5},
            "model": {"spans": model},
            "env": {"spans": env},
        },
        "trajectory": turns,
    }


def _last_env(rec: dict) -> dict:
    rec["timing"]["env"]["spans"].pop()  # the last turn has no environment response after it
    return rec


def mini_document(traj: SynthTrajectory) -> dict:
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    for s, _g0, g1, calls, _ in _timeline(traj):
        cmds = [
            {
                "Bash": "python -m build",
                "Read": "cat a.py",
                "Edit": "sed -i s/a/b/ a.py",
                "Grep": "grep -rn foo .",
                "run_tests": "pytest -q",
            }[c[0]]
            for c in calls
        ]
        msgs.append(
            {
                "role": "assistant",
                "content": "",
                "extra": {
                    "timestamp": g1,
                    "actions": [{"command": c} for c in cmds],
                    "response": {
                        "usage": {
                            "prompt_tokens": s.input_tokens,
                            "completion_tokens": s.output_tokens,
                            "prompt_tokens_details": {"cached_tokens": s.cached_tokens},
                        }
                    },
                },
            }
        )
        for end in sorted(c[3] for c in calls):
            msgs.append({"role": "user", "content": "out", "extra": {"timestamp": end, "returncode": 0}})
    return {"info": {"exit_status": "Submitted"}, "messages": msgs, "trajectory_format": "mini-swe-agent-1.1"}


def swe_agent_document(traj: SynthTrajectory) -> dict:
    cmd = {
        "Bash": "python setup.py",
        "Read": "str_replace_editor view a.py",
        "Edit": "str_replace_editor str_replace a.py",
        "Grep": "search_dir foo",
        "run_tests": "pytest -q",
    }
    steps = []
    for s in traj.steps:
        name, lat = s.calls[0] if s.calls else ("Bash", 0.0)
        steps.append(
            {
                "action": cmd[name] if s.calls else "submit",
                "observation": "",
                "response": "",
                "thought": "",
                "execution_time": lat,
                "state": {},
                "query": [],
                "extra_info": {},
            }
        )
    return {"trajectory": steps, "history": [], "info": {"model_stats": {"api_calls": len(steps)}}}


def write_documents(trajs, folder: Path, kind: str) -> list[Path]:
    """One file per trajectory (``atif``, ``mini-swe-agent``, ``swe-agent``)."""
    make = {"atif": atif_document, "mini-swe-agent": mini_document, "swe-agent": swe_agent_document}[kind]
    ext = ".traj" if kind == "swe-agent" else ".json"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in trajs:
        p = folder / f"{t.id}{ext}"
        p.write_text(json.dumps(make(t)))
        paths.append(p)
    return paths


def write_verifiers(trajs, path: Path) -> Path:
    with open(path, "w") as f:
        for k, t in enumerate(trajs):
            f.write(json.dumps(_last_env(verifiers_record(t, k))) + "\n")
    return path
