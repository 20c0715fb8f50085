"""The trainer's time model (simrollout.scenario.trainer): known answers for each term."""

from __future__ import annotations

import pytest

from simrollout.scenario.trainer import ColocatedCosts, FlopsTime, ModelSize

MODEL = ModelSize(params_b=7.0)


def _flops(**kw) -> FlopsTime:
    return FlopsTime.model_validate({"kind": "flops", **kw})


def test_the_old_flops_model_is_unchanged_to_the_bit():
    tt = _flops(peak_tflops=989.0, mfu=0.4, intercept=3.0)
    per_token = 6.0 * 7e9 / (16 * 989.0 * 1e12 * 0.4)
    assert tt.seconds(1e6, 16, MODEL) == 3.0 + 1e6 * per_token * (1.0 + 1.0 / 3.0)


def test_saturating_throughput_adds_tokens_half_over_the_rate():
    # 64,000 tokens on 8 GPUs at 1,000 tokens/s/GPU: 8 s at the peak; rate x t / (t + 2,000) at
    # t = 8,000 tokens per GPU is 800 tokens/s/GPU: 10 s
    tt = _flops(tokens_per_gpu_second=1000.0, tokens_half=2000.0, recompute_logprobs=False)
    assert tt.seconds(64_000, 8, MODEL) == pytest.approx(10.0)
    # doubling the GPUs on the same batch: 4 + 2 = 6 s, not half of 10
    assert tt.seconds(64_000, 16, MODEL) == pytest.approx(6.0)
    # the log-prob pass at a third of the forward and backward work: 10 x 4/3
    assert _flops(tokens_per_gpu_second=1000.0, tokens_half=2000.0).seconds(
        64_000, 8, MODEL
    ) == pytest.approx(40.0 / 3.0)


def test_a_measured_logprob_rate_prices_the_forward_passes():
    # 10 s of training plus 64,000 / (8 x 3,000) = 2.667 s for the old policy's log-probs, twice
    # that with the reference model's pass too
    tt = _flops(tokens_per_gpu_second=1000.0, tokens_half=2000.0, logprob_tokens_per_gpu_second=3000.0)
    assert tt.seconds(64_000, 8, MODEL) == pytest.approx(10.0 + 8.0 / 3.0)
    both = tt.model_copy(update={"reference_logprobs": True})
    assert both.seconds(64_000, 8, MODEL) == pytest.approx(10.0 + 16.0 / 3.0)


def test_colocated_costs_offload_bytes_over_the_host_link_plus_sleep_wake_and_fitted():
    # 7B params x (2 + 12) bytes out and back = 196 GB over 32 GPUs at 25 GB/s each: 0.245 s
    c = ColocatedCosts(offload_gb_per_s=25.0, sleep_wake_s=3.0, fitted_s=10.0)
    assert c.seconds(32, MODEL) == pytest.approx(0.245 + 3.0 + 10.0)
    assert ColocatedCosts(fitted_s=4.5).seconds(32, MODEL) == 4.5
