"""Input errors suggest the closest valid name for a misspelt field, enum value or kind."""

import pytest
import yaml

from simrollout.errors import InputError, did_you_mean
from simrollout.scenario import load_scenario, scenario_from_dict
from simrollout.whatif.sweeps import grid
from tests.conftest import ROOT, make


def _error(data: dict) -> str:
    with pytest.raises(InputError) as exc:
        scenario_from_dict(data, "s.yaml")
    return str(exc.value)


@pytest.mark.parametrize(
    "path, wrong, right",
    [
        ("workloadd", "workloadd", "workload"),  # top level
        ("cluster.concurency", "cluster.concurency", "concurrency"),  # a section
        ("substrates.0.capacity.hots", "substrates.0.capacity.hots", "hosts"),  # in a list's item
        ("substrates.0.billing.price_per_secnd", "substrates.0.billing.price_per_secnd", "price_per_second"),
        ("workload.tools.shell.weigth", "workload.tools.shell.weigth", "weight"),  # in a mapping's value
    ],
)
def test_a_misspelt_field_gets_the_closest_name_at_its_level(path, wrong, right):
    msg = _error(make(**{path: 1}))
    assert f"field '{wrong}'" in msg
    assert f"unknown field; did you mean '{right}'?" in msg


def test_a_misspelt_field_inside_a_distribution_is_matched_against_that_kind():
    msg = _error(make(**{"workload.llm_time": {"kind": "lognormal", "median": 1, "p99": 5, "sigmaa": 1}}))
    assert "field 'workload.llm_time.sigmaa'" in msg and "did you mean 'sigma'?" in msg


def test_a_name_nothing_resembles_gets_no_guess():
    msg = _error(make(**{"cluster.zzzz": 1}))
    assert "unknown field; check its spelling" in msg and "did you mean" not in msg


def test_a_misspelt_enum_value_and_kind_get_the_closest_allowed_value():
    msg = _error(make(**{"policy.mode": "asynk"}))
    assert "field 'policy.mode'" in msg and "(got 'asynk'; did you mean 'async'?)" in msg
    msg = _error(make(**{"fidelity": "compild"}))
    assert "did you mean 'compiled'?" in msg
    msg = _error(make(**{"workload.llm_time": {"kind": "lognormall", "median": 1, "p99": 5}}))
    assert "unknown distribution kind (did you mean 'lognormal'?)" in msg


def test_a_misspelt_set_path_gets_the_closest_name():
    scn = load_scenario(ROOT / "scenarios/small.yaml")
    with pytest.raises(InputError) as exc:
        grid(scn, {"cluster.concurency": [64, 128]})
    msg = str(exc.value)
    assert "--set cluster.concurency=64" in msg and "did you mean 'concurrency'?" in msg
    with pytest.raises(InputError, match="field 'clustr': unknown field; did you mean 'cluster'"):
        grid(scn, {"clustr.concurrency": [64]})


def test_did_you_mean_only_offers_a_close_different_name():
    assert did_you_mean("concurency", ["concurrency", "inference"]) == "did you mean 'concurrency'?"
    assert did_you_mean("concurrency", ["concurrency"]) is None
    assert did_you_mean("xyz", ["concurrency"]) is None
    assert did_you_mean(3, ["concurrency"]) is None


def test_a_renamed_required_field_is_reported_once_as_the_misspelling():
    data = make()
    data["cluster"] = {"concurency": 1}
    msg = _error(data)
    assert "field 'cluster.concurency': unknown field; did you mean 'concurrency'?" in msg
    assert "required field is missing" not in msg and "more" not in msg
    data["workload"].pop("steps")  # a missing field nothing misspells is still reported
    assert "field 'workload.steps': required field is missing" in _error(data)


def test_a_misspelt_field_of_the_training_loops_time_model_is_matched_against_its_kind():
    path = ROOT / "scenarios/grpo_async.yaml"
    data = yaml.safe_load(path.read_text())
    data["training"]["train_time"] = {"kind": "linear", "intercpt": 60, "per_step": 0.04}
    with pytest.raises(InputError) as exc:
        scenario_from_dict(data, path)
    assert "field 'training.train_time.intercpt': unknown field; did you mean 'intercept'?" in str(exc.value)
