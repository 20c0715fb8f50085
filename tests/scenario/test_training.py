"""The training section's dump re-validates (simrollout.scenario.training): bands and sweeps
re-validate dumped sections."""

from __future__ import annotations

import pytest

from simrollout.scenario import Training

BASE = {"prompts_per_step": 4, "samples_per_prompt": 2, "steps": 2, "train_time": 5.0,
        "placement": "disaggregated", "trainer": {"gpus": 2}, "mode": "async"}  # fmt: skip


def test_a_fraction_bound_dumps_without_the_default_version_bound_and_revalidates():
    tr = Training.model_validate({**BASE, "staleness_fraction": 0.5})
    dump = tr.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert "max_staleness" not in dump and dump["staleness_fraction"] == 0.5
    again = Training.model_validate(dump)
    assert again.staleness_fraction == 0.5 and again.stale_policy == tr.stale_policy


def test_a_version_bound_is_dumped_as_given():
    dump = Training.model_validate({**BASE, "max_staleness": 3}).model_dump(mode="json", exclude_none=True)
    assert dump["max_staleness"] == 3 and "staleness_fraction" not in dump
    with pytest.raises(ValueError, match="not both"):
        Training.model_validate({**dump, "staleness_fraction": 0.5})
