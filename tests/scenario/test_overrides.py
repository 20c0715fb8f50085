"""Dotted-path overrides of a scenario: ``run --set`` (simrollout.scenario.overrides)."""

from __future__ import annotations

import pytest
import yaml

from simrollout.errors import InputError
from simrollout.scenario.overrides import load_with_sets, parse_one, set_path
from tests.conftest import make


def test_parse_one_reads_yaml_values():
    assert parse_one("workload={import: p.yaml}") == ("workload", {"import": "p.yaml"})
    assert parse_one("training.train_time=null") == ("training.train_time", None)
    assert parse_one("training.steps=5") == ("training.steps", 5)
    with pytest.raises(InputError, match="expected PATH=VALUE"):
        parse_one("training.steps")


def test_sets_apply_to_the_file_before_it_is_read(tmp_path):
    d = make(**{"cluster.inference": {"engines": 2}})
    d["training"] = {"prompts_per_step": 4, "samples_per_prompt": 2, "steps": 2, "train_time": 5.0}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(d))
    data, scn = load_with_sets(path, ["training.steps=7", "cluster.inference.engines=3"])
    assert scn.training.steps == 7 and scn.cluster.inference.engines == 3
    assert data["training"]["steps"] == 7


def test_set_path_refuses_a_path_through_a_value():
    with pytest.raises(InputError, match="'concurrency' is not a mapping"):
        set_path({"cluster": {"concurrency": 4}}, "cluster.concurrency.x", 1)
    assert set_path({"a": [1, 2]}, "a.1", 5) == {"a": [1, 5]}
