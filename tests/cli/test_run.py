"""``simrollout run --set``: fields set on the scenario file before it is read; bad ones exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, cli

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


def test_a_bad_model_error_term_is_refused_in_one_paragraph_before_anything_runs(tmp_path):
    import json

    from simrollout.errors import InputError
    from simrollout.whatif.model_error_term import read_term, shipped

    good = tmp_path / "term.json"
    good.write_text(json.dumps(shipped()))
    assert read_term(good) == shipped()
    (tmp_path / "flat.json").write_text(json.dumps({"level": 0.9, "targets": {"docker": {"q": "big"}}}))
    with pytest.raises(InputError, match="'targets', each target with a number 'q'"):
        read_term(tmp_path / "flat.json")
    (tmp_path / "bad.json").write_text("{level: 0.9")
    res = cli("run", str(ROOT / "scenarios/small.yaml"), "--uncertainty", "--model-error", str(tmp_path / "bad.json"),
              "-o", str(tmp_path / "out"))  # fmt: skip
    assert res.returncode == 2 and "--model-error" in res.stderr and "not JSON" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "out").exists()
