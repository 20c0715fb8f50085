"""The simulator against a real mini-rollout on the local Docker engine."""

import numpy as np
import pytest

from simrollout.calibration.backends import get_backend
from simrollout.calibration.calibrate import calibrate, write_profile
from simrollout.calibration.probe import ProbePlan, probe, read_records
from simrollout.validation.validate import compare, mini_rollout_scenario, real_rollout, speed_check


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
    # each trajectory's exec calls took at least their commands' sleeps, and it was torn down
    assert (real.execs >= real.tool).all() and (real.teardown > 0).all()
    assert (real.end - real.start >= real.cold + real.execs + real.teardown).all()
    table = compare(real, scn).set_index("metric")
    # the real rollout took at least the commands' own durations
    from simrollout.sim.workload_draws import draw_work

    assert table.loc["makespan", "real"] > draw_work(scn, 0).tool.sum()
    # the simulation lands near reality on this engine (loose: CI machines are noisy)
    assert abs(table.loc["makespan", "diff_pct"]) < 35
    assert abs(table.loc["duration_p50", "diff_pct"]) < 35
    assert np.isfinite(table.simulated).all()
    left = docker_engine.containers.list(all=True, sparse=True, filters={"label": "simrollout.probe"})
    assert [c for c in left if c.labels.get("simrollout.probe", "").startswith("validate-")] == []


@pytest.mark.docker
def test_held_out_style_rollout_with_llm_waits_and_staggered_arrivals(docker_engine, tmp_path):
    from simrollout.validation.validate import arrivals

    be = get_backend("docker")
    probes = tmp_path / "probe.jsonl"
    probe(be, ProbePlan(sandboxes=12, commands=5, levels=(1, 2)), probes)
    path = tmp_path / "p.yaml"
    write_profile(calibrate(read_records([probes]), "p")[0], path)
    llm = {"kind": "lognormal", "median": 0.1, "p99": 0.3}
    tool = {"kind": "lognormal", "median": 0.05, "p99": 0.2}
    scn = mini_rollout_scenario(path, trajectories=6, steps=3, levels=[2], tool=tool, seed=2, llm=llm,
                                arrival_rate=3.0)  # fmt: skip
    ops = []
    real = real_rollout(be, scn, "simrollout-busybox:local", ops=ops)
    # each trajectory waited for its arrival and spent its LLM turns waiting on the client
    assert (real.start + 1e-3 >= arrivals(scn)).all()
    assert (real.llm > 0.2).all()
    # every operation was timed: a create, three execs (at least their commands) and a teardown each
    import pandas as pd

    from simrollout.validation.validate import OPS_COLUMNS

    ops = pd.DataFrame(ops, columns=OPS_COLUMNS)
    assert ops.groupby("phase").size().to_dict() == {"create": 6, "exec": 18, "teardown": 6}
    x = ops[ops.phase == "exec"]
    assert (x.latency >= x.command).all() and (x.command > 0).all()
    by = ops.groupby(["phase", "trajectory"]).latency.sum()
    for r in real.itertuples():
        assert abs(by["exec", r.trajectory] - r.execs) < 1e-9 and by["create", r.trajectory] == r.cold
    table = compare(real, scn, draws=5).set_index("metric")
    assert (table.sim_lo <= table.simulated + 1e-9).all() and (table.simulated <= table.sim_hi + 1e-9).all()
    assert table.loc["infra_per_trajectory", "real"] > 0
    assert abs(table.loc["makespan", "diff_pct"]) < 40


@pytest.mark.docker
def test_a_small_probe_predicts_a_held_out_rollout_within_the_spread_measured_at_this_size(
    docker_engine, tmp_path
):
    # the README recipe at small size: a paced probe (1 s before each command) at 1..16 in
    # flight, calibrate (creates and teardowns shared), then a workload held out in an earlier
    # version (tool 0.2 / 1.0 s, LLM wait 1.0 / 3.0 s, 6 arrivals a second) at 12 in flight, a
    # level the probe never ran
    be = get_backend("docker")
    probes = tmp_path / "probe.jsonl"
    probe(be, ProbePlan(sandboxes=16, commands=5, levels=(1, 2, 4, 8, 16), think=1.0), probes)
    path = tmp_path / "p.yaml"
    profile = calibrate(read_records([probes]), "p")[0]
    assert profile["substrate"]["contention"]["shared"] is True
    write_profile(profile, path)
    tool, llm = (
        {"kind": "lognormal", "median": 0.2, "p99": 1.0},
        {"kind": "lognormal", "median": 1.0, "p99": 3.0},
    )
    scn = mini_rollout_scenario(path, trajectories=32, steps=10, levels=[12], tool=tool, seed=3, llm=llm,
                                arrival_rate=6.0)  # fmt: skip
    real = real_rollout(be, scn, "simrollout-busybox:local")
    diff = compare(real, scn, draws=10).set_index("metric").diff_pct
    # Bounded by the spread measured at this size, not by the targets (validation/README.md keeps
    # the recorded held-out runs that check those): five probes x five real rollouts on two engine
    # starts (every pairing) gave makespan and durations -2..+4%, infrastructure -13..+59% and cold
    # start p50 -30..+69%; two CI rehearsals on a busy day gave infrastructure +79% and makespan
    # +12%, the model reading more exec overhead under load than this engine shows. What the
    # bounds catch: a base fit whose median is off (the shifted exponential a likelihood picked on
    # two slow outliers gave cold start +130% and +156%) or a contention curve gone wrong (a
    # multiplier read at the wrong load: infrastructure +100% or more)
    for metric in ("makespan", "duration_p50", "duration_p99"):
        assert abs(diff[metric]) <= 25, (metric, diff[metric])
    assert abs(diff["cold_start_p50"]) <= 100, diff["cold_start_p50"]
    assert abs(diff["infra_per_trajectory"]) <= 100, diff["infra_per_trajectory"]


def _slower(profile, path, factor: float = 3.0):
    """``profile`` with every operation ``factor`` times as long, written to ``path``."""
    import yaml

    slow = yaml.safe_load(profile.read_text())
    for ph in ("cold_start", "exec_overhead", "teardown"):
        slow["substrate"][ph] = {"kind": "scaled", "factor": factor, "dist": slow["substrate"][ph]}
    path.write_text(yaml.safe_dump(slow))
    return path


@pytest.mark.docker
def test_speed_check_reads_the_engine_against_the_profile(docker_engine, tmp_path, root):
    import pandas as pd

    from tests.conftest import cli

    be = get_backend("docker")
    profile = root / "tests/calibration/records/docker-recipe-e.yaml"
    a = speed_check(be, profile, "simrollout-busybox:local", "as probed")
    b = speed_check(be, _slower(profile, tmp_path / "slow.yaml"), "simrollout-busybox:local", "3x")
    assert a["real"] > 0 and 2.5 < b["profile"] / a["profile"] < 3.5
    # the same engine against a profile three times slower reads about three times faster
    ratio = (1 + b["drift_pct"] / 100) / (1 + a["drift_pct"] / 100)
    assert 0.2 < ratio < 0.6, (a, b)
    # the CLI checks before the run and after it, says so under the table and records it
    res = cli("validate", "--profile", profile, "--trajectories", 4, "--steps", 2, "--concurrency", "2",
              "--record", tmp_path / "rec")  # fmt: skip
    assert res.returncode in (0, 1), res.stderr
    assert "engine speed against the profile" in res.stdout
    speed = pd.read_csv(tmp_path / "rec" / "speed.csv")
    assert speed.check.tolist() == ["before run 1", "after"] and (speed.real > 0).all()


def test_compare_takes_the_median_of_repeated_real_runs_and_shows_their_spread(tmp_path):
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[2]
    tool = {"kind": "lognormal", "median": 0.05, "p99": 0.3}
    scn = mini_rollout_scenario(root / "calibration/profiles/docker-local.yaml", 2, 3, [1], tool, seed=1)
    rows = []
    for run, span in enumerate([10.0, 30.0, 20.0]):  # three real runs: makespans 10, 30 and 20 s
        rows += [{"concurrency": 1, "trajectory": i, "start": 0.0, "cold": 0.5, "end": span * (i + 1) / 2,
                  "llm": 0.0, "tool": 0.1, "run": run} for i in range(2)]  # fmt: skip
    table = compare(pd.DataFrame(rows), scn, draws=2).set_index("metric")
    assert table.loc["makespan", "real"] == 20.0
    assert (table.loc["makespan", "real_min"], table.loc["makespan", "real_max"]) == (10.0, 30.0)
    assert (table.runs == 3).all() and table.loc["cold_start_p50", "real"] == 0.5


def test_compare_splits_infrastructure_time_into_first_wave_later_cold_starts_and_the_rest(tmp_path):
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[2]
    tool = {"kind": "lognormal", "median": 0.05, "p99": 0.3}
    scn = mini_rollout_scenario(root / "calibration/profiles/docker-local.yaml", 6, 3, [2], tool, seed=1)
    # six trajectories at 2 in flight: the two that start first waited 3 s for their sandboxes,
    # the later four 1 s; each spent 0.5 s more on the substrate (listed out of start order)
    starts, colds = [5.0, 0.0, 9.0, 0.1, 13.0, 17.0], [1.0, 3.0, 1.0, 3.0, 1.0, 1.0]
    rows = [{"concurrency": 2, "trajectory": i, "start": s, "cold": c, "end": s + c + 0.5 + 2.0, "llm": 2.0,
             "tool": 0.0} for i, (s, c) in enumerate(zip(starts, colds))]  # fmt: skip
    table = compare(pd.DataFrame(rows), scn, draws=2).set_index("metric")
    real = table.real
    assert real["cold_start_first_wave"] == 3.0 and real["cold_start_later"] == 1.0
    assert abs(real["exec_and_teardown"] - 0.5) < 1e-9
    # the split adds up to infrastructure time, on both sides
    for side in ("real", "simulated"):
        t = table[side]
        whole = (2 * t["cold_start_first_wave"] + 4 * t["cold_start_later"]) / 6 + t["exec_and_teardown"]
        assert abs(whole - t["infra_per_trajectory"]) < 1e-9, side
    assert pd.isna(table.loc["cold_start_first_wave", "target_pct"])


def _recorded(tmp_path, profile):
    """A record folder like ``validate --record`` writes, its "real" rollout simulated."""
    import pandas as pd
    import yaml

    from simrollout.run.executors import run_scenario
    from simrollout.sim.workload_draws import draw_work

    tool = {"kind": "lognormal", "median": 0.05, "p99": 0.3}
    scn = mini_rollout_scenario(profile, 8, 3, [2], tool, seed=3)
    res = run_scenario(scn, executor="serial")
    work = draw_work(scn, 0)
    rows = []
    for key, rec in res.records.items():
        rows += [{"concurrency": key.concurrency, "trajectory": i, "start": rec.start[i], "cold": rec.cold[i],
                  "end": rec.end[i], "llm": rec.llm[i], "tool": work.tool[i]} for i in range(rec.start.size)]  # fmt: skip
    folder = tmp_path / "rec"
    folder.mkdir()
    (folder / "scenario.yaml").write_text(yaml.safe_dump(scn.model_dump(mode="json", exclude_none=True)))
    pd.DataFrame(rows).to_csv(folder / "real.csv", index=False)
    return folder


def test_against_compares_a_recorded_rollout_with_the_given_profile(tmp_path, root):

    from simrollout.validation.validate import recorded_rollout

    profile = root / "calibration/profiles/docker-local.yaml"
    folder = _recorded(tmp_path, profile)
    scn, real = recorded_rollout(folder, profile)
    assert scn.trajectories == 8 and scn.cluster.levels == [2] and len(real) == 8
    same = compare(real, scn, draws=4).set_index("metric")
    # a profile whose every operation takes three times as long: the same record, more infrastructure
    scn3, _ = recorded_rollout(folder, _slower(profile, tmp_path / "slow.yaml"))
    slower = compare(real, scn3, draws=4).set_index("metric")
    assert (same.real == slower.real).all()  # the real side is the record's
    ratio = slower.loc["infra_per_trajectory", "simulated"] / same.loc["infra_per_trajectory", "simulated"]
    assert 2.5 < ratio < 3.5, ratio


@pytest.mark.slow
def test_the_printed_comparison_cuts_no_name_or_figure_short_on_a_narrow_terminal(tmp_path, root):
    import os
    import subprocess
    import sys

    from simrollout.validation.validate import METRICS

    profile = root / "calibration/profiles/docker-local.yaml"
    folder = _recorded(tmp_path, profile)
    proc = subprocess.run(
        [sys.executable, "-m", "simrollout.cli", "validate", "--profile", str(profile), "--against", str(folder)],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "60"},
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    assert "…" not in proc.stdout
    for name in [*METRICS, "target", "flight", "(95% range)"]:
        assert name in proc.stdout, name
    assert any(line.rstrip().endswith(("ok", "MISSED")) for line in proc.stdout.splitlines())


@pytest.mark.slow
def test_against_refuses_a_folder_without_a_record_and_other_modes(tmp_path, root):
    from tests.conftest import cli

    profile = str(root / "calibration/profiles/docker-local.yaml")
    folder = _recorded(tmp_path, profile)
    (folder / "real.csv").rename(folder / "kept.csv")
    proc = cli("validate", "--profile", profile, "--against", str(folder))
    assert proc.returncode == 2 and "no real.csv there" in proc.stderr and "Traceback" not in proc.stderr
    (folder / "kept.csv").rename(folder / "real.csv")
    proc = cli("validate", "--profile", profile, "--against", str(folder), "--record", str(tmp_path / "r"))
    assert proc.returncode == 2 and "takes no --record" in proc.stderr
    proc = cli("validate", "--profile", profile, "--against", str(folder), "--engine")
    assert proc.returncode == 2 and "record is read without --engine" in proc.stderr
    (folder / "real.csv").write_text("concurrency,trajectory,start\n2,0,0.0\n")
    proc = cli("validate", "--profile", profile, "--against", str(folder))
    assert proc.returncode == 2 and "missing column(s) cold, end, llm, tool" in proc.stderr
    (folder / "scenario.yaml").write_text("workload: [unclosed\n")
    proc = cli("validate", "--profile", profile, "--against", str(folder))
    assert (
        proc.returncode == 2
        and "scenario.yaml: malformed YAML" in proc.stderr
        and "Traceback" not in proc.stderr
    )


def _exec_profile(root, path, contention):
    """docker-local with a constant 0.1 s exec overhead and ``contention`` for execs."""
    import yaml

    data = yaml.safe_load((root / "calibration/profiles/docker-local.yaml").read_text())
    data["substrate"]["exec_overhead"] = {"kind": "constant", "value": 0.1}
    data["substrate"]["contention"] = {"exec": contention}
    path.write_text(yaml.safe_dump(data))
    return path


def test_exec_by_load_reads_the_profiles_curve_at_the_loads_the_real_execs_started_under(tmp_path, root):
    import pandas as pd

    from simrollout.validation.validate import exec_by_load, loads_at_start

    # one level: a create 0-0.5 s; exec A at 1.0 s (overhead 0.1, then a 1 s command); exec B at
    # 1.05 s, inside A's overhead (0.3, no command); exec C at 1.2 s, while A's command runs (its
    # overhead is over: it loads nothing then); a teardown at 3.0 s. A second run alone: D at 0.
    ops = pd.DataFrame(
        [(0, 2, 0, "create", 0.0, 0.5, 0.0), (0, 2, 0, "exec", 1.0, 1.1, 1.0), (0, 2, 1, "exec", 1.05, 0.3, 0.0),
         (0, 2, 0, "exec", 1.2, 0.1, 0.0), (0, 2, 0, "teardown", 3.0, 0.1, 0.0), (1, 2, 0, "exec", 1.05, 0.1, 0.0)],
        columns=["run", "concurrency", "trajectory", "phase", "start", "latency", "command"],
    )  # fmt: skip
    scn = mini_rollout_scenario(
        _exec_profile(root, tmp_path / "p.yaml", 1.0), 2, 1, [2], {"kind": "constant", "value": 0.1}, 1
    )
    x = loads_at_start(ops, scn.substrates[0])
    # B counts A's overhead; C counts B's (1.05-1.35) but not A's command; D is another run's
    assert x.load.tolist() == [1.0, 2.0, 2.0, 1.0]
    assert x.overhead.round(6).tolist() == [0.1, 0.3, 0.1, 0.1]
    t = exec_by_load(ops, scn.substrates[0]).set_index("load")
    # slope 1: the profile gives 0.1 s at one in flight, 0.2 s at two
    assert (
        t.loc["1", "execs"] == 2
        and abs(t.loc["1", "profile"] - 0.1) < 1e-9
        and abs(t.loc["1", "real"] - 0.1) < 1e-9
    )
    assert (
        t.loc["2", "execs"] == 2
        and abs(t.loc["2", "profile"] - 0.2) < 1e-9
        and abs(t.loc["2", "real"] - 0.2) < 1e-9
    )
    assert abs(t.loc["all (mean)", "real"] - 0.15) < 1e-9 and abs(t.loc["all (mean)", "diff_pct"]) < 1e-6
    # a flat profile reads the loaded execs short: at two in flight half the real 0.2 s
    flat = mini_rollout_scenario(
        _exec_profile(root, tmp_path / "f.yaml", 0.0), 2, 1, [2], {"kind": "constant", "value": 0.1}, 1
    )
    t = exec_by_load(ops, flat.substrates[0]).set_index("load")
    assert abs(t.loc["2", "diff_pct"] + 50) < 1e-6 and abs(t.loc["1", "diff_pct"]) < 1e-6


@pytest.mark.slow
def test_against_reads_a_records_timed_operations_and_refuses_a_broken_ops_file(tmp_path, root):
    import pandas as pd

    from tests.conftest import cli

    profile = str(root / "calibration/profiles/docker-local.yaml")
    folder = _recorded(tmp_path, profile)
    # two execs of 50 ms overhead, the second started inside the first's
    ops = pd.DataFrame([(0, 2, 0, "exec", 1.0, 0.15, 0.1), (0, 2, 1, "exec", 1.02, 0.05, 0.0)],
                       columns=["run", "concurrency", "trajectory", "phase", "start", "latency", "command"])  # fmt: skip
    ops.to_csv(folder / "ops.csv", index=False)
    proc = cli("validate", "--profile", profile, "--against", str(folder))
    assert proc.returncode in (0, 1), proc.stderr
    line = " ".join(proc.stdout.split())
    assert "exec overhead at the real execs' loads" in line and "1: " in line and "2: " in line
    assert "against 50 ms" in line  # every exec's mean real overhead
    ops.drop(columns="command").to_csv(folder / "ops.csv", index=False)
    proc = cli("validate", "--profile", profile, "--against", str(folder))
    assert proc.returncode == 2 and "ops.csv: missing column(s) command" in proc.stderr
    assert "Traceback" not in proc.stderr
