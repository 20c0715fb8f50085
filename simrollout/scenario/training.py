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
    model_validator,
)

from ..distributions import Constant, Dist, number_is_constant
from .base import _Model


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
