"""Engine profiles' refits: block resamples of the engine probe, and bands on projections whose
engine comes from them."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from simrollout.calibration.calibrate import write_profile
from simrollout.calibration.engine_bootstrap import request_blocks, with_drift
from simrollout.scenario import Engine
from simrollout.validation.validate_engine import agent_scenario
from simrollout.whatif.uncertainty import run_with_bands
from tests.calibration.engine_fitting import engine_profile
from tests.calibration.test_engine_fit import TRUE, synthetic_probe

TOOL = {"kind": "lognormal", "median": 0.2, "p99": 1.0}


def noisy(seed: int, sigma: float = 0.08) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{**r, "ttft": r["ttft"] * rng.lognormal(0, sigma), "tpot": r["tpot"] * rng.lognormal(0, sigma)}
            for r in synthetic_probe(seed=seed)]  # fmt: skip


def lone_turn(engine: dict, prompt: int = 600, output: int = 24) -> float:
    """Seconds of one request alone on the engine: its first token and its decodes."""
    e = Engine.model_validate(engine)
    it = e.iteration
    first = e.overhead + it(prompt, 0, 0, prompt * prompt / 2)
    return first + sum(it(0, 1, prompt + j) for j in range(1, output))


def test_blocks_keep_a_shared_prefix_pair_together():
    recs = [{"run_id": "r", "concurrency": 1, "mode": "shared_prefix", "prompt_length": 1056, "start": t}
            for t in range(4)] + [{"run_id": "r", "concurrency": 1, "mode": "plain", "prompt_length": 128,
                                    "start": 9}]  # fmt: skip
    groups = request_blocks(recs)
    assert sorted(len(g) for g in groups) == [1, 2] and [len(b) for b in max(groups, key=len)] == [2, 2]


def test_refits_of_a_noiseless_probe_are_the_point_and_of_a_noisy_one_spread():
    exact = engine_profile(synthetic_probe(decode=True, decode_contexts=(16, 1024)), "e", bootstrap=10)[
        "uncertainty"
    ]
    assert exact["refits"] == 10
    assert all(abs(s["lo"]) < 0.01 and abs(s["hi"]) < 0.01 for s in exact["spread"].values()), exact["spread"]
    spread = engine_profile(noisy(1), "e", bootstrap=10)["uncertainty"]["spread"]
    assert spread["per_prefill_token"]["hi"] - spread["per_prefill_token"]["lo"] > 0.005


@pytest.mark.slow
def test_engine_bands_cover_the_true_engine_in_most_seeds():
    """Over 50 probes of a known engine (8% noise on every reading), the 5-95% range of the
    refits' lone-turn time covers the true engine's in at least 80% of them (nominal 90%)."""
    truth = lone_turn({"iteration": TRUE, "kv_capacity_tokens": 16384, "overhead": 0.01})
    covered = 0
    for seed in range(50):
        unc = engine_profile(noisy(seed), "e", bootstrap=20, seed=seed)["uncertainty"]
        lo, hi = np.percentile([lone_turn(e) for e in unc["engines"]], [5, 95])
        covered += lo <= truth <= hi
    assert covered >= 40, covered


def test_drift_scales_prefill_by_the_first_tokens_factor_and_decodes_by_the_tokens():
    e = {"iteration": dict(TRUE), "kv_capacity_tokens": 16384, "overhead": 0.01}
    d = with_drift(e, {"ttft": 1.2, "tpot": 0.9})
    assert d["iteration"]["per_prefill_token"] == pytest.approx(1.2 * TRUE["per_prefill_token"], rel=1e-3)
    assert d["iteration"]["per_decode"] == pytest.approx(0.9 * TRUE["per_decode"], rel=1e-3)
    assert d["overhead"] == pytest.approx(0.012) and e["iteration"] == TRUE  # the point left as it was


def test_a_probe_too_thin_to_resample_gets_no_refits_and_says_why():
    from simrollout.errors import InputError

    thin = synthetic_probe(levels=(1, 2), per=1)  # two lone requests per prompt length
    with pytest.warns(UserWarning, match="no refits"):
        unc = engine_profile(thin, "e")["uncertainty"]  # the default: warned, no refits
    assert unc["refits"] == 0 and unc["engines"] == [] and "2 of prompt length 128" in unc["refused"]
    with pytest.raises(InputError, match="--bootstrap 10: synthetic.jsonl: 2 of prompt length 128"):
        engine_profile(thin, "e", bootstrap=10)  # asked for: refused
    assert engine_profile(thin, "e", bootstrap=0)["uncertainty"]["refits"] == 0


def _scenario(tmp_path, prof: dict):
    write_profile(prof, tmp_path / "engine.yaml")
    return agent_scenario(tmp_path / "engine.yaml", 16, 4, [4], 256, 32, 16, TOOL, seed=3)


def test_run_uncertainty_bands_a_scenario_whose_engine_has_refits(tmp_path):
    prof = engine_profile(noisy(2, sigma=0.15), "e", bootstrap=12)
    s = run_with_bands(_scenario(tmp_path, prof), jobs=1).summary.iloc[0]
    assert "engine bootstrap B=12" in s["band"]
    for m in ("makespan_hours", "duration_p50", "duration_p99"):
        assert s[f"{m}_lo"] <= s[m] * 1.0001 and s[f"{m}_hi"] >= s[m] * 0.9999, m
    assert s["duration_p50_hi"] > s["duration_p50_lo"]
    # refits equal to the point: the same streams in every refit, an input band of zero width
    prof["uncertainty"]["engines"] = [copy.deepcopy(prof["engine"]) for _ in range(3)]
    s = run_with_bands(_scenario(tmp_path, prof), jobs=1).summary.iloc[0]
    for m in ("makespan_hours", "duration_p50", "duration_p99"):
        assert s[f"{m}_input_lo"] == pytest.approx(s[m], rel=1e-12) and s[f"{m}_input_hi"] == pytest.approx(
            s[m], rel=1e-12
        )
        assert s[f"{m}_lo"] < s[m] < s[f"{m}_hi"]  # the model's error (substrate and engine terms)
    # no refits: no input band, the band column says why, and the band is the model's error alone
    prof["uncertainty"] = {"method": "none: --bootstrap 0", "refits": 0}
    s = run_with_bands(_scenario(tmp_path, prof), jobs=1).summary.iloc[0]
    assert "engine: none (the profile has no refits" in s["band"] and np.isnan(s["duration_p50_input_lo"])
    assert s["duration_p50_lo"] < s["duration_p50"] < s["duration_p50_hi"]
