"""``simrollout workload``: a fit from too few trajectories says so."""

import pytest
from typer.testing import CliRunner

from simrollout.cli import app
from simrollout.cli.workload import MIN_TRAJECTORIES, small_sample
from tests.conftest import ROOT

REAL = ROOT / "tests/data/traces/tracelab/sanitized.round_trace.jsonl"  # 2 real sessions


@pytest.mark.slow
def test_a_fit_from_two_real_sessions_warns_of_its_small_sample(tmp_path):
    out = tmp_path / "workload.yaml"
    res = CliRunner().invoke(app, ["workload", "tracelab", str(REAL), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.is_file()
    assert f"warning: fitted from 2 trajectories, fewer than {MIN_TRAJECTORIES}" in res.output


def test_the_warning_stops_at_the_stated_number():
    assert "1 trajectory," in small_sample(1)
    assert f"fitted from {MIN_TRAJECTORIES - 1} trajectories" in small_sample(MIN_TRAJECTORIES - 1)
    assert small_sample(MIN_TRAJECTORIES) is None and small_sample(10_000) is None
