"""verifiers' per-turn layout (0.3 on): a ``RolloutOutput`` whose ``timing`` holds one model span
per LLM turn and one env span per environment response (``RolloutTiming``; spans in Unix
seconds). The format separates model from environment time natively: a step's LLM time is its
model span, its tool time the env span after it, shared equally by its tool calls (one call
named ``env`` when the record has no turn)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .categories import category
from .io import number, timestamp
from .model import Call, Problems, Step, Trajectory


def _span(x) -> tuple[float, float]:
    if not isinstance(x, dict):
        return math.nan, math.nan
    return number(x.get("start")), number(x.get("end"))


def _seconds(x) -> float:
    """A phase span's duration; NaN when it was not measured (verifiers leaves ``end`` at 0)."""
    a, b = _span(x)
    return b - a if b > 0 and b >= a else math.nan


def names_of(msg: dict) -> list[str]:
    """An assistant message's tool-call names (``name`` or ``function.name``)."""
    out = []
    for c in msg.get("tool_calls") or []:
        if isinstance(c, str):  # verifiers 2025 wrote each call JSON-encoded
            try:
                c = json.loads(c)
            except json.JSONDecodeError:
                c = {}
        if isinstance(c, dict):
            fn = c.get("function") if isinstance(c.get("function"), dict) else {}
            out.append(str(c.get("name") or fn.get("name") or "<unknown-tool>"))
    return out


def _turn(t) -> tuple[list[str], float, float]:
    if not isinstance(t, dict):
        return [], math.nan, math.nan
    msgs = [m for m in t.get("completion") or [] if isinstance(m, dict) and m.get("role") == "assistant"]
    names = [n for m in msgs for n in names_of(m)]
    resp = t.get("response") if isinstance(t.get("response"), dict) else {}
    usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else {}
    p, o = number(usage.get("prompt_tokens")), number(usage.get("completion_tokens"))
    tok = t.get("tokens") if isinstance(t.get("tokens"), dict) else {}
    if math.isnan(p) and isinstance(tok.get("prompt_ids"), list):
        p = float(len(tok["prompt_ids"]))
    if math.isnan(o) and isinstance(tok.get("completion_ids"), list):
        o = float(len(tok["completion_ids"]))
    return names, p, o


def spans_record(path: Path, line: int, rec: dict, problems: Problems, tool_map) -> Trajectory | None:
    file = str(path)
    timing = rec["timing"]
    model = [_span(s) for s in timing["model"].get("spans") or []]
    env = [_span(s) for s in (timing.get("env") or {}).get("spans") or []]
    rid = f"{rec.get('example_id', '?')}@{path.name}:{line}"
    if not model:
        problems.bad("no_steps", file, line, f"rollout {rid} has no model spans (no LLM turn)")
        return None
    for kind, spans in (("model", model), ("env", env)):
        for k, (a, b) in enumerate(spans):
            if math.isnan(a) or math.isnan(b):
                problems.bad("missing_latency", file, line, f"timing.{kind}.spans[{k}] has no start or end")
                return None
            if b < a:
                problems.bad(
                    "negative_latency",
                    file,
                    line,
                    f"timing.{kind}.spans[{k}] ends before it starts ({b - a:g} s)",
                )
                return None
    turns = rec.get("trajectory") if isinstance(rec.get("trajectory"), list) else []
    steps = []
    for k, (a, b) in enumerate(model):
        names, p, o = _turn(turns[k] if k < len(turns) else None)
        tool = env[k][1] - env[k][0] if k < len(env) else 0.0
        if not names and k < len(env) and k >= len(turns):  # no turn record: the env span as one call
            names = ["env"]
        calls = [Call(n, category(n, override=tool_map), tool / len(names)) for n in names]
        steps.append(
            Step(llm=b - a, calls=calls, tool=tool if calls else 0.0, input_tokens=p, output_tokens=o)
        )
    first = min(s[0] for s in model)
    last = max([s[1] for s in model] + [s[1] for s in env])
    return Trajectory(
        rid,
        file,
        line,
        steps,
        timestamp(first),
        setup=_seconds(timing.get("setup")),
        reward=_seconds(timing.get("scoring")),
        wall=last - first,
    )
