"""The trainer's physics in the ``training`` section: the model's size, train time from the FLOPs
of the tokens trained, and weight sync from the model's bytes over a bandwidth (docs/model.md,
"The trainer")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from .base import _Model

Fraction = Annotated[float, Field(gt=0.0, le=1.0)]


class Trainer(_Model):
    """Separate trainer GPUs (``placement: disaggregated``)."""

    gpus: PositiveInt
    price_per_hour: NonNegativeFloat = 0.0


class ModelSize(_Model):
    """The policy model: its parameters (billions; a mixture of experts: the active ones for the
    FLOPs) and the bytes of one parameter as the weights are synced (bf16: 2)."""

    params_b: PositiveFloat
    active_params_b: PositiveFloat | None = None  # a mixture of experts: parameters per token
    bytes_per_param: PositiveFloat = 2.0

    @property
    def flops_params(self) -> float:
        """Parameters a token passes through (the active ones of a mixture of experts)."""
        return (self.active_params_b or self.params_b) * 1e9

    @property
    def weight_bytes(self) -> float:
        return self.params_b * 1e9 * self.bytes_per_param


class FlopsTime(_Model):
    """Train time from the tokens trained: ``intercept + 6 x params x tokens / (GPUs x peak x
    mfu)`` (a forward and backward pass), plus ``2 x params x tokens`` for each forward-only pass
    switched on (the old policy's log-probs recomputed, the reference model's); or the user's
    own ``tokens_per_gpu_second`` for the forward and backward pass (a forward-only pass: a third
    of its time). GPUs: the trainer's (disaggregated), or the engines' (colocated)."""

    kind: Literal["flops"]
    peak_tflops: PositiveFloat | None = None  # per GPU, dense bf16 (H100 SXM: 989)
    mfu: Fraction | None = None  # model FLOPs utilisation of the training passes
    tokens_per_gpu_second: PositiveFloat | None = None  # measured forward + backward throughput
    recompute_logprobs: bool = True  # the old policy's log-probs: a forward pass on the trainer
    reference_logprobs: bool = False  # a KL penalty: the reference model's forward pass
    intercept: NonNegativeFloat = 0.0  # s per update outside the passes (optimizer step, data)
    tokens_per_turn: PositiveFloat | None = None  # a time workload: tokens trained per generated turn

    @model_validator(mode="after")
    def _one_rate(self):
        peak = self.peak_tflops is not None and self.mfu is not None
        if peak == (self.tokens_per_gpu_second is not None) or (
            not peak and (self.peak_tflops is not None or self.mfu is not None)
        ):
            raise ValueError(
                "train_time kind 'flops' needs either peak_tflops and mfu (the GPU's dense peak and "
                "the share of it training reaches) or tokens_per_gpu_second (a measured forward and "
                "backward throughput), not both"
            )
        return self

    def passes(self) -> float:
        """The work per token in forward-and-backward passes (a forward pass is a third)."""
        return 1.0 + (self.recompute_logprobs + self.reference_logprobs) / 3.0

    def seconds(self, tokens: float, gpus: int, model: ModelSize) -> float:
        """One update on ``tokens`` trained tokens over ``gpus`` GPUs."""
        if self.tokens_per_gpu_second is not None:
            per_token = 1.0 / (self.tokens_per_gpu_second * gpus)
        else:
            per_token = 6.0 * model.flops_params / (gpus * self.peak_tflops * 1e12 * self.mfu)
        return self.intercept + tokens * per_token * self.passes()

    def mean(self) -> float:
        return self.intercept


class TransferTime(_Model):
    """Weight sync from the model's bytes: ``latency + bytes / (gb_per_s x 1e9)`` (NCCL broadcast
    into the engines, or a colocated reshard)."""

    kind: Literal["transfer"]
    gb_per_s: PositiveFloat
    latency: NonNegativeFloat = 0.0

    def seconds(self, model: ModelSize) -> float:
        return self.latency + model.weight_bytes / (self.gb_per_s * 1e9)
