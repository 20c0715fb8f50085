"""The model-error term: split-conformal quantiles of the held-out residuals, leave-one-sitting-out
coverage, and the shipped term read from validation/residuals.csv."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from simrollout.errors import InputError
from simrollout.validation import model_error as me
from tests.conftest import ROOT


def frame(errors: dict[str, list[float]], target: str = "docker", pct: float = 10) -> pd.DataFrame:
    """Residual rows: per sitting, the relative errors of its cells (no input band)."""
    rows = [
        {"target": target, "sitting": s, "date": "2026-12-01", "workload": s, "level": i, "metric": "makespan",
         "target_pct": pct, "real_mean": 1.0, "simulated": 1 + e, "sim_lo": np.nan, "sim_hi": np.nan}
        for s, errs in errors.items() for i, e in enumerate(errs)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_the_conformal_quantile_is_the_ceil_n_plus_one_level_th_smallest():
    s = np.arange(1, 20)  # 19 scores: ceil(20 * 0.9) = 18th smallest
    assert me.conformal(s, 0.9) == (18.0, True)
    assert me.conformal(np.arange(1, 9), 0.9) == (8.0, False)  # 8 scores: too few, the largest stands in
    assert math.isnan(me.conformal([], 0.9)[0])


def test_scores_are_log_errors_in_units_of_the_target():
    df = frame({"a": [0.1, -0.2]}, pct=20)
    assert me.scores(df).tolist() == pytest.approx([math.log(1.1) / 0.2, abs(math.log(0.8)) / 0.2])


def test_the_input_band_and_the_model_error_add_in_quadrature_on_each_side():
    lo, hi = me.combine(10.0, 10 * math.exp(-0.03), 10 * math.exp(0.04), 0.04)
    assert lo == pytest.approx(10 * math.exp(-0.05)) and hi == pytest.approx(
        10 * math.exp(math.hypot(0.04, 0.04))
    )
    assert me.combine(10.0, 10.0, 10.0, 0.1) == pytest.approx((10 * math.exp(-0.1), 10 * math.exp(0.1)))


def test_each_sitting_is_judged_by_the_term_of_the_others_alone():
    # nine sittings with errors of 1-9%, one far off at 50%: its cells are not covered, the
    # others are (each sees the 50% sitting in its term, the largest of too few scores)
    df = frame({f"s{k}": [k / 100] for k in range(1, 10)} | {"far": [0.5]})
    h = me.held_out(df).set_index("sitting")
    assert not h.loc["far", "covered"] and h.loc["far", "q"] == pytest.approx(math.log(1.09) / 0.1)
    assert h.drop("far").covered.all()
    cov = me.coverage(df).loc["docker"]
    assert cov.coverage == pytest.approx(0.9) and cov.sittings == 10 and cov.input_coverage == 0


def test_the_shipped_term_is_the_fit_of_the_recorded_residuals():
    df = me.read_residuals(ROOT / "validation" / "residuals.csv")
    assert (
        set(df.target) == {"docker", "engine", "training"}
        and df.groupby("target").sitting.nunique().min() >= 4
    )
    assert me.shipped() == json.loads(json.dumps(me.fit(df)))  # validation/residuals.csv -> model_error.json
    cov = me.coverage(df)
    assert (cov.coverage >= 0.8).all(), cov  # held out, every target: the bands hold about as often as said


def test_a_residuals_file_without_its_columns_is_refused(tmp_path):
    (tmp_path / "r.csv").write_text("target,metric\ndocker,makespan\n")
    with pytest.raises(InputError, match=r"r.csv: missing columns \['sitting'"):
        me.read_residuals(tmp_path / "r.csv")


def test_a_sitting_is_recorded_as_held_out_once_as_first_measured(tmp_path):
    cell = {"workload": "w", "level": 8, "metric": "makespan", "target_pct": 10, "real_mean": 2.0,
            "simulated": 2.2, "sim_lo": 2.1, "sim_hi": 2.3}  # fmt: skip
    path = tmp_path / "residuals.csv"
    first = me.first_seen(path, {"target": "docker", "date": "2026-12-05 10:00 UTC", "cells": [cell]})
    assert len(first) == 1 and first.iloc[0].sitting == "docker/w" and first.iloc[0].simulated == 2.2
    again = {"target": "docker", "date": "2026-12-06 10:00 UTC", "cells": [{**cell, "simulated": 2.0}]}
    assert me.first_seen(path, again).simulated.tolist() == [2.2]  # a refit or repeat: not held out
    other = {"target": "docker", "date": "2026-12-06 10:00 UTC", "cells": [{**cell, "workload": "v"}]}
    assert len(me.read_residuals(path)) == 1 and len(me.first_seen(path, other)) == 2
    lines = me.report_lines(me.read_residuals(path))
    assert lines[0] == "## Bands with the model's error" and lines[-1].startswith("| docker | 2 | 2 |")
