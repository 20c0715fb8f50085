"""Bands widened by the model's error: the substrate's term, the engine's, and what ``band`` says."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simrollout.scenario import scenario_from_dict
from simrollout.whatif import model_band as mb

TABLE = {
    "level": 0.9,
    "targets": {
        "docker": {
            "q": 1.0,
            "cell_metrics": 40,
            "sittings": 4,
            "targets_pct": {"makespan": 10.0, "cold_start_p50": 20.0, "infra_per_trajectory": 10.0},
        },
        "engine": {"q": 2.0, "cell_metrics": 30, "sittings": 3, "targets_pct": {"request_p50": 10.0}},
    },
}


def scenario(tmp_path, **extra):
    d = {"version": 1, "name": "t", "seed": 1, "workload": {"trajectories": 10, "steps": 2, "llm_time": 1.0,
         "tools": {"shell": {"weight": 1.0, "latency": 0.5}}}, "substrates": [{"name": "inline", "cold_start": 0.2, "exec_overhead": 0.01,
         "teardown": 0.1}], "cluster": {"concurrency": 2}, **extra}  # fmt: skip
    return scenario_from_dict(d, tmp_path / "s.yaml")


def test_a_kind_without_residuals_takes_the_largest_known_substrate_term():
    assert mb.substrate_term("docker", TABLE)[0] == 1.0
    q, why = mb.substrate_term("kubernetes", TABLE)
    assert (
        q == 1.0
        and why == "no held-out residuals for a kubernetes substrate: the largest known term (docker's)"
    )
    assert "public figures" in mb.substrate_term(None, TABLE)[1]


def test_widen_keeps_the_input_band_apart_and_adds_the_models_error(tmp_path):
    scn = scenario(tmp_path)
    out = pd.DataFrame({"substrate": ["inline"], "makespan_hours": [2.0], "makespan_hours_lo": [2.0 * math.exp(-0.3)],
                        "makespan_hours_hi": [2.0 * math.exp(0.05)], "cold_start_p50": [0.5],
                        "cold_start_p50_lo": [np.nan], "cold_start_p50_hi": [np.nan], "band": ["refits"]})  # fmt: skip
    w = mb.widen(scn, out, ["makespan_hours", "cold_start_p50"], TABLE).iloc[0]
    # makespan: target 10% -> half-width 0.1; the input's -0.3 / +0.05 added in quadrature
    assert w.makespan_hours_input_lo == pytest.approx(2.0 * math.exp(-0.3))
    assert w.makespan_hours_lo == pytest.approx(2.0 * math.exp(-math.hypot(0.3, 0.1)))
    assert w.makespan_hours_hi == pytest.approx(2.0 * math.exp(math.hypot(0.05, 0.1)))
    # cold start: no input band, target 20% -> the model's 0.2 alone
    assert np.isnan(w.cold_start_p50_input_lo)
    assert (w.cold_start_p50_lo, w.cold_start_p50_hi) == pytest.approx(
        (0.5 * math.exp(-0.2), 0.5 * math.exp(0.2))
    )
    assert w.band.startswith("refits; model error at 90%: no held-out residuals for public figures")
    assert w.band_dominant == "model error"  # the model's half-width is the wider on most metrics


def test_engine_metrics_take_the_engine_term_and_shared_ones_both(tmp_path):
    assert mb._metric_half("llm_request_p50", 1.0, 2.0, TABLE) == pytest.approx(0.2)
    assert mb._metric_half("makespan_hours", 1.0, 2.0, TABLE) == pytest.approx(math.hypot(0.1, 0.2))
    assert mb._metric_half("makespan_hours", 1.0, None, TABLE) == pytest.approx(0.1)
    assert mb._metric_half("tax_exec_overhead", 1.0, None, TABLE) == pytest.approx(0.1)  # as worker-hours
