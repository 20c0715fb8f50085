"""A small real suite on the local Docker engine (CI): one workload, two levels, three
interleaved real repeats per cell, asserting only what the measured spread resolves."""

import pandas as pd
import pytest
import yaml

from simrollout.calibration.backends import get_backend
from simrollout.sim.workload_draws import draw_work
from simrollout.validation import suite_report
from simrollout.validation.suite import HeldOutCell, HeldOutWorkload, SuitePlan, rows_table, run_suite
from simrollout.validation.suite_docker import DockerTarget, docker_notes
from simrollout.validation.suite_stats import precision, verdict

CI = HeldOutWorkload("ci", 3, {"kind": "lognormal", "median": 0.05, "p99": 0.3}, min_trajectories=8)


@pytest.mark.docker
def test_a_small_interleaved_suite_on_the_real_engine(docker_engine, tmp_path):
    target = DockerTarget(get_backend("docker"), tmp_path / "docker", commands=3, think=0.2, low=4)
    plan = SuitePlan(
        [HeldOutCell(CI, 2), HeldOutCell(CI, 4)], repeats=3, max_repeats=3, seed=0, bootstrap=4, draws=4
    )
    results = run_suite(target, plan)
    rows = rows_table(results)
    assert len(rows) == 2 * len(target.targets)
    for res in results:
        kinds = [b["block"] for b in res.schedule]
        assert all(a != b for a, b in zip(kinds, kinds[1:])) and kinds[0] == kinds[-1]  # interleaved
        assert kinds.count("real") >= 3 and kinds.count("probe") >= 3
        folder = tmp_path / "docker" / res.cell.label.replace("@", "-")
        real = pd.read_csv(folder / "real.csv")
        assert real.run.nunique() == kinds.count("real")
        # every real trajectory ran its commands' sleeps at least
        from simrollout.validation.suite_docker import CLIENT, cell_scenario

        tool = draw_work(cell_scenario(CI, res.cell.level, CLIENT), 0).tool
        for _, run in real.groupby("run"):
            assert (
                run.sort_values("trajectory").end - run.sort_values("trajectory").start >= tool - 1e-6
            ).all()
        assert (folder / "profile.yaml").is_file() and (folder / "probes.jsonl.gz").is_file()
        # the probe blocks, read as reference blocks, give the drift over the sitting
        drift = yaml.safe_load((folder / "profile.yaml").read_text())["uncertainty"]["drift"]
        assert {"create", "exec"} <= set(drift) and len(drift["exec"]["factor_by_block"]) == kinds.count(
            "probe"
        )
    for r in rows.itertuples():
        assert r.repeats >= 3 and r.sim_lo <= r.sim_hi  # the refits' band (the point fit need not sit inside)
        # the verdict is read at the cell's precision: paired when 3 repeats have probe blocks on both sides
        known = precision(r.real, r.paired or None)
        assert r.precision_pct == pytest.approx(known, nan_ok=True)
        assert r.verdict == verdict(r.real_mean, r.real_half, r.simulated, r.target_pct, known)
        if r.metric in ("makespan", "duration_p50") and r.real_half_pct <= 10:
            # resolved by the spread: the simulation lands within the loose CI bound of the VM
            assert abs(r.error_pct) <= max(35.0, 3 * r.real_half_pct), (r.level, r.metric, r.error_pct)
    entry = suite_report.suite_entry(
        "docker", rows, "test", target.machine(), {}, [], {}, {"notes": docker_notes(results)}
    )
    suite_report.write(tmp_path, entry)
    assert "| ci | 4 | makespan |" in (tmp_path / "REPORT.md").read_text()
    left = docker_engine.containers.list(all=True, sparse=True, filters={"label": "simrollout.probe"})
    assert [c for c in left if c.labels.get("simrollout.probe", "").startswith("validate-")] == []
