"""The training profile's fit (simrollout.calibration.training_fit): known answers, the published
verl sync rows predicting the held-out async trainer, and the bootstrap's band."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simrollout.calibration.training_fit import (
    fit_training,
    generation,
    response_law,
    trainer_fit,
    training_profile,
)
from simrollout.calibration.training_logs import read_training_log
from simrollout.scenario.trainer import ColocatedCosts, FlopsTime, ModelSize

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "training_logs"


def test_response_law_through_the_clip_ratio():
    # lognormal median 300, sigma 0.5, cut at 1,000: P(X > 1000) = 1 - Phi(ln(1000/300)/0.5)
    # = 0.0080213; E[min(X, 1000)] = 300 e^0.125 Phi(1.90795) + 1000 x 0.0080213 = 338.3797
    law = response_law(338.3797, 1000.0, 0.0080213, None)
    assert law["median"] == pytest.approx(300.0, rel=1e-3) and law["sigma"] == pytest.approx(0.5, rel=1e-3)


def test_response_law_through_the_longest_response():
    # no clipping: mean 300, the longest of 1,000 at the 1-in-1000 quantile (z = 3.0902):
    # sigma = z - sqrt(z^2 - 2 ln(1000/300)) = 0.41786, median = 300 / e^(sigma^2/2) = 274.92
    law = response_law(300.0, 1000.0, 0.0, 1000)
    assert law["sigma"] == pytest.approx(0.41786, abs=1e-5) and law["median"] == pytest.approx(
        274.92, abs=0.01
    )


def test_trainer_fit_separates_the_colocated_cost_from_the_rate():
    # 6.4M tokens a step at 1,000 tokens/s/GPU plus 40 s: 240, 140 and 90 s on 32, 64, 128 GPUs
    runs = [{"update_s": 40 + 6400 / g, "total_tokens": 6.4e6} for g in (32, 64, 128)]
    a, rate = trainer_fit(runs, [32, 64, 128])
    assert (a, rate) == pytest.approx((40.0, 1000.0))
    fit = fit_training(runs, [32, 64, 128], "colocated")
    assert fit["train_time"]["colocated"] == {"fitted_s": 40.0}
    # the same rate on a disaggregated trainer of 16 GPUs, without the colocated cost: 400 s
    tt = FlopsTime.model_validate({**fit["train_time"], "recompute_logprobs": False})
    assert tt.seconds(6.4e6, 16, ModelSize(params_b=7.0)) == pytest.approx(400.0)
    # fitted on disaggregated runs, the intercept is the saturation: tokens_half = 40 x 1,000
    assert fit_training(runs, [32, 64, 128], "disaggregated")["train_time"]["tokens_half"] == 40000.0


def test_generation_law_through_two_loads():
    # peak 100 tokens/s/GPU, half of it at 20 requests per GPU: 1,280 requests on 8 GPUs (160 a
    # GPU) run at 100 x 160 / 180 = 88.889; 320 on 8 (40 a GPU) at 100 x 40 / 60 = 66.667
    runs = [{"gen_s": 1280 * 500 / (88.8889 * 8), "responses": 1280, "response_mean": 500},
            {"gen_s": 320 * 500 / (66.6667 * 8), "responses": 320, "response_mean": 500}]  # fmt: skip
    gen = generation(runs, [8, 8])
    assert [p["tokens_per_gpu_second"] for p in gen["points"]] == pytest.approx([88.889, 66.667], abs=1e-3)
    law = gen["law"]
    assert law["peak_tokens_per_gpu_second"] == pytest.approx(100.0, rel=1e-3)
    assert law["requests_half_per_gpu"] == pytest.approx(20.0, rel=1e-3)
    assert "law" not in generation(runs[:1], [8])  # one load: the point alone


def test_verl_sync_rows_predict_the_held_out_async_trainer():
    """verl's published fully-async table (validation/training/published.csv): fitted on the three
    colocated sync rows, the disaggregated trainer's update_actor of the async rows within 20%
    (373, 187, 93 s against 313.81, 156.98, 113.16), where ideal 1/GPUs scaling of one rate (no
    colocated cost) predicts 661, 331, 165 s (+46% to +111%)."""
    table = pd.read_csv(ROOT / "validation" / "training" / "published.csv")
    verl = table[table["target"] == "verl"]
    sync, held = verl[verl["mode"] == "sync"], verl[verl["row"].str.startswith("async")]
    tokens = 512 * 16 * 1000.0  # the same tokens every row (not published): it cancels out
    runs = [{"update_s": r.update_actor, "total_tokens": tokens} for r in sync.itertuples()]
    fit = fit_training(runs, sync["gpus"].astype(int).tolist(), "colocated")["train_time"]
    tt = FlopsTime.model_validate({**fit, "colocated": None, "recompute_logprobs": False})
    ideal = tokens * len(runs) / float((sync["update_actor"] * sync["gpus"]).sum())  # one rate, a = 0
    model = ModelSize(params_b=7.6)
    for r in held.itertuples():
        pred = tt.seconds(tokens, int(r.train_gpus), model)
        assert abs(pred / r.update_actor - 1) < 0.20, (r.row, pred)
    misses = [abs(tokens / (int(r.train_gpus) * ideal) / r.update_actor - 1) for r in held.itertuples()]
    assert min(misses) > 0.45
    cost = ColocatedCosts.model_validate(fit["colocated"]).seconds(32, model)
    assert 40 < cost < 70  # s per colocated step the disaggregated trainer does not pay


def test_profile_from_a_real_log_and_its_bootstrap_band():
    t = read_training_log(DATA / "verl_issue1208_step2.log")
    prof = training_profile([t], [8], "colocated", refits=20)
    tt = prof["training"]["train_time"]
    # 547,190.5 tokens per rank x 8 ranks / (8 GPUs x 14.302 s) = 38,259.7 tokens/s/GPU
    assert tt["tokens_per_gpu_second"] == pytest.approx(547190.5 / 14.302, rel=1e-6)
    # critical path: adv 1.167 + the step's unnamed rest 96.551 - (74.020 + 3.566 + 3.420 + 1.167 + 14.302)
    assert prof["training"]["critical_path"] == pytest.approx(1.167 + 0.076, abs=1e-3)
    assert prof["uncertainty"]["refits"] == 0  # one step cannot be resampled
    assert prof["provenance"]["steps"] == [[2, 2, 1]]
    # the band over steps: the verl sync rows as three steps of one run
    table = pd.read_csv(ROOT / "validation" / "training" / "published.csv")
    sync = table[(table["target"] == "verl") & (table["mode"] == "sync")]
    steps = pd.DataFrame({"update_s": sync["update_actor"].to_numpy(), "total_tokens": 8.192e6,
                          "gen_s": sync["gen"].to_numpy(), "step_s": sync["step"].to_numpy()},
                         index=pd.Index([1, 2, 3], name="step"))  # fmt: skip
    prof = training_profile([steps], [64], "colocated", refits=50, seed=3)
    unc = prof["uncertainty"]
    assert unc["refits"] == 50 and len(unc["training"]) == 50
    for s in unc["spread"].values():
        assert s["p5"] <= s["point"] <= s["p95"]
    assert unc["spread"]["tokens_per_gpu_second"]["p5"] < unc["spread"]["tokens_per_gpu_second"]["p95"]
    again = training_profile([steps], [64], "colocated", refits=50, seed=3)
    assert again["uncertainty"] == unc  # the same seed, the same refits
    assert np.isfinite(prof["training"]["critical_path"])


def test_rollout_fit_recovers_a_known_longest_response_and_slowdown():
    from simrollout.calibration.training_fit import rollout_fit

    top, s, n = 100.0, 0.01, 8192
    runs = [{"gen_s": top * (1 + s * (n / g - 1)), "responses": n} for g in (32, 64, 128)]
    fit = rollout_fit(runs, [32, 64, 128], sigma=0.5)
    assert fit["inference"]["slowdown"] == pytest.approx(s, rel=1e-3)
    z = 3.6683  # the 1-in-8192 normal quantile, Phi^-1(1 - 1/8192)
    assert fit["workload"]["llm_time"]["median"] == pytest.approx(top * np.exp(-0.5 * z), rel=1e-3)
    one = rollout_fit(runs[:1], [32])  # one GPU count: no slowdown can be told apart
    assert one["inference"]["slowdown"] == 0.0


def test_a_table_of_seconds_counts_responses_and_refits_by_leaving_runs_out():
    rows = [(32, 357.41, 107.71, 269.80, 790.10), (64, 150.72, 70.26, 133.41, 365.28),
            (128, 177.85, 53.92, 113.81, 356.30)]  # fmt: skip
    tables = [pd.DataFrame({"gen_s": [g], "logprob_s": [lp], "update_s": [u], "step_s": [st]},
                           index=pd.Index([i + 1], name="step")) for i, (_, g, lp, u, st) in enumerate(rows)]  # fmt: skip
    prof = training_profile(tables, [r[0] for r in rows], "colocated", responses=8192, params_b=7.6)
    tt = prof["training"]["train_time"]
    assert tt["tokens_per_turn"] == 1.0  # a response is one unit
    # update = a + (8192 / GPUs) / rate through the three rows (a = 58.3 s, 5,973 GPU-s a step)
    assert tt["colocated"]["fitted_s"] == pytest.approx(58.3, abs=0.1)
    assert 8192 / tt["tokens_per_gpu_second"] == pytest.approx(5973, rel=0.01)
    unc = prof["uncertainty"]
    assert unc["refits"] == 3 and unc["method"].startswith("jackknife")
    # leaving out 64 GPUs: the line through 32 and 128 (a = 61.8 s, b = 6,656 GPU-s, README)
    b = [8192 / f["train_time"]["tokens_per_gpu_second"] for f in unc["training"]]
    assert sorted(b)[1] == pytest.approx(6656, rel=0.01)
    # leaving out 128: the line through 32 and 64 would need a < 0, so one rate (a = 0) is fitted
    assert max(b) == pytest.approx(8192 * (269.80 + 133.41) / (8192 / 32 + 8192 / 64), rel=0.01)


def test_a_step_alone_is_split_by_the_train_share_and_refitted_at_the_published_shares():
    from simrollout.calibration.training_fit import SHARES

    table = pd.DataFrame({"step_s": [31.5]}, index=pd.Index([1], name="step"))
    prof = training_profile([table], [2], "disaggregated", responses=32, train_share=0.5)
    assert prof["stages"][0]["update_s"] == pytest.approx(15.75)
    assert prof["provenance"]["step_split"] == {"train_share": 0.5, "trainer_shares": [0.5]}
    assert 32 / 2 / prof["training"]["train_time"]["tokens_per_gpu_second"] == pytest.approx(15.75, rel=1e-3)
    fits = prof["uncertainty"]["training"]
    assert len(fits) == len(SHARES)
    updates = sorted(16 / f["train_time"]["tokens_per_gpu_second"] for f in fits)
    assert updates[0] == pytest.approx(min(SHARES) * 31.5, rel=1e-3)
    assert updates[-1] == pytest.approx(max(SHARES) * 31.5, rel=1e-3)


def test_a_step_alone_with_its_tokens_is_split_at_the_trainers_flops_time():
    from simrollout.calibration.training_fit import MFU_FACTORS, flops_seconds

    # NeMo-RL's step and tokens/s/GPU over it: 1,581 x 92.8 s x 16 GPUs = 2,347,622 tokens trained;
    # (6 + 2 x 2 forward passes) x 8.03e9 x tokens / (16 x 989e12 x 0.5) = 23.83 s of 92.8
    table = pd.DataFrame({"step_s": [92.8], "step_tokens_per_gpu_second": [1581.0]}, index=pd.Index([1]))
    flops = {"mfu": 0.5, "peak_tflops": 989.0, "active_params_b": 8.03, "forward_passes": 2}
    tokens = 1581.0 * 92.8 * 16
    assert flops_seconds(tokens, 16, flops) == pytest.approx(10 * 8.03e9 * tokens / (16 * 989e12 * 0.5))
    prof = training_profile([table], [16], "colocated", responses=2048, flops=flops)
    stage = prof["stages"][0]
    assert stage["update_s"] == pytest.approx(23.83, abs=0.01) and stage["gen_s"] == pytest.approx(
        92.8 - 23.83, abs=0.01
    )
    assert stage["flops_share"] == pytest.approx(23.83 / 92.8, abs=1e-4)
    assert prof["provenance"]["step_split"] == {
        "mfu": flops,
        "trainer_shares": [round(stage["train_share"], 4)],
    }
    # refitted at the MFU halved to doubled: the update scales as 1 / MFU
    updates = sorted(
        2048 / 16 / f["train_time"]["tokens_per_gpu_second"] for f in prof["uncertainty"]["training"]
    )
    want = sorted(23.83 / f for f in MFU_FACTORS)
    assert updates == pytest.approx(want, rel=1e-3)


def test_a_flops_share_is_capped_below_the_step_and_needs_the_tokens():
    from simrollout.calibration.training_fit import MAX_SHARE
    from simrollout.errors import InputError

    flops = {"mfu": 0.01, "peak_tflops": 100.0, "active_params_b": 70.0, "forward_passes": 1}
    table = pd.DataFrame({"step_s": [10.0], "step_tokens_per_gpu_second": [5000.0]}, index=pd.Index([1]))
    prof = training_profile([table], [8], "colocated", responses=64, flops=flops, refits=0)
    assert prof["stages"][0]["train_share"] == MAX_SHARE
    bare = pd.DataFrame({"step_s": [10.0]}, index=pd.Index([1]))
    with pytest.raises(InputError, match="--mfu: the log gives no tokens trained"):
        training_profile([bare], [8], "colocated", responses=64, flops=flops)
