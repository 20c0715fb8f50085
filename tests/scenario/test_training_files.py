"""``training: {import: PROFILE, ...}`` (simrollout.scenario.training_files): a training profile's
fitted fragment under the section's own fields, and its refits by index."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from simrollout.calibration.training_fit import training_profile
from simrollout.calibration.training_logs import read_training_log
from simrollout.errors import InputError
from simrollout.scenario import scenario_from_dict
from tests.conftest import make

DATA = Path(__file__).resolve().parents[1] / "data" / "training_logs"


def _profile(tmp_path) -> Path:
    real = read_training_log(DATA / "verl_issue1208_step2.log")
    steps = pd.concat([real, real * 1.1, real * 0.9], ignore_index=True)  # three steps to refit
    steps.index = pd.Index([2, 3, 4], name="step")
    prof = training_profile([steps], [8], "colocated", refits=5)
    path = tmp_path / "verl.yaml"
    path.write_text(yaml.safe_dump(prof, sort_keys=False))
    return path


def _scenario(tmp_path, training: dict):
    d = make(**{"cluster.inference": {"engines": 2}})  # colocated: the engines train
    d["training"] = {"prompts_per_step": 4, "samples_per_prompt": 2, "steps": 2, **training}
    return scenario_from_dict(d, tmp_path / "s.yaml")


def test_the_imported_trainer_with_the_scenarios_own_fields_on_top(tmp_path):
    prof = yaml.safe_load(_profile(tmp_path).read_text())
    scn = _scenario(tmp_path, {"import": "verl.yaml", "model": {"params_b": 7.0},
                               "train_time": {"tokens_per_turn": 400.0}, "critical_path": 2.5})  # fmt: skip
    tt = scn.training.train_time
    assert tt.kind == "flops" and tt.tokens_per_turn == 400.0  # the scenario's field beside the fit's
    assert tt.tokens_per_gpu_second == prof["training"]["train_time"]["tokens_per_gpu_second"]
    assert tt.colocated.fitted_s == prof["training"]["train_time"]["colocated"]["fitted_s"]
    assert scn.training.critical_path == 2.5  # overridden
    k1 = _scenario(tmp_path, {"import": "verl.yaml", "refit": 1, "model": {"params_b": 7.0},
                              "train_time": {"tokens_per_turn": 400.0}})  # fmt: skip
    assert (
        k1.training.train_time.tokens_per_gpu_second
        == prof["uncertainty"]["training"][1]["train_time"]["tokens_per_gpu_second"]
    )


def test_bad_imports_name_the_field_and_what_was_expected(tmp_path):
    _profile(tmp_path)
    (tmp_path / "other.yaml").write_text("workload: {steps: 1}\n")
    for training, words in (
        ({"import": "missing.yaml"}, "'training.import': 'missing.yaml' not found"),
        ({"import": "other.yaml"}, "expected a training profile"),
        ({"import": "verl.yaml", "refit": 9}, "'training.refit': expected a refit index from 0 to 4"),
    ):
        with pytest.raises(InputError, match=words):
            _scenario(tmp_path, training)


def test_a_null_field_takes_the_profiles_and_the_workload_import_brings_the_slowdown(tmp_path):
    _profile(tmp_path)
    prof = yaml.safe_load((tmp_path / "verl.yaml").read_text())
    prof["workload"] = {"steps": 1, "calls_per_step": 0, "llm_time": {"kind": "lognormal", "median": 2.0,
                                                                       "sigma": 0.5}}  # fmt: skip
    prof["inference"] = {"slowdown": 0.25}
    (tmp_path / "verl.yaml").write_text(yaml.safe_dump(prof))
    d = make(**{"cluster.inference": {"engines": 2}})
    d["workload"] = {"import": "verl.yaml"}
    d["training"] = {"prompts_per_step": 4, "samples_per_prompt": 2, "steps": 2, "import": "verl.yaml",
                     "train_time": {"tokens_per_turn": 300.0}, "critical_path": None,
                     "model": {"params_b": 7.0}}  # fmt: skip
    scn = scenario_from_dict(d, tmp_path / "s.yaml")
    assert scn.cluster.inference.slowdown == 0.25
    assert scn.training.critical_path == prof["training"]["critical_path"]  # null: the profile's
    d["cluster"]["inference"]["slowdown"] = 0.1  # the scenario's own field wins
    assert scenario_from_dict(d, tmp_path / "s.yaml").cluster.inference.slowdown == 0.1
