"""``simrollout run --set``: fields set on the scenario file before it is read; bad ones exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cli

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "grpo_sync.yaml"


@pytest.mark.parametrize(
    "value, words",
    [
        ("training.steps", ["--set 'training.steps'", "PATH=VALUE"]),
        ("training.prompts_per_step.x=3", ["--set training.prompts_per_step.x", "not a mapping"]),
        ("training.mode=sideways", ["training.mode"]),
    ],
)
def test_a_bad_set_exits_2_naming_it(tmp_path, value, words):
    r = cli("run", SCENARIO, "--set", value, "-o", tmp_path / "out", "--no-records")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr
    assert not (tmp_path / "out").exists()
