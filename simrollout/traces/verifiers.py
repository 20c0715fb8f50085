"""prime-rl / verifiers rollout records (``results.jsonl``: one ``RolloutOutput`` per line).

Fields taken: ``timing.setup``, ``timing.scoring`` (spans of ``start``/``end`` Unix seconds),
``timing.model.spans[]`` (one per LLM turn) and ``timing.env.spans[]`` (the environment's
response after each turn but the last); ``trajectory[]``: per turn the assistant message's
``tool_calls[]`` names and ``response.usage.{prompt_tokens, completion_tokens}`` (else the
lengths of ``tokens.prompt_ids`` / ``completion_ids``). The format separates model time from
environment time natively: a step's LLM time is its model span, its tool time the env span
after it, shared equally by its tool calls (one call named ``env`` when the record has no turn).
"""

from __future__ import annotations

import math
from pathlib import Path

from .categories import category
from .io import json_lines, number, timestamp
from .model import Call, Problems, Step, TraceSet, Trajectory


def _span(x) -> tuple[float, float]:
    if not isinstance(x, dict):
        return math.nan, math.nan
    return number(x.get("start")), number(x.get("end"))


def _seconds(x) -> float:
    """A phase span's duration; NaN when it was not measured (verifiers leaves ``end`` at 0)."""
    a, b = _span(x)
    return b - a if b > 0 and b >= a else math.nan


def _turn(t) -> tuple[list[str], float, float]:
    if not isinstance(t, dict):
        return [], math.nan, math.nan
    names = []
    for m in t.get("completion") or []:
        if isinstance(m, dict) and m.get("role") == "assistant":
            for c in m.get("tool_calls") or []:
                if isinstance(c, dict):
                    fn = c.get("function") if isinstance(c.get("function"), dict) else {}
                    names.append(str(c.get("name") or fn.get("name") or "<unknown-tool>"))
    resp = t.get("response") if isinstance(t.get("response"), dict) else {}
    usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else {}
    p, o = number(usage.get("prompt_tokens")), number(usage.get("completion_tokens"))
    tok = t.get("tokens") if isinstance(t.get("tokens"), dict) else {}
    if math.isnan(p) and isinstance(tok.get("prompt_ids"), list):
        p = float(len(tok["prompt_ids"]))
    if math.isnan(o) and isinstance(tok.get("completion_ids"), list):
        o = float(len(tok["completion_ids"]))
    return names, p, o


def _record(path: Path, line: int, rec: dict, problems: Problems, tool_map) -> Trajectory | None:
    file = str(path)
    timing = rec.get("timing")
    if not isinstance(timing, dict) or not isinstance(timing.get("model"), dict):
        problems.bad(
            "not_format",
            file,
            line,
            "not a verifiers rollout record (no timing.model spans); is it another format?",
        )
        return None
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


def read(paths: list[Path], problems: Problems, tool_map: dict[str, str] | None = None) -> TraceSet:
    out = []
    for path in paths:
        seen = False
        for line, rec in json_lines(path, problems):
            if not seen and not isinstance(rec.get("timing"), dict):
                _record(path, line, rec, problems, tool_map)  # refused, or counted as not_format
                break  # the first record is of another format: the rest of the file is too
            seen = True
            t = _record(path, line, rec, problems, tool_map)
            if t is not None:
                out.append(t)
    return TraceSet("verifiers", [str(p) for p in paths], out, problems)
