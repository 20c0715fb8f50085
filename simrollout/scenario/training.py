"""The ``training`` section: the RL loop's trainer, pass rate and time models."""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union, get_args

import numpy as np
from pydantic import (
    BeforeValidator,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    model_serializer,
    model_validator,
)

from ..distributions import Constant, Dist, number_is_constant
from .base import _Model
from .presets import apply_preset
from .trainer import FlopsTime, ModelSize, Trainer, TransferTime


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


# a distribution, the linear model or the FLOPs model: one discriminated union, so errors name one kind
TrainTime = Annotated[
    Union[(LinearTime, FlopsTime, *get_args(get_args(Dist)[0]))],  # noqa: UP007
    Field(discriminator="kind"),
    BeforeValidator(number_is_constant),
]
# a distribution, or the model's bytes over a bandwidth
SyncTime = Annotated[
    Union[(TransferTime, *get_args(get_args(Dist)[0]))],  # noqa: UP007
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


class Training(_Model):
    """The RL loop: GRPO groups, training steps, weight sync and bounded staleness (docs/model.md)."""

    prompts_per_step: PositiveInt  # B
    samples_per_prompt: PositiveInt = 8  # G
    steps: PositiveInt
    mode: Literal["sync", "one_step_off", "async"] = "sync"
    max_staleness: NonNegativeInt = 1  # async: versions a sample may lag the policy it trains
    staleness_fraction: NonNegativeFloat | None = None  # verl: stale samples as a share of a version's
    stale_samples: Literal["discard", "keep"] | None = None  # beyond the bound; default per form
    partial_rollouts: bool = True  # on a weight update, in-flight trajectories go on (else discarded)
    # at a weight sync, LLM requests still generating finish under the old weights, or are
    # interrupted and resumed under the new ones (verl partial_rollout, AReaL, SkyRL)
    at_sync: Literal["finish", "interrupt"] = "finish"
    sync_every: PositiveInt = 1  # training steps per weight sync (verl's trigger_parameter_sync_step)
    mini_batch: PositiveInt | None = None  # groups per streamed update (default: the step's B)
    model: ModelSize | None = None
    train_time: TrainTime
    weight_sync_time: SyncTime = Constant(value=0.0)
    # s per step on the trainer's path outside the update and the sync (reward, advantages, checkpoints)
    critical_path: NonNegativeFloat = 0.0
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
    # ``training: {import: PROFILE}``: the profile's path and the section's own fields beside it
    _import: tuple[str, dict] | None = PrivateAttr(None)

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data):
        return apply_preset(data)

    @model_serializer(mode="wrap")
    def _one_bound(self, handler):
        """A dump gives the staleness bound one way, as the section was given, so it re-validates
        (bands and sweeps re-validate dumped sections): no max_staleness beside staleness_fraction."""
        out = handler(self)
        if self.staleness_fraction is not None and isinstance(out, dict):
            out.pop("max_staleness", None)
        return out

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

    @model_validator(mode="after")
    def _physics(self):
        fields = ("train_time", "weight_sync_time")
        need = [f for f in fields if getattr(self, f).kind in ("flops", "transfer")]
        if need and self.model is None:
            raise ValueError(
                f"{need[0]} kind '{getattr(self, need[0]).kind}' reads the model's size: give "
                "model: {params_b: N} (billions of parameters; bytes_per_param defaults to 2, bf16)"
            )
        return self

    @model_validator(mode="after")
    def _streaming(self):
        m = self.mini_batch
        if m is not None and self.prompts_per_step % m:
            raise ValueError(
                f"mini_batch {m} must divide prompts_per_step {self.prompts_per_step}: a step trains "
                "prompts_per_step / mini_batch updates of mini_batch groups each"
            )
        streams = m is not None and m < self.prompts_per_step
        if self.mode == "one_step_off" and (self.sync_every > 1 or streams):
            raise ValueError(
                "sync_every and mini_batch apply to modes sync and async; one_step_off trains each "
                "step's batch whole and syncs after it"
            )
        if self.at_sync == "interrupt":
            self._interruptible()
        if self.staleness_fraction is not None:
            if self.mode != "async":
                raise ValueError("staleness_fraction bounds mode 'async'; set mode: async or drop it")
            if "max_staleness" in self.model_fields_set:
                raise ValueError(
                    "give the staleness bound one way: max_staleness (whole versions, AReaL) or "
                    "staleness_fraction (a share of a version's samples, verl), not both"
                )
        return self

    def _interruptible(self) -> None:
        """``at_sync: interrupt`` needs engines apart from the trainer that pause to load
        the weights, and trajectories that go on across a sync."""
        why = None
        if self.placement != "disaggregated":
            why = "placement 'disaggregated' (colocated engines generate nothing while they train)"
        elif not self.pause_engines_on_sync:
            why = "pause_engines_on_sync: true (the engines stop generating to load the weights)"
        elif not self.partial_rollouts:
            why = "partial_rollouts: true (with false, in-flight trajectories are discarded at a sync)"
        if why:
            raise ValueError(
                f"at_sync 'interrupt' (requests generating at a weight sync are interrupted "
                f"and resumed under the new weights) needs {why}; use at_sync: finish or "
                "change that field"
            )

    @property
    def stale_policy(self) -> str:
        """What happens to a sample past the bound: ``discard`` (the default of max_staleness) or
        ``keep`` (the default of staleness_fraction: verl trains every sample it generated)."""
        if self.stale_samples is not None:
            return self.stale_samples
        return "keep" if self.staleness_fraction is not None else "discard"

    @property
    def stale_versions(self) -> int:
        """Versions a sample may lag before it is stale: max_staleness, or the fraction rounded up."""
        f = self.staleness_fraction
        return math.ceil(f - 1e-9) if f is not None else self.max_staleness

    @property
    def ahead(self) -> float:
        """Versions of groups the rollout may start ahead of the trainer's (the admission bound:
        started groups < (version + 1 + ahead) x groups per version)."""
        f = self.staleness_fraction
        return f if f is not None else float(self.max_staleness)

    @property
    def update_groups(self) -> int:
        """Groups the trainer takes at a time (one update)."""
        return self.mini_batch or self.prompts_per_step

    @property
    def version_groups(self) -> int:
        """Groups trained per weight sync: B x sync_every."""
        return self.prompts_per_step * self.sync_every

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
            groups += self.version_groups * (self.ahead + 1)
        extra = 1.0 + (0.5 if self.on_failure != "mask" or not self.partial_rollouts else 0.0)
        return int(math.ceil((groups * 1.25 * extra + 4 * self.prompts_per_step) * self.samples_per_prompt))
