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


class ColocatedCosts(_Model):
    """What a colocated step pays to switch the GPUs between generating and training, seconds per
    step: the weights, gradients and optimizer state offloaded to the host and reloaded
    (``2 x params x (bytes_per_param + optimizer_bytes_per_param) / (GPUs x offload_gb_per_s)``,
    each GPU moving its shard), the engines' sleep and wake, and a fitted remainder (resharding
    and whatever else a colocated run's update holds that a disaggregated one does not)."""

    offload_gb_per_s: PositiveFloat | None = None  # host link per GPU (PCIe 4 x16: about 25)
    optimizer_bytes_per_param: NonNegativeFloat = 12.0  # Adam: fp32 master copy, m and v
    sleep_wake_s: NonNegativeFloat = 0.0  # the engines' sleep and wake per step
    fitted_s: NonNegativeFloat = 0.0  # fitted from colocated logs (simrollout calibrate --training)

    def seconds(self, gpus: int, model: ModelSize) -> float:
        out = self.sleep_wake_s + self.fitted_s
        if self.offload_gb_per_s is not None:
            moved = 2.0 * model.params_b * 1e9 * (model.bytes_per_param + self.optimizer_bytes_per_param)
            out += moved / (gpus * self.offload_gb_per_s * 1e9)
        return out


class FlopsTime(_Model):
    """Train time from the tokens trained: ``intercept + 6 x params x tokens / (GPUs x peak x
    mfu)`` (a forward and backward pass), plus ``2 x params x tokens`` for each forward-only pass
    switched on (the old policy's log-probs recomputed, the reference model's); or the user's
    own ``tokens_per_gpu_second`` for the forward and backward pass (a forward-only pass: a third
    of its time, or ``logprob_tokens_per_gpu_second``). GPUs: the trainer's (disaggregated), or
    the engines' (colocated). ``tokens_half``: the throughput per GPU saturates, ``rate x t / (t +
    tokens_half)`` at ``t`` tokens per GPU in an update, so an update takes ``tokens_half / rate``
    seconds more than at the peak; ``colocated``: a colocated step's switching costs."""

    kind: Literal["flops"]
    peak_tflops: PositiveFloat | None = None  # per GPU, dense bf16 (H100 SXM: 989)
    mfu: Fraction | None = None  # model FLOPs utilisation of the training passes
    tokens_per_gpu_second: PositiveFloat | None = None  # measured forward + backward throughput
    recompute_logprobs: bool = True  # the old policy's log-probs: a forward pass on the trainer
    reference_logprobs: bool = False  # a KL penalty: the reference model's forward pass
    intercept: NonNegativeFloat = 0.0  # s per update outside the passes (optimizer step, data)
    tokens_per_turn: PositiveFloat | None = None  # a time workload: tokens trained per generated turn
    tokens_half: NonNegativeFloat = 0.0  # tokens per GPU in an update at which it runs at half its peak
    logprob_tokens_per_gpu_second: PositiveFloat | None = None  # a forward-only pass's measured rate
    colocated: ColocatedCosts | None = None  # seconds per step a colocated placement adds

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

    def rate(self, model: ModelSize) -> float:
        """The forward and backward pass's peak tokens per GPU-second."""
        if self.tokens_per_gpu_second is not None:
            return self.tokens_per_gpu_second
        return self.peak_tflops * 1e12 * self.mfu / (6.0 * model.flops_params)

    def seconds(self, tokens: float, gpus: int, model: ModelSize) -> float:
        """One update on ``tokens`` trained tokens over ``gpus`` GPUs (no colocated costs)."""
        if self.tokens_per_gpu_second is not None:
            per_token = 1.0 / (self.tokens_per_gpu_second * gpus)
        else:
            per_token = 6.0 * model.flops_params / (gpus * self.peak_tflops * 1e12 * self.mfu)
        if not self.tokens_half and self.logprob_tokens_per_gpu_second is None:
            return self.intercept + tokens * per_token * self.passes()
        train = tokens * per_token + self.tokens_half / self.rate(model)
        forward = self.recompute_logprobs + self.reference_logprobs
        if self.logprob_tokens_per_gpu_second is None:
            return self.intercept + train * (1.0 + forward / 3.0)
        return self.intercept + train + forward * tokens / (gpus * self.logprob_tokens_per_gpu_second)

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
