"""A fidelity forced where the fidelity matrix measured it outside tolerance warns: one line in the
run, in the table title and in summary.json, naming the matrix row and its measured error."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from simrollout.scenario import scenario_from_dict
from simrollout.validation.fidelity import OUTSIDE, TOLERANCE, unbacked
from tests.conftest import ROOT, cli, make

SYNC_TIER = {"policy": {"mode": "sync", "batch_size": 4}, "cluster.inference": {"engines": 2, "slowdown": 0.1},
             "workload.trajectories": 40, "workload.steps": 3}  # fmt: skip


def test_the_rows_outside_tolerance_are_the_matrix_measured_in_docs():
    """OUTSIDE holds every row docs/fidelity.md marks outside tolerance, with its figures."""
    doc = (ROOT / "docs/fidelity.md").read_text()
    header = next(line for line in doc.splitlines() if line.startswith("| row |"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    marked = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        training = "/train" in cells[0]  # the training rows: checked against simrollout.sim.route.ROUTED
        if (
            line.startswith("| ")
            and len(cells) == len(cols)
            and cells[cols.index("within")] == "**no**"
            and not training
        ):
            row = dict(zip(cols, cells))
            tol = TOLERANCE["loaded"]
            marked[row["row"]] = {m: float(row[m]) for m in tol if abs(float(row[m])) > tol[m]}
    assert marked == OUTSIDE


def test_only_an_unbacked_forced_fidelity_warns():
    assert "sync/tier" in unbacked(scenario_from_dict(make(**SYNC_TIER, fidelity="trajectory")))
    assert unbacked(scenario_from_dict(make(**SYNC_TIER))) is None  # auto chooses for itself
    assert unbacked(scenario_from_dict(make(**SYNC_TIER, fidelity="step"))) is None
    backed = {**SYNC_TIER, "policy": {"mode": "async"}}
    assert unbacked(scenario_from_dict(make(**backed, fidelity="trajectory"))) is None
    clients = make(
        **SYNC_TIER, fidelity="trajectory", **{"substrates.0.contention": {"exec": 0.1, "scope": "client"}}
    )
    assert "sync/both/clients" in unbacked(scenario_from_dict(clients))


@pytest.mark.slow
def test_run_with_a_forced_unbacked_fidelity_warns_in_the_run_the_title_and_summary(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(make(**SYNC_TIER)))
    r = cli("run", p, "--fidelity", "trajectory", "-o", tmp_path / "out", "--no-records", "--jobs", "1")
    assert r.returncode == 0, r.stderr[-800:]
    warned = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "row sync/tier" in warned[0] and "-3.54%" in warned[0], r.stderr
    title = " ".join(r.stdout.split())
    assert re.search(r"fidelity trajectory .*WARNING: .*row sync/tier, duration_p99 -3.54%", title), title
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "row sync/tier" in summary["fidelity_warning"] and "-3.54%" in summary["fidelity_warning"]
    r = cli("run", p, "-o", tmp_path / "auto", "--no-records", "--jobs", "1")  # auto: no warning
    assert r.returncode == 0 and "warning:" not in r.stderr and "WARNING" not in r.stdout
    assert json.loads((tmp_path / "auto" / "summary.json").read_text())["fidelity_warning"] is None


def test_an_interrupting_loop_runs_on_the_compiled_engine_and_forcing_trajectory_is_refused():
    from simrollout.errors import InputError
    from simrollout.sim.route import training_route
    from tests.sim.test_training import scenario

    tr = {
        "placement": "disaggregated",
        "trainer": {"gpus": 1},
        "mode": "async",
        "at_sync": "interrupt",
    }
    engine, why = training_route(scenario(tr), 1e6)
    assert engine == "compiled" and "compiled training rows" in why  # beyond the trajectory engine
    engine, why = training_route(scenario({**tr, "on_failure": "retry"}), 1e6)  # beyond both
    assert engine == "step" and "at_sync 'interrupt'" in why
    assert training_route(scenario({**tr, "at_sync": "finish"}), 1e6)[0] == "compiled"
    assert training_route(scenario({**tr, "at_sync": "finish", "mode": "one_step_off"}), 1e6)[0] == "compiled"
    with pytest.raises(InputError, match="at_sync 'interrupt'"):
        scenario(tr, fidelity="trajectory")
