"""Bands on projections: re-simulation over a profile's refits with common random numbers."""

import copy
import json
import warnings

import numpy as np
import pandas as pd
import pytest
import yaml

from simrollout.calibration.calibrate import calibrate, write_profile
from simrollout.run.executors import run_scenario
from simrollout.scenario import Substrate, load_scenario, scenario_from_dict
from simrollout.whatif import uncertainty
from simrollout.whatif.uncertainty import run_with_bands, sweep_with_bands
from tests.conftest import ROOT, cli
from tests.synthetic_probe import simulate_probe

TRUE = {
    "cold_start": {"kind": "lognormal", "median": 0.4, "p99": 1.2},
    "exec_overhead": {"kind": "lognormal", "median": 0.05, "p99": 0.2},
    "teardown": {"kind": "lognormal", "median": 0.1, "p99": 0.3},
    # shared: creates and teardowns share the host, the model `calibrate` reads by default
    "contention": {"create": 0.05, "exec": 0.02, "teardown": 0.03, "shared": True},
}
METRICS = ("worker_hours", "makespan_hours", "cold_start_p50")


def scenario(sub: dict, folder, trajectories=120, concurrency=6, **over) -> dict:
    d = {"version": 1, "name": "u", "seed": 7, "fidelity": "step",
         "workload": {"trajectories": trajectories, "steps": 6,
                      "llm_time": {"kind": "lognormal", "median": 0.5, "p99": 2.0},
                      "tools": {"sh": {"weight": 1, "latency": {"kind": "lognormal", "median": 0.1, "p99": 1.0}}}},
         "substrates": [{"name": "s", **sub}], "cluster": {"concurrency": concurrency}} | over  # fmt: skip
    return d


def fitted_profile(folder, seed=0, refits=20, sandboxes=32, name="p.yaml"):
    recs = simulate_probe(Substrate.model_validate({"name": "s", **TRUE}), levels=(1, 2, 4, 8),
                          sandboxes=sandboxes, commands=5, seed=seed, reference=4)  # fmt: skip
    for k, r in enumerate(recs):
        r["_file"], r["_line"] = "synthetic.jsonl", k
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof, _ = calibrate(recs, "s", bootstrap=refits, seed=seed)
    write_profile(prof, folder / name)
    return prof, recs


def test_refits_equal_to_the_point_give_a_band_of_zero_width_common_random_numbers(tmp_path):
    prof, _ = fitted_profile(tmp_path, refits=3)
    prof["uncertainty"]["substrates"] = [copy.deepcopy(prof["substrate"]) for _ in range(3)]
    write_profile(prof, tmp_path / "p.yaml")
    scn = scenario_from_dict(scenario({"profile": "p.yaml"}, tmp_path), tmp_path / "s.yaml")
    s = run_with_bands(scn, jobs=1).summary.iloc[0]
    for m in METRICS + ("duration_p99", "cost_usd"):  # the same streams in every refit: the same numbers
        assert s[f"{m}_input_lo"] == pytest.approx(s[m], rel=1e-12) and s[f"{m}_input_hi"] == pytest.approx(
            s[m], rel=1e-12
        )
        assert (
            s[f"{m}_lo"] < s[m] < s[f"{m}_hi"] or s[m] == 0
        )  # the band holds the model's error all the same
    assert s.band.startswith("bootstrap B=3; model error at 90%: no held-out residuals for a synthetic")
    assert s.band_dominant == "model error"


@pytest.mark.slow
def test_bands_cover_the_true_substrates_metrics_on_the_synthetic_substrate(tmp_path):
    """50 probes of a known substrate, each calibrated with 20 refits: the 90% band of each
    metric, re-simulated with common random numbers, covers the metric simulated on the true
    parameters (the same workload and streams) in at least 85% of them."""
    truth = run_scenario(
        scenario_from_dict(scenario(TRUE, tmp_path), tmp_path / "t.yaml"), jobs=1
    ).summary.iloc[0]
    hits = {m: [] for m in METRICS}
    for seed in range(50):
        fitted_profile(tmp_path, seed=seed, name=f"p{seed}.yaml")
        scn = scenario_from_dict(scenario({"profile": f"p{seed}.yaml"}, tmp_path), tmp_path / "s.yaml")
        s = run_with_bands(scn, jobs=1).summary.iloc[0]
        for m in METRICS:
            hits[m].append(bool(s[f"{m}_input_lo"] <= truth[m] <= s[f"{m}_input_hi"]))
    coverage = {m: float(np.mean(v)) for m, v in hits.items()}
    print(f"coverage over 50 seeds: {coverage}")
    assert all(c >= 0.85 for c in coverage.values()), coverage


@pytest.mark.slow
def test_run_uncertainty_cli_writes_bands_beside_the_metrics(tmp_path):
    fitted_profile(tmp_path, refits=8)
    data = scenario({"profile": "p.yaml", "billing": {"price_per_second": 1e-5}}, tmp_path, replications=2)
    data["substrates"].append({"name": "inline", "cold_start": 0.3, "exec_overhead": 0.05, "teardown": 0.1})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    res = cli(
        "run",
        str(tmp_path / "s.yaml"),
        "-o",
        str(tmp_path / "out"),
        "--no-records",
        "--uncertainty",
        "-j",
        "1",
    )
    assert res.returncode == 0, res.stderr
    csv = pd.read_csv(tmp_path / "out" / "summary.csv")
    mine, inline = csv[csv.substrate == "s"].iloc[0], csv[csv.substrate == "inline"].iloc[0]
    cols = list(csv.columns)
    for m in ("worker_hours", "makespan_hours", "duration_p50", "duration_p99", "cold_start_p50", "cost_usd"):
        assert mine[f"{m}_lo"] <= mine[m] <= mine[f"{m}_hi"], m
        assert mine[f"{m}_lo"] < mine[f"{m}_hi"], m
        assert cols.index(f"{m}_lo") == cols.index(f"{m}_ci95") + 1  # beside the metric and its CI
        assert np.isnan(inline[f"{m}_input_lo"])
        assert inline[f"{m}_lo"] < inline[m] < inline[f"{m}_hi"] or inline[m] == inline[f"{m}_lo"] == 0
    assert mine.band.startswith("bootstrap B=8; model error") and inline.band.startswith(
        "none: public figures"
    )
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["summary"]
    assert {"worker_hours_lo", "worker_hours_hi", "band"} <= set(summary[0])
    assert "bootstrap B=8" in res.stdout and " [" in res.stdout  # the table shows the band


@pytest.mark.slow
def test_a_scenario_of_public_figures_says_it_has_no_band(tmp_path):
    scn = load_scenario(ROOT / "scenarios" / "1m_150step.yaml")
    labels = [label for label, subs in uncertainty.refits_of(scn)]
    assert labels == ["none: public figures"] * 4
    assert uncertainty.variants(scn) == []  # nothing to re-simulate: a plain run's cost
    small = load_scenario(ROOT / "scenarios" / "small.yaml")
    res = run_with_bands(small, jobs=1)
    assert all(
        b.startswith("none: public figures (the scenario's own numbers); model error")
        for b in res.summary.band
    )
    assert res.summary.worker_hours_input_lo.isna().all()  # no refits, and the model's error alone:
    assert (res.summary.worker_hours_lo < res.summary.worker_hours).all()


def test_a_large_run_is_banded_from_a_sub_sample_and_says_so(tmp_path, monkeypatch):
    fitted_profile(tmp_path, refits=6)
    monkeypatch.setattr(uncertainty, "SUBSAMPLE", 80)
    scn = scenario_from_dict(scenario({"profile": "p.yaml"}, tmp_path, trajectories=400, concurrency=4),
                             tmp_path / "s.yaml")  # fmt: skip
    todo = uncertainty.variants(scn)
    assert {d["workload"]["trajectories"] for *_, d in todo} == {80}
    assert [k for _, k, _ in todo] == [None, 0, 1, 2, 3, 4, 5]  # the point on the sub-sample too
    s = run_with_bands(scn, jobs=1).summary.iloc[0]
    assert "sub-sample n=80" in s.band
    assert s.worker_hours_lo < s.worker_hours < s.worker_hours_hi


def test_sweep_bands_each_grid_point(tmp_path):
    fitted_profile(tmp_path, refits=5)
    scn = scenario_from_dict(scenario({"profile": "p.yaml"}, tmp_path, trajectories=60), tmp_path / "s.yaml")
    from simrollout.whatif.sweeps import sweep

    sets = {"cluster.concurrency": [2, 6]}
    df = sweep_with_bands(scn, sets, sweep(scn, sets, jobs=1), jobs=1)
    assert len(df) == 2 and df.band.str.startswith("bootstrap B=5; model error").all()
    assert (df.makespan_hours_lo <= df.makespan_hours).all() and (
        df.makespan_hours <= df.makespan_hours_hi
    ).all()
    # each grid point banded from its own re-simulations: the bands differ with the concurrency
    assert df.makespan_hours_lo.iloc[0] > df.makespan_hours_hi.iloc[1]


@pytest.mark.slow
def test_plan_says_how_often_its_recommendation_stays_the_winner(tmp_path):
    fitted_profile(tmp_path, refits=4)
    data = scenario({"profile": "p.yaml", "billing": {"price_per_second": 1e-5}}, tmp_path, trajectories=200)
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(data))
    res = cli("plan", str(tmp_path / "plan.yaml"), "--deadline", "2h", "--concurrency", "4,8", "--sample", "100",
              "--check", "0", "--uncertainty", "-j", "1")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "Across 4 refits of the profiles" in res.stdout and "stays the winner in" in res.stdout
    assert "makespan" in res.stdout.split("Across 4 refits")[1]


def test_a_training_profiles_refits_band_the_training_loop(tmp_path):
    """``training: {import: PROFILE}`` whose profile holds refits (calibrate --training): the loop
    re-simulated over them, the scenario's own fields kept in every refit."""
    from simrollout.calibration.training_fit import training_profile
    from simrollout.calibration.training_logs import read_training_log

    real = read_training_log(ROOT / "tests" / "data" / "training_logs" / "verl_issue1208_step2.log")
    steps = pd.concat([real] * 4, ignore_index=True)  # four steps to resample, their updates unlike
    steps["update_s"] *= [1.0, 1.3, 0.7, 1.1]
    steps.index = pd.Index([2, 3, 4, 5], name="step")
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(training_profile([steps], [8], "colocated", refits=6)))
    d = scenario(TRUE, tmp_path, concurrency=8)
    d["workload"].pop("trajectories")
    d["cluster"]["inference"] = {"engines": 2}
    d["training"] = {"import": "t.yaml", "prompts_per_step": 4, "samples_per_prompt": 2, "steps": 3,
                     "model": {"params_b": 7.0}, "critical_path": 4.0,
                     "train_time": {"tokens_per_turn": 2.0e5}}  # fmt: skip
    scn = scenario_from_dict(d, tmp_path / "s.yaml")
    label, refits = uncertainty.training_refits(scn)
    assert label == "training bootstrap B=6" and len(refits) == 6
    assert {r["critical_path"] for r in refits} == {4.0}  # the scenario's own field
    rates = {r["train_time"]["tokens_per_gpu_second"] for r in refits}
    assert len(rates) > 1 and all(r["train_time"]["tokens_per_turn"] == 2.0e5 for r in refits)
    term = {"level": 0.9, "targets": {
        "docker": {"q": 1.0, "targets_pct": {"makespan": 10.0}, "cell_metrics": 1, "sittings": 1},
        "training": {"q": 2.0, "targets_pct": {"step_seconds": 15.0}, "cell_metrics": 4, "sittings": 2}}}  # fmt: skip
    s = run_with_bands(scn, jobs=1, model_error=term).summary.iloc[0]
    assert "training bootstrap B=6" in s.band and "published training tables' held-out rows" in s.band
    assert s.training_steps_per_day_input_lo < s.training_steps_per_day_input_hi
    # the step's band: the refits' (each simulated once) widened by the training term, 0.3 in log terms
    assert s.step_seconds_p50_input_lo < s.step_seconds_p50_input_hi
    assert s.step_seconds_p50_hi == pytest.approx(
        s.step_seconds_p50 * np.exp(np.hypot(np.log(s.step_seconds_p50_input_hi / s.step_seconds_p50), 0.3))
    )
    assert s.step_seconds_p50_lo == pytest.approx(
        s.step_seconds_p50 * np.exp(-np.hypot(np.log(s.step_seconds_p50 / s.step_seconds_p50_input_lo), 0.3))
    )


@pytest.mark.slow
def test_a_shipped_scenario_has_a_profile_band_out_of_the_box():
    scn = load_scenario(ROOT / "scenarios/docker_local.yaml")
    [(label, refits)] = uncertainty.refits_of(scn)
    assert label == "bootstrap B=50" and len(refits) == 50
    medians = {Substrate.model_validate(r).exec_overhead.ppf(0.5) for r in refits}
    assert len(medians) > 40  # refits of resamples, not copies of the fit


@pytest.mark.slow
def test_the_shipped_refit_profile_is_what_calibrate_makes_of_the_shipped_probe(tmp_path):
    out = tmp_path / "docker-local-refits.yaml"
    proc = cli(
        "calibrate", ROOT / "calibration/probes/docker-local.jsonl", "--name", "docker-local", "-o", out
    )
    assert proc.returncode == 0, proc.stderr
    made, shipped = (
        yaml.safe_load(p.read_text()) for p in (out, ROOT / "calibration/profiles/docker-local-refits.yaml")
    )
    for doc in (made, shipped):
        doc["provenance"].pop("date")
    assert made == shipped
