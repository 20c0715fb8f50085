"""The scenario: every section together, its cross-field checks and what a run resolves from it
(the engines, samples per task); the fidelity it runs at is the fidelity matrix's verdict
(:func:`simrollout.sim.route.fidelity_choice`)."""

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
from .substrate import (
    Substrate,
)
from .trainer import FlopsTime
from .training import LinearTime, Training
from .workload import Workload

# the substrate of a workload without sandboxes: nothing to create, run or tear down
NO_SANDBOX = {"name": "none", "cold_start": 0, "exec_overhead": 0, "teardown": 0}


class Scenario(_Model):
    version: Literal[1]
    name: str = "scenario"
    seed: NonNegativeInt = 0
    replications: PositiveInt = 1
    fidelity: Literal["auto", "step", "trajectory", "compiled"] = "auto"
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
    # and tool latency call by call (the matrix sets both; a comparison of the exec overhead sums
    # alone keeps the tools' numbers common to both runs)
    _tools_per_call: bool = PrivateAttr(False)

    @model_validator(mode="before")
    @classmethod
    def _sandboxless(cls, data):
        """No substrates and no tools: one sandbox-free substrate, ``none``, that costs no time."""
        if isinstance(data, dict) and "substrates" not in data:
            wl = data.get("workload")
            if isinstance(wl, dict) and not wl.get("tools") and not wl.get("replay"):
                data = {**data, "substrates": [NO_SANDBOX]}
        return data

    @property
    def sandboxless(self) -> bool:
        """The workload runs no sandbox (single-turn RL: math, code without tools)."""
        return [s.name for s in self.substrates] == [NO_SANDBOX["name"]] and not self.workload.tools

    @field_validator("substrates")
    @classmethod
    def _unique(cls, v):
        names = [s.name for s in v]
        if len(set(names)) != len(names):
            raise ValueError(f"substrate names must be unique, got {names}")
        return v

    def compiled_gaps(self) -> str | None:
        """What in this scenario the compiled engine (:mod:`simrollout.sim.compiled`) does not
        cover (the first thing found), else None."""
        pol, inf, tr = self.policy, self.cluster.inference, self.training
        checks = (
            (tr is not None and tr.dynamic_sampling is not None, "dynamic sampling in a training loop"),
            (tr is not None and tr.on_failure != "mask", f"on_failure '{tr and tr.on_failure}'"),
            (
                tr is not None
                and self.workload.tokens is not None
                and any(isinstance(s.contention.exec, dict) for s in self.substrates),
                "a measured exec contention curve in a training loop on serving engines",
            ),
            (pol.warm_pool > 0, "a warm pool"),
            (pol.reuse, "sandbox reuse"),
            (self.workload.images is not None, "task images"),
            (
                any(s.contention.shared or s.contention.creates == "in_order" for s in self.substrates),
                "shared creates and teardowns",
            ),  # fmt: skip
            (
                inf is not None and bool(inf.slowdown) and self.workload.tokens is None,
                "a loaded inference tier",
            ),
        )
        return next((why for hit, why in checks if hit), None)

    @model_validator(mode="after")
    def _compiled_covers(self):
        if self.fidelity == "compiled":
            why = self.compiled_gaps()
            if why is not None:
                raise ValueError(
                    f"fidelity 'compiled' does not cover {why} (docs/performance.md, the compiled "
                    "engine): use fidelity 'auto', 'trajectory' or 'step'"
                )
        return self

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
        if isinstance(tt, FlopsTime):
            tokens = self.workload.tokens is not None
            if tokens == (tt.tokens_per_turn is not None):
                raise ValueError(
                    "training.train_time kind 'flops' trains on tokens: a token workload counts them "
                    "(drop tokens_per_turn); with llm_time in seconds give tokens_per_turn (the tokens "
                    "trained per generated turn)"
                )
            if self.training.placement == "colocated" and self.cluster.inference is None:
                raise ValueError(
                    "training.train_time kind 'flops' with placement 'colocated' trains on the "
                    "engines' GPUs: give cluster.inference (engines, and engine.gpus per engine)"
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
        if self.fidelity == "trajectory" and tr.at_sync == "interrupt":
            raise ValueError(
                "fidelity 'trajectory' is not available with training.at_sync 'interrupt': "
                "the trajectory engine runs a turn to its end; use fidelity: auto or step"
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
