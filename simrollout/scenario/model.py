"""The scenario: every section together, its cross-field checks and what a run resolves from it
(the fidelity, the engines, samples per task)."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveInt,
    PrivateAttr,
    field_validator,
    model_validator,
)

from .base import _Model
from .cluster import Arrivals, Cluster, Policy
from .route import training_route
from .substrate import (
    Substrate,
)
from .training import LinearTime, Training
from .workload import Workload


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
    # the trajectory engine draws exec overhead call by call, as the step engine does, instead of
    # each sum at once: the fidelity matrix compares the engines on the same numbers
    _overhead_per_call: bool = PrivateAttr(False)

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
