"""The simulator against a real mini-rollout on the local Docker engine."""

import numpy as np
import pytest

from simrollout.calibration.backends import get_backend
from simrollout.calibration.fit import calibrate, write_profile
from simrollout.calibration.probe import ProbePlan, probe, read_records
from simrollout.calibration.validate import compare, mini_rollout_scenario, real_rollout


@pytest.mark.docker
def test_probe_calibrate_validate_on_the_real_engine(docker_engine, tmp_path):
    be = get_backend("docker")
    probes = tmp_path / "probe.jsonl"
    probe(be, ProbePlan(sandboxes=12, commands=10, levels=(1,)), probes)
    profile, _ = calibrate(read_records([probes]), "docker-test")
    path = tmp_path / "docker-test.yaml"
    write_profile(profile, path)

    tool = {"kind": "lognormal", "median": 0.05, "p99": 0.3}
    scn = mini_rollout_scenario(path, trajectories=8, steps=5, levels=[1], tool=tool, seed=1)
    real = real_rollout(be, scn, "simrollout-busybox:local")
    assert len(real) == 8 and (real.end > real.start).all()
    table = compare(real, scn).set_index("metric")
    # the real rollout took at least the commands' own durations
    from simrollout.workload import draw_work

    assert table.loc["makespan", "real"] > draw_work(scn, 0).tool.sum()
    # the simulation lands near reality on this engine (loose: CI machines are noisy)
    assert abs(table.loc["makespan", "diff_pct"]) < 35
    assert abs(table.loc["duration_p50", "diff_pct"]) < 35
    assert np.isfinite(table.simulated).all()
    left = docker_engine.containers.list(all=True, filters={"label": "simrollout.probe"})
    assert [c for c in left if c.labels.get("simrollout.probe", "").startswith("validate-")] == []
