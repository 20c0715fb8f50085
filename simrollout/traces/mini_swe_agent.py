"""mini-swe-agent trajectories (``trajectory_format: mini-swe-agent-1.x``): one JSON document
per trajectory with a ``messages[]`` list.

Fields taken: per assistant message ``extra.timestamp`` (when the response arrived),
``extra.actions[].command`` (else the content's bash block) and ``extra.response.usage.
{prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens}``; per observation
message ``extra.timestamp`` (when the command returned). A step's LLM time runs from the last
timestamped message before its response to the response; its tool time from the response to
its last observation, shared equally by its commands (mini-swe-agent runs them one after
another). The first response has no earlier timestamp: its LLM time is the trace's median.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from .categories import command_category
from .io import documents, number, timestamp
from .model import Call, Problems, Step, TraceSet, Trajectory

BASH = re.compile(r"```(?:bash|sh)?\s*\n(.*?)\n```", re.DOTALL)


def _ts(m: dict) -> float:
    extra = m.get("extra") if isinstance(m.get("extra"), dict) else {}
    t = timestamp(extra.get("timestamp"))
    return t.timestamp() if t is not None else math.nan


def _commands(m: dict) -> list[str]:
    extra = m.get("extra") if isinstance(m.get("extra"), dict) else {}
    acts = [a.get("command") for a in extra.get("actions") or [] if isinstance(a, dict)]
    if acts:
        return [str(a) for a in acts]
    content = m.get("content") if isinstance(m.get("content"), str) else ""
    return [c.strip() for c in BASH.findall(content)]


def _usage(m: dict) -> tuple[float, float, float]:
    extra = m.get("extra") if isinstance(m.get("extra"), dict) else {}
    resp = extra.get("response") if isinstance(extra.get("response"), dict) else {}
    u = resp.get("usage") if isinstance(resp.get("usage"), dict) else {}
    det = u.get("prompt_tokens_details") if isinstance(u.get("prompt_tokens_details"), dict) else {}
    return (
        number(u.get("prompt_tokens")),
        number(det.get("cached_tokens")),
        number(u.get("completion_tokens")),
    )


def _trajectory(path: Path, doc: dict, problems: Problems, tool_map) -> Trajectory | None:
    file = str(path)
    steps, last, first = [], math.nan, math.nan
    cur: tuple[Step, float, float] | None = None  # step, response time, last observation time

    def close():
        if cur is None:
            return
        step, t_resp, t_obs = cur
        tool = t_obs - t_resp if not math.isnan(t_obs) else 0.0
        step.tool = tool if step.calls else 0.0
        for c in step.calls:
            c.latency = tool / len(step.calls)
        steps.append(step)

    for k, m in enumerate(doc["messages"]):
        if not isinstance(m, dict):
            continue
        t = _ts(m)
        if not math.isnan(t) and not math.isnan(last) and t < last:
            problems.bad("out_of_order", file, 0, f"messages[{k}] is timed before the message it follows")
            return None
        if m.get("role") == "assistant":
            if math.isnan(t):
                problems.bad("missing_latency", file, 0, f"messages[{k}] (assistant) has no extra.timestamp")
                return None
            close()
            p, c, o = _usage(m)
            cmds = _commands(m)
            calls = [
                Call("bash", (tool_map or {}).get("bash") or command_category(x), math.nan) for x in cmds
            ]
            cur = (
                Step(
                    llm=t - last if not math.isnan(last) else math.nan,
                    calls=calls,
                    input_tokens=p,
                    cached_tokens=c,
                    output_tokens=o,
                ),
                t,
                math.nan,
            )
            first = t if math.isnan(first) else first
        elif cur is not None and not math.isnan(t):
            cur = (cur[0], cur[1], t)
        if not math.isnan(t):
            last = t
    close()
    if not steps:
        problems.bad("no_steps", file, 0, "the trajectory has no assistant message")
        return None
    return Trajectory(path.stem, file, 0, steps, timestamp(first), wall=last - first)


def read(paths: list[Path], problems: Problems, tool_map: dict[str, str] | None = None) -> TraceSet:
    out = []
    refusal = (
        "not a mini-swe-agent trajectory (no 'messages' list at the root): another format, or not a trace"
    )
    for path, doc in documents(paths, problems, "messages", refusal):
        t = _trajectory(path, doc, problems, tool_map)
        if t is not None:
            out.append(t)
    return TraceSet("mini-swe-agent", [str(p) for p in paths], out, problems)
