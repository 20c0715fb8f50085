"""verifiers / prime-rl rollout records (``results.jsonl``: one rollout per line), in the
layouts verifiers has written (docs/scenario.md, "verifiers"):

- ``spans`` (verifiers 0.3 on, ``RolloutOutput.timing`` as ``RolloutTiming``):
  ``timing.model.spans[]`` (one per LLM turn) and ``timing.env.spans[]`` (the environment's
  response after each turn but the last), ``timing.{setup, scoring}`` spans, and per turn in
  ``trajectory[]`` the assistant message's ``tool_calls[]`` names and ``response.usage.
  {prompt_tokens, completion_tokens}`` (else the lengths of ``tokens.prompt_ids`` /
  ``completion_ids``). A step's LLM time is its model span, its tool time the env span after
  it, shared equally by its calls.
- ``per-rollout`` (top-level ``generation_ms``, ``scoring_ms``, ``total_ms``; from early 2026
  the same under ``timing``): one time for the whole rollout, model and tool time together,
  with the turns and tool calls read from ``completion[]``. The generation time is spread
  equally over the rollout's turns; with ``tool_latency`` each call takes that long and the
  rest is LLM time, else all of it is LLM time and the calls take 0 s (said in the notes).

Refused, naming the layout: records written before verifiers timed rollouts (prompt,
completion and reward only) and verifiers' v1 ``traces.jsonl`` episodes.
"""

from __future__ import annotations

import math
from pathlib import Path

from .categories import category
from .io import json_lines, number, timestamp
from .model import Call, Problems, Step, TraceSet, Trajectory
from .verifiers_spans import names_of, spans_record

EXPECTED = (
    "expected a verifiers results.jsonl record with per-turn timing.model.spans (verifiers 0.3 on) "
    "or per-rollout generation_ms (2025-26)"
)


def layout(rec: dict) -> str:
    """Which layout a record is in: ``spans``, ``per-rollout``, ``untimed``, ``v1`` or ``other``."""
    timing = rec.get("timing")
    if isinstance(timing, dict):
        if isinstance(timing.get("model"), dict):
            return "spans"
        if "generation_ms" in timing:
            return "per-rollout"
        if isinstance(timing.get("agent"), dict):
            return "v1"
    if "generation_ms" in rec:
        return "per-rollout"
    if isinstance(rec.get("traces"), list):
        return "v1"
    if "completion" in rec and ("reward" in rec or "prompt" in rec):
        return "untimed"
    return "other"


REFUSED = {
    "untimed": (
        "no_timing",
        "a verifiers results.jsonl record written before verifiers timed rollouts (prompt, completion "
        "and reward, no generation_ms or timing): nothing to time it by; " + EXPECTED,
    ),
    "v1": (
        "not_format",
        "a verifiers v1 traces.jsonl episode (timing.agent, traces[]): not read; " + EXPECTED,
    ),
    "other": ("not_format", "not a verifiers rollout record (no timing, no generation_ms); " + EXPECTED),
}


def _per_rollout(path: Path, line: int, rec: dict, problems: Problems, tool_map, tool_latency):
    timing = rec.get("timing") if isinstance(rec.get("timing"), dict) else rec
    gen = number(timing.get("generation_ms")) / 1e3
    rid = f"{rec.get('example_id', rec.get('id', '?'))}@{path.name}:{line}"
    if math.isnan(gen) or gen < 0:
        problems.bad(
            "missing_latency" if math.isnan(gen) else "negative_latency",
            str(path),
            line,
            f"rollout {rid}: generation_ms is {timing.get('generation_ms')!r}; expected milliseconds >= 0",
        )
        return None
    comp = rec.get("completion")
    msgs = comp if isinstance(comp, list) else []
    turns = [m for m in msgs if isinstance(m, dict) and m.get("role") == "assistant"]
    names = [names_of(m) for m in turns] or [[]]  # a text completion: one turn, no call
    calls = sum(map(len, names))
    lat = 0.0 if tool_latency is None else min(tool_latency, gen / calls if calls else 0.0)
    llm = (gen - lat * calls) / len(names)
    steps = [
        Step(llm=llm, calls=[Call(n, category(n, override=tool_map), lat) for n in ns], tool=lat * len(ns))
        for ns in names
    ]
    score = number(timing.get("scoring_ms")) / 1e3
    start = timing.get("start_time")
    return Trajectory(
        rid,
        str(path),
        line,
        steps,
        timestamp(start) if isinstance(start, int | float) and start > 1e9 else None,
        reward=score if score >= 0 else math.nan,
        wall=gen,
    )


def read(
    paths: list[Path],
    problems: Problems,
    tool_map: dict[str, str] | None = None,
    tool_latency: float | None = None,
) -> TraceSet:
    out, per_rollout = [], 0
    for path in paths:
        refused: tuple[str, str, int, int] | None = None  # cause, message, first line, records
        for line, rec in json_lines(path, problems):
            kind = layout(rec)
            if kind in REFUSED:
                if refused is None:
                    refused = (*REFUSED[kind], line, 0)
                refused = (*refused[:3], refused[3] + 1)
                continue
            t = (
                spans_record(path, line, rec, problems, tool_map)
                if kind == "spans"
                else _per_rollout(path, line, rec, problems, tool_map, tool_latency)
            )
            per_rollout += kind == "per-rollout" and t is not None
            if t is not None:
                out.append(t)
        if refused is not None:  # once per file, counting its records
            cause, msg, line, n = refused
            problems.bad(cause, str(path), line, f"{msg} ({n} such record{'s' if n > 1 else ''})", count=n)
    notes = []
    if per_rollout:
        how = (
            f"each tool call {tool_latency:g} s (--tool-latency), the rest LLM time"
            if tool_latency is not None
            else "all of it LLM time, tool calls 0 s (give --tool-latency to take tool time out of it)"
        )
        notes.append(
            f"verifiers per-rollout layout ({per_rollout} rollouts): generation_ms holds model and tool "
            f"time together, spread equally over the rollout's turns: {how}"
        )
    return TraceSet("verifiers", [str(p) for p in paths], out, problems, notes=notes)
