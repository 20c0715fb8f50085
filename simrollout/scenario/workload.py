"""The ``workload`` section: steps, tools, LLM time, a replayed trace, tokens and task images."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from ..distributions import Constant, Dist
from ..traces.formats import FORMATS
from .base import _Model, _non_negative

TOOL_CATEGORIES = ("shell", "read", "edit", "search", "test", "web", "other")


class Tool(_Model):
    """One tool category: its share of calls and its latency. ``category`` (default: the tool's
    name when it is one of :data:`TOOL_CATEGORIES`) picks the substrate's ``tool_speed`` factor."""

    weight: PositiveFloat
    latency: Dist
    category: Literal["shell", "read", "edit", "search", "test", "web", "other"] | None = None


class Replay(_Model):
    """A trace replayed (``workload: {replay: PATH, format: FORMAT}``): its trajectories' steps,
    tool calls and latencies, and LLM times (``llm: time``) or tokens (``llm: tokens``)."""

    path: str = Field(min_length=1)
    format: Literal[FORMATS]  # type: ignore[valid-type]
    # auto: the trace's trajectories in order, then whole ones drawn with replacement; always:
    # every one drawn with replacement (replications differ); never: refuse a longer run
    resample: Literal["auto", "always", "never"] = "auto"
    llm: Literal["time", "tokens"] = "time"
    overlap: Literal["trace", "max", "sum"] = "trace"  # a step's overlapping tool calls
    on_bad: Literal["skip", "refuse"] = "refuse"
    tool_map: dict[str, Literal["shell", "read", "edit", "search", "test", "web", "other"]] = {}
    draw: tuple[Literal["llm_time", "setup", "reward"], ...] = ()  # set beside replay: drawn, not replayed
    size: PositiveInt | None = None  # trajectories in the trace (set when the trace is read)


class Tokens(_Model):
    """A workload in tokens (served by ``cluster.inference`` engines): the context a trajectory
    starts with, the tokens appended before each turn (the previous tool output, the task on the
    first) and the tokens each turn generates. The context grows by both, up to ``max_context``
    (the harness compacts or truncates beyond it)."""

    prompt: Dist
    appended: Dist
    output: Dist
    max_context: PositiveInt | None = None
    max_tokens: PositiveInt | None = None  # the sampler's cap on a turn's output (truncated beyond)

    @model_validator(mode="after")
    def _counts(self):
        for f in ("prompt", "appended", "output"):
            _non_negative(getattr(self, f), f)
        if float(self.output.mean()) < 1:
            raise ValueError("'output' must be at least 1 token on average")
        return self


class Images(_Model):
    """Task images: one per task (SWE-bench-style: one image per repository snapshot). Trajectory
    ``i`` runs task ``(i // samples) % count``: the ``samples`` of a task (a GRPO group) in a row."""

    count: PositiveInt
    size_gb: Dist  # bytes a host transfers to hold one image (compressed layers), drawn per image
    samples: PositiveInt | None = None  # per task; default training.samples_per_prompt, else 1


class Workload(_Model):
    trajectories: PositiveInt | None = None  # with ``training:``, a cap (else it follows from it)
    steps: Dist
    llm_time: Dist | None = None  # seconds per turn; or ``tokens`` served by engines
    tokens: Tokens | None = None
    calls_per_step: Dist = Constant(value=1)
    tools: dict[str, Tool] = {}  # none: a single-turn or tool-free workload (calls_per_step 0)
    setup: Dist | None = None
    reward: Dist | None = None
    images: Images | None = None
    replay: Replay | None = None  # set by ``workload: {replay: ...}`` (simrollout.scenario.workload_files)

    @model_validator(mode="before")
    @classmethod
    def _no_tools_no_calls(cls, data):
        if isinstance(data, dict) and not data.get("tools") and "calls_per_step" not in data:
            data = {**data, "calls_per_step": 0}
        return data

    @model_validator(mode="after")
    def _calls_need_tools(self):
        if not self.tools and self.replay is None and float(self.calls_per_step.mean()) > 0:
            raise ValueError(
                "calls_per_step is above 0 but no tools are given: give tools (their share of "
                "calls and latency) or set calls_per_step: 0 for a workload without tool calls"
            )
        return self

    @model_validator(mode="after")
    def _one_llm_model(self):
        if (self.llm_time is None) == (self.tokens is None):
            raise ValueError(
                "give either 'llm_time' (seconds per turn) or 'tokens' (a token workload served by "
                "cluster.inference's engine), not both and not neither"
            )
        return self

    @model_validator(mode="after")
    def _at_least_one_step(self):
        if self.steps.mean() < 1:
            raise ValueError(f"'steps' must be at least 1 on average, got a mean of {self.steps.mean():g}")
        return self

    max_turns: PositiveInt | None = None  # the agent harness stops a trajectory after this many steps
    tool_timeout: PositiveFloat | None = None  # a tool call over it returns an error, the agent goes on


Chance = Annotated[float, Field(ge=0.0, le=1.0)]
FailureRate = Chance | dict[Annotated[float, Field(ge=1)], Chance]
