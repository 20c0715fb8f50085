"""``run --set`` on a scenario file and the band of a training profile's refits
(simrollout.whatif.training_bands)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from simrollout.errors import InputError
from simrollout.whatif.training_bands import attach_band, load_with_sets, parse_one
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


def test_the_band_is_the_refits_percentiles_holding_the_point():
    point = pd.DataFrame({"step_seconds_p50": [100.0]})
    refits = [pd.DataFrame({"step_seconds_p50": [v]}) for v in (110.0, 120.0, 130.0)]
    out = attach_band(point, refits, "training profile refits B=3")
    assert out["step_seconds_p50_lo"].iloc[0] == 100.0  # widened down to the point
    assert out["step_seconds_p50_hi"].iloc[0] == pytest.approx(np.percentile([110, 120, 130], 95))
    assert out["band"].iloc[0] == "training profile refits B=3"
