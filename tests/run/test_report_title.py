"""The training table's title shows the loop's staleness bound as the scenario gives it."""

from __future__ import annotations

from simrollout.run.report import loop_title
from tests.sim.test_training import scenario

ASYNC = {"placement": "disaggregated", "trainer": {"gpus": 1}, "mode": "async"}


def test_the_title_shows_the_bound_in_versions_or_as_a_fraction():
    assert loop_title(scenario({**ASYNC, "max_staleness": 2}).training).endswith(
        "disaggregated, max staleness 2"
    )
    title = loop_title(scenario({**ASYNC, "staleness_fraction": 0.3}).training)
    assert title.endswith("staleness fraction 0.3") and "max staleness" not in title
    assert "staleness" not in loop_title(scenario({}).training)
    title = loop_title(scenario({**ASYNC, "at_sync": "interrupt"}).training)
    assert title.endswith("max staleness 1, requests interrupted at a sync")
