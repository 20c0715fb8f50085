"""Harbor's ATIF (Agent Trajectory Interchange Format, v1.x): one JSON document per trajectory
(a ``trajectory.json``, or one document per line of a JSONL file).

Fields taken: ``session_id`` (else ``trajectory_id``), ``agent.name``; ``steps[]``:
``timestamp``, ``source``, ``tool_calls[].function_name``, ``metrics.{prompt_tokens,
cached_tokens, completion_tokens}``, ``extra.{is_sidechain, agent_id}`` and a response id in
``extra`` (``message_id``, ``response_id``, ``request_id`` or ``requestId``);
``subagent_trajectories[]`` (v1.7, each read as a trajectory of its own).

As harnesses write it (docs/scenario.md, "atif"): timestamps set no order, so each chain's steps
are put in time order; subagent steps marked ``extra.is_sidechain`` are split off into a
trajectory per ``agent_id``, as the spec stores a subagent (its own trajectory, referenced from
the parent's step); agent steps that are blocks of one API response (same response id, or the
same metrics repeated, or, from Claude Code, a step with no metrics after one with them) are one
LLM call holding all their tool calls. Timing: :mod:`simrollout.traces.atif_timing`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .atif_timing import build
from .io import json_document, json_lines, number, timestamp
from .model import Problems, TraceSet

RESPONSE_ID = ("message_id", "response_id", "request_id", "requestId")


@dataclass
class _Step:
    time: float  # epoch s
    source: str
    names: list[str]
    tokens: tuple[float, float, float]  # prompt, cached, completion
    metrics: bool  # the step has a metrics object
    response: str | None


@dataclass
class Chain:
    """One trajectory's steps, in time order, one agent step per LLM call."""

    id: str
    file: str
    line: int
    steps: list[_Step]
    start: object = None

    @property
    def times(self) -> list[float]:
        return [s.time for s in self.steps]


@dataclass
class Counts:
    reordered: int = 0  # steps put in time order
    merged: int = 0  # agent steps folded into the LLM call of their API response
    split_off: int = 0  # sidechain steps moved to a subagent trajectory
    subagents: int = 0  # subagent trajectories (split off or embedded)


def _docs(paths: list[Path], problems: Problems):
    for path in paths:
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            for line, doc in json_lines(path, problems):
                yield path, line, doc
        else:
            doc = json_document(path, problems)
            if doc is not None:
                yield path, 0, doc


def _extra(st: dict) -> dict:
    return st.get("extra") if isinstance(st.get("extra"), dict) else {}


def _step(st: dict, t: float) -> _Step:
    calls = [c for c in st.get("tool_calls") or [] if isinstance(c, dict)]
    m = st.get("metrics")
    mm = m if isinstance(m, dict) else {}
    ex = _extra(st)
    rid = next((str(ex[k]) for k in RESPONSE_ID if ex.get(k)), None)
    return _Step(
        t,
        str(st.get("source")),
        [str(c.get("function_name") or "<unknown-tool>") for c in calls],
        tuple(number(mm.get(k)) for k in ("prompt_tokens", "cached_tokens", "completion_tokens")),
        isinstance(m, dict),
        rid,
    )


def _chains(path: Path, line: int, doc, problems: Problems, counts: Counts, depth: int = 0) -> list[Chain]:
    """The document's main chain, its sidechains and its embedded subagents, each timed and
    in time order; [] when refused-and-skipped."""
    file = str(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        problems.bad("not_format", file, line, "not an ATIF trajectory: no 'steps' array at the root")
        return []
    sid = str(doc.get("session_id") or doc.get("trajectory_id") or f"{path.name}:{line}")
    claude = str((doc.get("agent") or {}).get("name") if isinstance(doc.get("agent"), dict) else "")
    groups: dict[str, list[tuple[int, _Step]]] = {"": []}
    for k, st in enumerate(doc["steps"]):
        if not isinstance(st, dict):
            continue
        t = timestamp(st.get("timestamp"))
        if t is None:
            problems.bad(
                "missing_latency",
                file,
                line,
                f"trajectory '{sid}' steps[{k}] has no timestamp, so its LLM and tool time cannot be "
                "split (ATIF makes timestamps optional; timing needs them on every step)",
            )
            return []
        ex = _extra(st)
        key = f"sidechain:{ex.get('agent_id') or 'agent'}" if ex.get("is_sidechain") is True else ""
        groups.setdefault(key, []).append((k, _step(st, t.timestamp())))
    out = []
    for key, steps in groups.items():
        if key:
            counts.split_off += len(steps)
            counts.subagents += 1
        chain = _ordered(f"{sid}/{key}" if key else sid, file, line, steps, counts, claude == "claude-code")
        if chain is not None:
            out.append(chain)
    for sub in doc.get("subagent_trajectories") or []:
        if depth < 8:
            counts.subagents += 1
            for c in _chains(path, line, sub, problems, counts, depth + 1):
                c.id = f"{sid}/{c.id}" if not c.id.startswith(sid) else c.id
                out.append(c)
    if not any("agent" in (s.source for s in c.steps) for c in out):
        problems.bad("no_steps", file, line, f"trajectory '{sid}' has no agent step")
        return []
    return [c for c in out if any(s.source == "agent" for s in c.steps)]


def _ordered(cid: str, file: str, line: int, steps, counts: Counts, claude: bool) -> Chain | None:
    if not steps:
        return None
    ordered = sorted(steps, key=lambda ks: ks[1].time)  # stable: equal times keep the file's order
    counts.reordered += sum(a[0] != b[0] for a, b in zip(ordered, steps))
    merged: list[_Step] = []
    for _, s in ordered:
        prev = merged[-1] if merged else None
        both = prev is not None and s.source == "agent" and prev.source == "agent"
        if both and _same_response(prev, s, claude):
            prev.names += s.names
            prev.time = s.time  # the response ends with its last block
            if s.metrics and not math.isnan(s.tokens[0]):
                prev.tokens, prev.metrics = s.tokens, True
            if prev.response is None:
                prev.response = s.response
            counts.merged += 1
            continue
        merged.append(_Step(s.time, s.source, list(s.names), s.tokens, s.metrics, s.response))
    start = timestamp(merged[0].time)
    return Chain(cid, file, line, merged, start)


def _same_response(a: _Step, b: _Step, claude: bool) -> bool:
    """``b`` is another block of ``a``'s API response."""
    if a.response and b.response:
        return a.response == b.response
    if a.metrics and b.metrics and not math.isnan(a.tokens[0]):
        return all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a.tokens, b.tokens))
    return claude and a.metrics and not b.metrics  # Claude Code's converter: usage on the first block


def read(paths: list[Path], problems: Problems, tool_map: dict[str, str] | None = None) -> TraceSet:
    counts = Counts()
    chains = [c for p, line, doc in _docs(paths, problems) for c in _chains(p, line, doc, problems, counts)]
    ts = build(chains, paths, problems, tool_map)
    ts.adjusted = {
        "steps_reordered": counts.reordered,
        "steps_merged": counts.merged,
        "steps_split_off": counts.split_off,
        "subagent_trajectories": counts.subagents,
    }
    ts.notes.append(
        f"ATIF: {counts.reordered} steps put in time order; {counts.merged} agent steps merged into "
        f"the LLM call of their API response; {counts.split_off} subagent steps split off into "
        f"{counts.subagents} subagent trajectories"
    )
    return ts
