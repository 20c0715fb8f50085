"""training_steps.csv in a framework's own names (one mapping, simrollout/run/step_names.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from simrollout.errors import InputError
from simrollout.run.executors import run_scenario
from simrollout.run.report import write_results
from simrollout.run.step_names import NAMES, SOURCES, renamed
from tests.sim.test_training import loop_of, scenario


def test_every_mapped_column_is_a_step_table_column():
    loop, _ = loop_of(scenario({"steps": 1}))
    ours = set(loop.step_table()[0])
    for framework, table in NAMES.items():
        assert set(table) <= ours, framework
        assert len(set(table.values())) == len(table)  # no two columns share a name
        assert SOURCES[framework].startswith("https://github.com/")


@pytest.mark.slow  # a run and its plots
def test_verl_names_in_the_written_csv(tmp_path):
    # sync, constant times: every step waits 16.2 s for its rollouts, trains 7 s, syncs 3 s
    result = run_scenario(scenario({"steps": 3}), executor="serial", keep_records=False)
    write_results(result, tmp_path, "verl")
    got = pd.read_csv(tmp_path / "training_steps.csv")
    assert got["timing_s/gen"].tolist() == pytest.approx([16.2] * 3)
    assert got["timing_s/update_actor"].tolist() == pytest.approx([7.0] * 3)
    assert got["timing_s/update_weights"].tolist() == pytest.approx([3.0] * 3)
    assert got["timing_s/step"].tolist() == pytest.approx([26.2] * 3)
    assert "rollout_s" not in got and "samples" in got  # unmapped columns keep their names
    write_results(result, tmp_path / "own")
    assert "rollout_s" in pd.read_csv(tmp_path / "own" / "training_steps.csv")


def test_an_unknown_framework_is_refused():
    with pytest.raises(InputError, match="--names 'openrlhf' is not one of: verl, areal"):
        renamed(pd.DataFrame({"step_s": [1.0]}), "openrlhf")
    assert list(renamed(pd.DataFrame({"step_s": [1.0]}), "slime")) == ["perf/step_time"]
