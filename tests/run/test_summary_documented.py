"""Every column a run's summary carries is defined in docs/model.md (a percentile family, a band's
``_lo`` / ``_hi`` and a replication's ``_ci95`` under their metric's name)."""

from __future__ import annotations

import re

import pytest

import simrollout as sr
from tests.conftest import ROOT

DOC = (ROOT / "docs" / "model.md").read_text()


def undocumented(columns) -> list[str]:
    return [c for c in columns if re.sub(r"_(p\d+(_\d+)?|lo|hi|ci95)$", "", c) not in DOC]


@pytest.mark.slow
def test_every_summary_column_is_defined_in_the_model_docs():
    summary = sr.run(sr.load(ROOT / "scenarios" / "small.yaml")).summary
    assert len(summary.columns) > 30
    assert undocumented(summary.columns) == []


def test_an_undefined_column_is_found():
    assert undocumented(["worker_hours", "duration_p99_9", "worker_hours_lo", "made_up_metric_p50"]) == [
        "made_up_metric_p50"
    ]
