"""The versioned scenario file (YAML, ``version: 1``) and its schema.

Every field is documented in docs/scenario.md. Load with :func:`load_scenario`; errors come back
as one :class:`~simrollout.errors.InputError` naming the file, the field path and the line.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ClassVar, Literal, Union, get_args

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from .contention import Curve
from .distributions import Constant, Dist, no_bools, number_is_constant
from .errors import InputError, explain, load_yaml


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data):
        return no_bools(data, cls.model_fields)


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
    format: Literal["tracelab", "atif", "verifiers", "swe-agent", "mini-swe-agent"]
    # auto: the trace's trajectories in order, then whole ones drawn with replacement; always:
    # every one drawn with replacement (replications differ); never: refuse a longer run
    resample: Literal["auto", "always", "never"] = "auto"
    llm: Literal["time", "tokens"] = "time"
    overlap: Literal["trace", "max", "sum"] = "trace"  # a step's overlapping tool calls
    on_bad: Literal["skip", "refuse"] = "refuse"
    tool_map: dict[str, Literal["shell", "read", "edit", "search", "test", "web", "other"]] = {}
    draw: tuple[Literal["llm_time", "setup", "reward"], ...] = ()  # set beside replay: drawn, not replayed
    size: PositiveInt | None = None  # trajectories in the trace (set when the trace is read)


def _non_negative(d: Dist, what: str) -> Dist:
    if float(d.ppf(1e-9)) < 0:
        raise ValueError(f"'{what}' must be a count of tokens >= 0, got a distribution below 0")
    return d


class Tokens(_Model):
    """A workload in tokens (served by ``cluster.inference`` engines): the context a trajectory
    starts with, the tokens appended before each turn (the previous tool output, the task on the
    first) and the tokens each turn generates. The context grows by both, up to ``max_context``
    (the harness compacts or truncates beyond it)."""

    prompt: Dist
    appended: Dist
    output: Dist
    max_context: PositiveInt | None = None

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
    tools: dict[str, Tool] = Field(min_length=1)
    setup: Dist | None = None
    reward: Dist | None = None
    images: Images | None = None
    replay: Replay | None = None  # set by ``workload: {replay: ...}`` (simrollout.traces.scenario_io)

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


class Failures(_Model):
    """Probability that one operation fails: a create, a tool call (sandbox lost), a teardown.

    Per phase either a probability, or a measured curve ``{operations in flight: probability}``
    (piecewise linear between the points, flat outside them).
    """

    create: FailureRate = 0.0
    exec: FailureRate = 0.0
    teardown: FailureRate = 0.0

    def rate(self, phase: str) -> Callable[[float], float]:
        spec = getattr(self, phase)
        if not isinstance(spec, dict):
            return lambda n, p=float(spec): p
        xs, ys = zip(*sorted((float(k), float(v)) for k, v in spec.items()))
        return lambda n: float(np.interp(n, xs, ys))


PHASES = ("create", "exec", "teardown")  # the lifecycle operations that contend
Phase = Literal["create", "exec", "teardown"]
Slowdown = NonNegativeFloat | dict[Annotated[float, Field(ge=1)], PositiveFloat]


class Contention(_Model):
    """How a host's operations in flight (``n``, itself included) slow each operation.

    Per phase either a slope ``s`` (latency x (1 + s (n - 1))) or a measured curve
    ``{n: multiplier}``: monotone through the points, a fitted saturation law below the first and
    beyond the last (see :mod:`simrollout.contention`).
    """

    create: Slowdown = 0.0
    exec: Slowdown = 0.0
    teardown: Slowdown = 0.0
    # where operations in flight slow each other: on one host (a Docker daemon), across the whole
    # service (a shared control plane), or per rollout client (cluster.clients; what a probe from
    # one client measures of a hosted service)
    scope: Literal["host", "service", "client"] = "host"
    # how much one operation of another phase in flight counts towards a phase's load, relative
    # to one of its own (a create slows creates more than an exec does); missing weights are 1
    weights: dict[Phase, dict[Phase, NonNegativeFloat]] | None = None
    # how creates and teardowns feel the load: false, each takes base x m(n at its start); true,
    # they share the domain (processor sharing): each progresses at 1 / m(n now), re-read whenever
    # an operation there starts or ends, so a create that a burst overtakes slows down and one
    # left alone speeds up (execs keep the multiplier at their start). ``calibrate`` fits such
    # curves on the load averaged over each operation's life.
    shared: bool = False

    @model_validator(mode="after")
    def _others_only(self):
        own = [ph for ph, w in (self.weights or {}).items() if ph in w]
        if own:
            raise ValueError(
                f"weights of {own}: a phase's own operations count one; weigh only the other phases"
            )
        return self

    def factor(self, phase: str):
        """The multiplier as a function of operations in flight."""
        return slowdown(getattr(self, phase))

    def weight_rows(self) -> dict[str, tuple[float, float, float]] | None:
        """Per phase, the weights of (create, exec, teardown) operations in its load; None when
        every operation counts one."""
        if not self.weights:
            return None
        rows = {}
        for ph in PHASES:
            got = self.weights.get(ph, {})
            rows[ph] = tuple(1.0 if q == ph else float(got.get(q, 1.0)) for q in PHASES)
        return rows


def slowdown(spec) -> Callable[[float], float]:
    """A slope is the straight line ``1 + s (n - 1)``; measured points are a monotone, bounded
    :class:`simrollout.contention.Curve`."""
    if not isinstance(spec, dict):
        return lambda n, s=float(spec): 1.0 + s * (n - 1.0) if n > 1.0 else 1.0
    return _curve(tuple(sorted((float(k), float(v)) for k, v in spec.items())))


@functools.lru_cache(maxsize=512)
def _curve(points: tuple[tuple[float, float], ...]) -> Curve:
    """One :class:`Curve` per set of points (its law is fitted once, however many cells use it)."""
    return Curve(dict(points))


class Capacity(_Model):
    """Concurrent sandboxes: ``quota`` (hosted service) or ``hosts`` x ``sandboxes_per_host``."""

    hosts: PositiveInt = 1
    sandboxes_per_host: PositiveInt | None = None
    quota: PositiveInt | None = None

    @model_validator(mode="after")
    def _one_form(self):
        if self.quota is not None and (self.sandboxes_per_host is not None or self.hosts != 1):
            raise ValueError("give either quota, or hosts and sandboxes_per_host, not both")
        return self

    @property
    def per_host(self) -> int | None:
        return self.quota if self.quota is not None else self.sandboxes_per_host

    @property
    def total(self) -> int | None:
        return None if self.per_host is None else self.hosts * self.per_host


class Billing(_Model):
    price_per_second: NonNegativeFloat = 0.0
    minimum_seconds: NonNegativeFloat = 0.0


class ImageCache(_Model):
    """Per host: task images pulled at ``pull_mb_s`` (pulls on a host queue on its link) into a
    cache of ``cache_gb`` (least recently used image evicted first)."""

    pull_mb_s: PositiveFloat
    cache_gb: PositiveFloat


class Substrate(_Model):
    name: str = Field(min_length=1)
    profile: str | None = None
    cold_start: Dist
    warm_start: Dist = Constant(value=0.0)
    exec_overhead: Dist
    teardown: Dist
    failures: Failures = Failures()
    create_rate: PositiveFloat | None = None
    capacity: Capacity = Capacity()
    contention: Contention = Contention()
    billing: Billing = Billing()
    image_cache: ImageCache | None = None  # none: task images are always ready (e.g. prebuilt snapshots)
    reset: Dist | None = None  # reusing a sandbox for the next sample of its task (policy.reuse)
    # per tool category (or tool name): tool latency x factor on this substrate (``probe`` measures it)
    tool_speed: dict[str, PositiveFloat] = {}

    def speed_of(self, names: list[str]) -> np.ndarray | None:
        """Factors for tool categories (or names) ``names``; None when every one is 1."""
        f = np.array([float(self.tool_speed.get(n, self.tool_speed.get("default", 1.0))) for n in names])
        return None if np.all(f == 1.0) else f


class IterationTime(_Model):
    """Seconds per engine iteration, linear in the batch's work (a Vidur-style predictor):
    ``base + per_prefill_token x P + per_prefill_attention x A + per_decode x D +
    per_context_token x C`` for P prefill tokens, A pairs of a prefill token and a token it
    attends to (a chunk of ``t`` tokens after ``k`` of its request's context: ``t x (k + t/2)``,
    as Vidur's prefill attention grows with the chunk's square), D decoding requests and C
    tokens of context those decodes attend to."""

    base: PositiveFloat
    per_prefill_token: NonNegativeFloat
    per_prefill_attention: NonNegativeFloat = 0.0
    per_decode: NonNegativeFloat = 0.0
    per_context_token: NonNegativeFloat = 0.0

    def __call__(self, prefill: float, decodes: float, context: float, attention: float = 0.0) -> float:
        return (self.base + self.per_prefill_token * prefill + self.per_prefill_attention * attention
                + self.per_decode * decodes + self.per_context_token * context)  # fmt: skip

    def prefill_seconds(self, tokens, prefix=0):
        """The prefill part of iterations over ``tokens`` tokens after ``prefix`` of context (in
        any chunks: the causal pairs add up to ``tokens x (prefix + tokens / 2)``)."""
        return self.per_prefill_token * tokens + self.per_prefill_attention * tokens * (prefix + tokens / 2)


class Engine(_Model):
    """One serving engine (vLLM, SGLang, llama.cpp's server): continuous batching with chunked
    prefill, a KV cache of ``kv_capacity_tokens`` and at most ``max_running`` requests."""

    iteration: IterationTime
    kv_capacity_tokens: PositiveInt
    max_batch_tokens: PositiveInt = 8192  # prefill + decode tokens per iteration
    max_running: PositiveInt = 256
    gpus: PositiveInt = 1  # GPUs per engine (tensor parallel), for GPU-hours
    overhead: NonNegativeFloat = 0.0  # s per request outside the iterations (HTTP, tokenizer)


class Inference(_Model):
    """Engines serving the policy. With a time workload (``llm_time``) generation slows by
    ``slowdown`` per extra running request; with a token workload each engine is the ``engine``
    model (continuous batching, KV cache, prefix cache; see docs/model.md)."""

    engines: PositiveInt
    slowdown: NonNegativeFloat = 0.0
    price_per_hour: NonNegativeFloat = 0.0  # per engine
    profile: str | None = None  # an engine profile under calibration/engines/
    engine: Engine | None = None
    routing: Literal["sticky", "least_loaded"] = "sticky"
    prefix_cache: bool = True


class Cluster(_Model):
    concurrency: PositiveInt | list[PositiveInt]
    inference: Inference | None = None
    clients: PositiveInt = 1  # rollout clients issuing sandbox operations (contention.scope client)

    @field_validator("concurrency")
    @classmethod
    def _non_empty(cls, v):
        if isinstance(v, list) and not v:
            raise ValueError("give at least one concurrency level")
        return v

    @property
    def levels(self) -> list[int]:
        return list(self.concurrency) if isinstance(self.concurrency, list) else [self.concurrency]


class Policy(_Model):
    mode: Literal["async", "sync"] = "async"
    batch_size: PositiveInt | None = None
    timeout: PositiveFloat | None = None
    retries: NonNegativeInt = 0
    retry_backoff: NonNegativeFloat = 0.0
    warm_pool: NonNegativeInt = 0
    reuse: bool = False  # a finished sandbox serves the next sample of its task after substrate.reset

    @model_validator(mode="after")
    def _batch(self):
        if self.mode == "sync" and self.batch_size is None:
            raise ValueError("mode 'sync' needs batch_size")
        return self


class Arrivals(_Model):
    kind: Literal["batch", "poisson"] = "batch"
    rate: PositiveFloat | None = None

    @model_validator(mode="after")
    def _rate(self):
        if self.kind == "poisson" and self.rate is None:
            raise ValueError("kind 'poisson' needs rate (trajectories per second)")
        return self


class LinearTime(_Model):
    """Train time as a linear model of the step's work: ``intercept + per_step x`` the generated
    steps (turns) of the samples it trains on ``+ per_token x`` their tokens (a token workload:
    each sample's prompt plus the appended and output tokens of its generated turns)."""

    kind: Literal["linear"]
    intercept: NonNegativeFloat = 0.0
    per_step: NonNegativeFloat = 0.0
    per_token: NonNegativeFloat = 0.0

    def mean(self) -> float:
        return self.intercept


# a distribution, or the linear model: one discriminated union, so errors name one kind
TrainTime = Annotated[
    Union[(LinearTime, *get_args(get_args(Dist)[0]))],  # noqa: UP007
    Field(discriminator="kind"),
    BeforeValidator(number_is_constant),
]


class PassRate(_Model):
    """DAPO dynamic sampling: each prompt's pass rate ~ Beta(alpha, beta); a group whose rewards
    are all equal carries no signal and is filtered out."""

    alpha: PositiveFloat
    beta: PositiveFloat

    def keep_rate(self, group: int) -> float:
        """Expected share of groups of ``group`` samples kept: 1 - E[p^G] - E[(1-p)^G]."""
        from scipy.special import betaln

        a, b = self.alpha, self.beta
        same = np.exp(betaln(a + group, b) - betaln(a, b)) + np.exp(betaln(a, b + group) - betaln(a, b))
        return float(1.0 - same)


class Trainer(_Model):
    """Separate trainer GPUs (``placement: disaggregated``)."""

    gpus: PositiveInt
    price_per_hour: NonNegativeFloat = 0.0


class Training(_Model):
    """The RL loop: GRPO groups, training steps, weight sync and bounded staleness (docs/model.md)."""

    prompts_per_step: PositiveInt  # B
    samples_per_prompt: PositiveInt = 8  # G
    steps: PositiveInt
    mode: Literal["sync", "one_step_off", "async"] = "sync"
    max_staleness: NonNegativeInt = 1  # async: versions a sample may lag the policy it trains
    partial_rollouts: bool = True  # on a weight update, in-flight trajectories go on (else discarded)
    train_time: TrainTime
    weight_sync_time: Dist = Constant(value=0.0)
    placement: Literal["colocated", "disaggregated"] = "colocated"
    trainer: Trainer | None = None
    # disaggregated: a turn waits while the new weights load into the engines it runs on
    pause_engines_on_sync: bool = True
    task_spread: NonNegativeFloat = 0.0  # sigma of a per-prompt duration factor (lognormal, mean 1)
    over_sampling: NonNegativeFloat = 0.0  # start B x (1 + f) groups, train on the first B ready
    leftover: Literal["cancel", "carry"] = "cancel"
    dynamic_sampling: PassRate | None = None
    on_failure: Literal["mask", "drop_group", "retry"] = "mask"
    retries: NonNegativeInt = 2  # on_failure: retry, per member

    @model_validator(mode="after")
    def _consistent(self):
        if self.mode != "sync" and self.placement == "colocated":
            raise ValueError(
                f"mode '{self.mode}' overlaps generation with training, which needs placement "
                "'disaggregated' (separate trainer GPUs); colocated engines cannot generate while "
                "they train"
            )
        if self.placement == "disaggregated" and self.trainer is None:
            raise ValueError("placement 'disaggregated' needs trainer: {gpus: N, price_per_hour: P}")
        if self.mode == "async" and self.over_sampling:
            raise ValueError(
                "over_sampling applies to modes sync and one_step_off; async already trains on the "
                "first groups ready"
            )
        if self.dynamic_sampling and self.samples_per_prompt < 2:
            raise ValueError("dynamic_sampling needs samples_per_prompt of at least 2 (a group to compare)")
        return self

    @property
    def groups_per_step(self) -> int:
        """Groups started per step in sync and one_step_off modes: B x (1 + over_sampling)."""
        return math.ceil(self.prompts_per_step * (1.0 + self.over_sampling) - 1e-9)

    def budget(self) -> int:
        """Trajectories the run may start: every step's groups, over-sampled and refilled for the
        expected filter and failures, with a margin (the run says so if it runs out)."""
        keep = self.dynamic_sampling.keep_rate(self.samples_per_prompt) if self.dynamic_sampling else 1.0
        groups = self.steps * (self.groups_per_step + self.prompts_per_step * (1.0 / max(keep, 1e-3) - 1.0))
        if self.mode == "async":
            groups += self.prompts_per_step * (self.max_staleness + 1)
        extra = 1.0 + (0.5 if self.on_failure != "mask" or not self.partial_rollouts else 0.0)
        return int(math.ceil((groups * 1.25 * extra + 4 * self.prompts_per_step) * self.samples_per_prompt))


class Scenario(_Model):
    version: Literal[1]
    name: str = "scenario"
    seed: NonNegativeInt = 0
    replications: PositiveInt = 1
    fidelity: Literal["auto", "step", "trajectory"] = "auto"
    workload: Workload
    substrates: list[Substrate] = Field(min_length=1)
    cluster: Cluster
    policy: Policy = Policy()
    arrivals: Arrivals = Arrivals()
    training: Training | None = None
    _source: str = PrivateAttr("<scenario>")  # the file it came from, for error messages

    @field_validator("substrates")
    @classmethod
    def _unique(cls, v):
        names = [s.name for s in v]
        if len(set(names)) != len(names):
            raise ValueError(f"substrate names must be unique, got {names}")
        return v

    @model_validator(mode="after")
    def _tokens_need_an_engine(self):
        tok, inf = self.workload.tokens, self.cluster.inference
        if tok is None:
            if inf is not None and inf.engine is not None:
                raise ValueError("cluster.inference.engine serves a token workload: give workload.tokens")
            return self
        if inf is None or inf.engine is None:
            raise ValueError(
                "workload.tokens needs cluster.inference with an engine (a 'profile' under "
                "calibration/engines/ or an inline 'engine')"
            )
        kv, out = inf.engine.kv_capacity_tokens, float(tok.output.ppf(0.99))
        top = tok.max_context
        if top is None:
            top = float(tok.prompt.ppf(0.99)) + float(self.workload.steps.ppf(0.99)) * (
                float(tok.appended.mean()) + float(tok.output.mean())
            )
        if top + out > kv:
            need = top + out
            shown = f"{need:,.0f}" if need < 1e15 else f"{need:.3g}"
            raise ValueError(
                f"workload.tokens: the KV cache of one engine ({kv:,} tokens) is smaller than one "
                f"request's context (about {shown} tokens at the 99th percentile"
                + ("" if tok.max_context else ", as the context grows over the turns")
                + "); raise cluster.inference.engine.kv_capacity_tokens (more GPUs per engine) or set "
                "workload.tokens.max_context"
            )
        return self

    @model_validator(mode="after")
    def _train_tokens_need_tokens(self):
        tt = self.training.train_time if self.training else None
        if isinstance(tt, LinearTime) and tt.per_token and self.workload.tokens is None:
            raise ValueError(
                "training.train_time.per_token prices the tokens trained on, which needs a token "
                "workload (workload.tokens); with llm_time in seconds use per_step"
            )
        return self

    @model_validator(mode="after")
    def _reuse_needs_reset(self):
        pol = self.policy
        if pol.reuse:
            if pol.warm_pool:
                raise ValueError("policy.reuse cannot combine with policy.warm_pool; drop one of them")
            subs = enumerate(self.substrates)
            missing = [f"substrates.{i}.reset ('{s.name}')" for i, s in subs if s.reset is None]
            if missing:
                raise ValueError(
                    f"policy.reuse needs each substrate's 'reset' (seconds to reset a sandbox for the "
                    f"next sample of its task); missing: {', '.join(missing)}"
                )
        return self

    @model_validator(mode="after")
    def _replay_long_enough(self):
        rp = self.workload.replay
        if rp is not None and rp.resample == "never" and rp.size and self.trajectories > rp.size:
            raise ValueError(
                f"workload.replay holds {rp.size:,} trajectories and the run needs {self.trajectories:,}, "
                "with resample 'never'; set resample 'auto' (whole trajectories drawn again beyond the "
                "trace) or run fewer trajectories"
            )
        return self

    def samples_per_task(self) -> int:
        """Trajectories in a row that run one task (its image; the group a sandbox is reused in)."""
        img = self.workload.images
        if img is not None and img.samples is not None:
            return img.samples
        return self.training.samples_per_prompt if self.training is not None else 1

    @model_validator(mode="after")
    def _training_fits(self):
        tr, pol = self.training, self.policy
        if tr is None:
            if self.workload.trajectories is None:
                raise ValueError("workload.trajectories is required (or give a training section)")
            return self
        if pol.mode == "sync" and pol.batch_size != tr.prompts_per_step * tr.samples_per_prompt:
            raise ValueError(
                f"policy.mode 'sync' with batch_size {pol.batch_size} conflicts with training "
                f"({tr.prompts_per_step} prompts x {tr.samples_per_prompt} samples = "
                f"{tr.prompts_per_step * tr.samples_per_prompt} per step); the training section sets "
                "the batches: drop policy.mode and batch_size"
            )
        if self.arrivals.kind != "batch":
            raise ValueError("arrivals 'poisson' cannot combine with training: the loop admits trajectories")
        if self.fidelity == "trajectory" and self.workload.tokens is not None:
            raise ValueError(
                "fidelity 'trajectory' is not available with training on a token workload: the loop "
                "runs serving engines on the step engine (the fidelity matrix has no such rows)"
            )
        return self

    @property
    def trajectories(self) -> int:
        """Trajectories the run may start: ``workload.trajectories``, or with ``training:`` the
        loop's budget (capped by ``workload.trajectories`` when given)."""
        if self.training is None:
            return int(self.workload.trajectories)
        n = self.training.budget()
        return min(n, self.workload.trajectories) if self.workload.trajectories else n

    def resolved_fidelity(self) -> str:
        return self.fidelity_choice()[0]

    def fidelity_choice(self) -> tuple[str, str]:
        """The fidelity that runs and why. ``auto`` simulates every step when the run is small (at
        most 200k steps), else uses the trajectory engine, which the fidelity matrix
        (docs/fidelity.md) finds within tolerance of the step engine in every mode."""
        if self.fidelity != "auto":
            return self.fidelity, "set in the scenario"
        steps = self.trajectories * self.workload.steps.mean()
        if self.training is not None:
            from .fidelity import training_route

            return training_route(self, steps)
        if steps <= 2e5:
            return "step", f"auto: {steps:,.0f} steps, small enough to simulate every step"
        inf = self.cluster.inference
        if self.workload.tokens is not None:
            if self.policy.mode == "sync":  # the fidelity matrix: p50 +8-9% in sync batches
                return "step", "auto: sync batches on serving engines need the step engine"
            return (
                "trajectory",
                f"auto: {steps:,.0f} steps; serving engines from a step-fidelity pilot, within the "
                "fidelity matrix's serving tolerances",
            )
        if self.policy.mode == "sync" and inf is not None and inf.slowdown > 0:
            # the fidelity matrix: sync batches on a loaded tier miss p99 by 3.5% and gain < 2x
            return "step", "auto: sync batches on a loaded inference tier need the step engine"
        return (
            "trajectory",
            f"auto: {steps:,.0f} steps; the trajectory engine holds in every mode of the matrix",
        )


# ---------------------------------------------------------------- loading


class _ProfileFile(_Model):
    model_config = ConfigDict(extra="allow", frozen=True)
    version: Literal[1]
    name: str
    provenance: dict = {}


class ProfileFile(_ProfileFile):
    """A substrate profile under calibration/profiles/ (written by ``simrollout calibrate``)."""

    substrate: dict
    section: ClassVar[str] = "substrate"

    def check(self) -> None:
        Substrate.model_validate({"name": self.name, **self.substrate})


class EngineProfileFile(_ProfileFile):
    """An engine profile under calibration/engines/ (published figures or ``simrollout calibrate``)."""

    engine: dict
    section: ClassVar[str] = "engine"

    def check(self) -> None:
        Engine.model_validate(self.engine)


def _resolve(ref: str, scenario: Path, kind: str = "substrate", where: str = "profile") -> Path:
    for cand in (scenario.parent / ref, Path(ref)):
        try:
            if ref and cand.is_file():
                return cand
        except OSError:  # a name no file system holds (too long, a NUL byte)
            break
    shown = ref if len(ref) <= 80 else ref[:77] + "..."
    raise InputError(
        f"{scenario}: field '{where}': {kind} profile '{shown}' not found (looked relative to the "
        "scenario file and to the current directory)."
    )


def _load(path: Path, kind: type[_ProfileFile]):
    data, node = load_yaml(path)
    try:
        prof = kind.model_validate(data)
    except ValidationError as exc:
        raise explain(exc, path, node) from None
    try:
        prof.check()  # its fields now, so errors name the profile file
    except ValidationError as exc:
        raise explain(exc, path, node, within=(prof.section,)) from None
    except (TypeError, ValueError, ArithmeticError) as exc:  # a value of the wrong shape in a validator
        raise InputError(f"{path}: invalid {prof.section} ({exc}); check each field's type.") from None
    return prof


def load_profile(path: Path) -> ProfileFile:
    return _load(path, ProfileFile)


def load_engine_profile(path: Path) -> EngineProfileFile:
    return _load(path, EngineProfileFile)


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        # recurse into field groups (string keys), not into distributions or measured curves
        if (
            isinstance(v, dict)
            and isinstance(out.get(k), dict)
            and "kind" not in v
            and all(isinstance(x, str) for x in v)
        ):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def scenario_from_dict(data, path: str | Path = "<scenario>", node=None) -> Scenario:
    """Validate a scenario mapping; substrate ``profile`` paths resolve relative to ``path``."""
    path = Path(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of scenario fields at the top level.")
    subs = data.get("substrates")
    if subs is not None and not isinstance(subs, list):
        raise InputError(f"{path}: field 'substrates' must be a list of substrates, got {subs!r}.")
    data = copy.deepcopy(data)
    wl = data.get("workload")
    if isinstance(wl, dict) and ("import" in wl or ("replay" in wl and not isinstance(wl["replay"], dict))):
        from .traces.scenario_io import expand_workload

        data["workload"] = expand_workload(data["workload"], path, data.get("training") is not None)
    for i, sub in enumerate(data.get("substrates") or []):
        if isinstance(sub, dict) and isinstance(sub.get("profile"), str):
            prof = load_profile(_resolve(sub["profile"], path, where=f"substrates.{i}.profile"))
            data["substrates"][i] = {"name": prof.name, **_merge(prof.substrate, sub)}
    inf = (data.get("cluster") or {}).get("inference") if isinstance(data.get("cluster"), dict) else None
    if isinstance(inf, dict) and isinstance(inf.get("profile"), str):
        prof = load_engine_profile(_resolve(inf["profile"], path, "engine", "cluster.inference.profile"))
        inf["engine"] = _merge(prof.engine, inf.get("engine") or {})
    try:
        scn = Scenario.model_validate(data)
    except ValidationError as exc:
        raise explain(exc, path, node) from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError) as exc:
        # a value of the wrong shape that reached a validator's arithmetic
        raise InputError(
            f"{path}: invalid input ({exc}); check each field's type against docs/scenario.md."
        ) from None
    scn._source = str(path)
    return scn


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    data, node = load_yaml(path)
    return scenario_from_dict(data, path, node)
