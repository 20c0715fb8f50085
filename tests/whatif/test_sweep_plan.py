"""Sweeps, the planner, executors and the Python API."""

import numpy as np
import pandas as pd
import pytest

import simrollout as sr
from simrollout.errors import InputError
from simrollout.scenario import scenario_from_dict
from simrollout.scenario.overrides import set_path
from simrollout.whatif.planner import Goal, parse_duration, plan
from simrollout.whatif.sweeps import parse_set
from tests.conftest import cli, make


def small_scn(**over):
    d = make(
        **{
            "workload.trajectories": 400,
            "workload.steps": 10,
            "workload.llm_time": {"kind": "exponential", "mean": 1.0},
            "workload.calls_per_step": 1,
            "substrates.0.cold_start": 2.0,
            "substrates.0.exec_overhead": 0.05,
            "substrates.0.teardown": 0.1,
            "cluster.concurrency": 16,
            **over,
        }
    )
    return scenario_from_dict(d)


def test_parse_set_and_set_path():
    assert parse_set("policy.warm_pool=0,8") == ("policy.warm_pool", [0, 8])
    assert parse_set("substrates.0.create_rate=null,2.5") == ("substrates.0.create_rate", [None, 2.5])
    d = set_path({"a": [{"b": 1}]}, "a.0.b", 2)
    assert d == {"a": [{"b": 2}]}
    with pytest.raises(InputError, match="expected PATH=VALUE"):
        parse_set("cluster.concurrency")
    with pytest.raises(InputError, match="must be a YAML scalar"):  # no mapping, list or alias in a value
        parse_set("workload.steps={a: 1}")
    with pytest.raises(InputError, match="not an index"):
        set_path({"a": [1]}, "a.x", 2)


def test_sweep_grid_rows_and_validation():
    scn = small_scn()
    df = sr.sweep(scn, {"cluster.concurrency": [4, 16, 64], "policy.warm_pool": [0, 8]}, jobs=1)
    assert len(df) == 6 and set(df["policy.warm_pool"]) == {0, 8}
    g = df[df["policy.warm_pool"] == 0].sort_values("concurrency")
    assert g.trajectories_per_hour.is_monotonic_increasing
    with pytest.raises(InputError, match=r"cluster.concurrency=-3"):
        sr.sweep(scn, {"cluster.concurrency": [-3]}, jobs=1)


def test_local_processes_and_serial_give_identical_results():
    scn = small_scn(**{"cluster.concurrency": [4, 16]})
    a = sr.run(scn, executor="serial", keep_records=False).cells
    b = sr.run(scn, executor="local", jobs=2, keep_records=False).cells
    pd.testing.assert_frame_equal(a, b)


def test_override_validates():
    scn = small_scn()
    assert sr.override(scn, {"policy.retries": 3}).policy.retries == 3
    with pytest.raises(InputError, match="policy.retries"):
        sr.override(scn, {"policy.retries": -1})


def _plan_dict(**over) -> dict:
    """2000 trajectories of ten 1 s LLM turns and a 0.1 s command, 1 s cold start, 4 engines."""
    return make(
        **{
            "workload.trajectories": 2000,
            "workload.steps": 10,
            "workload.llm_time": 1.0,
            "workload.calls_per_step": 1,
            "substrates.0.exec_overhead": 0.1,
            "substrates.0.cold_start": 1.0,
            "substrates.0.teardown": 0.1,
            "cluster.inference": {"engines": 4, "price_per_hour": 3.6},
            **over,
        }
    )


@pytest.mark.slow
def test_plan_finds_the_cheapest_configuration_meeting_a_deadline():
    d = _plan_dict(
        **{
            "substrates.0.billing": {"price_per_second": 0.001, "minimum_seconds": 60},
            "cluster.concurrency": 8,
        }
    )
    scn = scenario_from_dict(d)
    # one trajectory ~ 1 + 10 x 1.1 + 0.1 = 12.1 s; 2000 of them in an hour need ~7 in flight
    p = plan(scn, Goal(deadline_s=3600), concurrency=[2, 4, 8, 16, 32, 64], sample=2000, jobs=1)
    assert p.best is not None
    assert p.best.makespan_s <= 3600
    faster_ok = p.table[p.table.makespan_s <= 3600]
    assert p.best.cost_usd == faster_ok.cost_usd.min()
    # too few workers miss it: simulated over the deadline, or not simulated at all (their floor,
    # every slot busy with its trajectories' own work alone, is beyond the deadline by 25%)
    assert (p.table.makespan_s > 3600).any() or len(p.skipped)
    assert list(p.skipped.concurrency) == [2, 4] and (p.skipped.makespan_floor_s > 3600 * 1.25).all()
    assert "2 configuration(s) were not simulated" in p.describe()
    frame = p.frame()
    assert len(frame) == 6 and frame.simulated.sum() == 4 and frame.makespan_s.isna().sum() == 2
    # sandboxes bill a 60 s minimum per trajectory whatever the concurrency; GPUs bill the makespan
    assert p.best.concurrency == p.table.concurrency.max()
    assert "before the deadline" in p.describe()
    none = plan(scn, Goal(deadline_s=60), concurrency=[2, 4], sample=2000, jobs=1)
    assert none.best is None and none.describe().startswith("No configuration meets")


@pytest.mark.slow
def test_skipping_configurations_out_of_reach_changes_no_figure_of_the_others(monkeypatch):
    """The same plan with every configuration simulated: the skipped ones miss the deadline (their
    projection is over their floor), and the rest, the winner and the check are the same."""
    from simrollout.whatif import planner

    scn = scenario_from_dict(_plan_dict())
    args = dict(concurrency=[2, 4, 8, 16, 32, 64], sample=2000, jobs=1, check=2000, top=2)
    p = plan(scn, Goal(deadline_s=3600), **args)
    monkeypatch.setattr(planner, "REACH", float("inf"))
    every = plan(scn, Goal(deadline_s=3600), **args)
    assert every.skipped.empty and len(every.table) == 6 and len(p.skipped) == 2
    out = every.table[every.table.concurrency.isin(p.skipped.concurrency)]
    assert (out.makespan_s > 3600).all() and (
        out.makespan_s.values >= p.skipped.makespan_floor_s.values
    ).all()
    kept = every.table.loc[p.table.index]
    pd.testing.assert_frame_equal(kept, p.table)
    assert planner._name(p.best) == planner._name(every.best)
    pd.testing.assert_frame_equal(p.check, every.check)


def test_plan_names_the_binding_constraint():
    d = make(
        **{
            "workload.trajectories": 2000,
            "workload.steps": 5,
            "workload.llm_time": 1.0,
            "substrates.0.cold_start": 0.5,
            "substrates.0.create_rate": 2.0,
            "cluster.concurrency": 8,
        }
    )
    p = plan(scenario_from_dict(d), Goal(throughput_per_h=1.0), concurrency=[64, 128], sample=2000, jobs=1)
    assert p.binding == "the create-rate limit"


def test_parse_duration():
    assert parse_duration("24h") == 86400 and parse_duration("90m") == 5400 and parse_duration("30") == 30
    with pytest.raises(InputError):
        parse_duration("soon")


@pytest.mark.slow
def test_cli_sweep_and_plan(tmp_path, root):
    out = tmp_path / "sw"
    r = cli(
        "sweep",
        str(root / "scenarios/small.yaml"),
        "--set",
        "cluster.concurrency=32,128",
        "--set",
        "policy.warm_pool=0,16",
        "-o",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    df = pd.read_parquet(out / "sweep.parquet")
    assert len(df) == 2 * 2 * 2  # grid x substrates
    assert (out / "sweep_concurrency.png").read_bytes()[:4] == b"\x89PNG"
    r = cli(
        "plan",
        str(root / "scenarios/small.yaml"),
        "--deadline",
        "1m",
        "--concurrency",
        "32,64",
        "--sample",
        "500",
    )
    assert r.returncode == 1 and "No configuration meets" in r.stdout
    r = cli("sweep", str(root / "scenarios/small.yaml"), "--set", "nope")
    assert r.returncode == 2 and "Traceback" not in r.stderr


@pytest.mark.slow
def test_ray_executor_gives_the_local_numbers():
    ray = pytest.importorskip("ray")
    scn = small_scn(**{"cluster.concurrency": [4, 16]})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        b = sr.run(scn, executor="ray", keep_records=False).cells
        sw = sr.sweep(scn, {"policy.retries": [0, 1]}, executor="ray")
    finally:
        ray.shutdown()
    a = sr.run(scn, executor="serial", keep_records=False).cells
    pd.testing.assert_frame_equal(a, b)
    assert len(sw) == 4


def _slots_scenario(**over):
    d = _plan_dict(
        **{
            "substrates.0.capacity": {"hosts": 1, "sandboxes_per_host": 16},
            "substrates.0.billing": {"price_per_second": 0.001},
            "cluster.concurrency": 16,
            "policy": {"timeout": 30},
            **over,
        }
    )
    return scenario_from_dict(d)


def test_plan_never_picks_a_configuration_that_loses_trajectories_to_timeouts():
    # past 16 sandbox slots, workers wait for a sandbox inside their 30 s timeout: the lost
    # trajectories cost nothing, so counting them would make the broken configuration cheapest
    p = plan(_slots_scenario(), Goal(deadline_s=3600), concurrency=[8, 16, 64], sample=2000, jobs=1, check=0)
    t = p.table.set_index("concurrency")
    assert t.loc[64, "lost_fraction"] > 0.05 and not t.loc[64, "within_budget"]
    assert t.loc[64, "cost_usd"] < t.loc[16, "cost_usd"]  # the trap: unfinished work is cheap
    assert p.best is not None and p.best.concurrency != 64
    assert p.best.lost_fraction <= 0.001
    # cost per completed trajectory does not reward the failures either
    assert t.loc[64, "cost_per_completed"] > 0 and t.loc[64, "completed"] < 2000
    # a larger failure budget admits it again, and says what it loses
    loose = plan(_slots_scenario(), Goal(deadline_s=3600), concurrency=[16, 64], sample=2000, jobs=1,
                 check=0, max_failed=0.999)  # fmt: skip
    assert loose.table.within_budget.all()


@pytest.mark.slow
def test_plan_checks_the_top_candidates_at_a_larger_size_with_confidence_intervals():
    scn = _slots_scenario(**{"workload.trajectories": 3000,
                             "workload.llm_time": {"kind": "lognormal", "median": 1.0, "p99": 3.0}})  # fmt: skip
    p = plan(scn, Goal(deadline_s=7200), concurrency=[8, 16], sample=1000, jobs=1, check=3000, top=2)
    assert p.check is not None and len(p.check) == 2
    c = p.check.iloc[0]
    assert c.checked == 3000 and c.replications == 3
    assert c.makespan_s_ci95 > 0 and np.isfinite(c.cost_usd_ci95) and c.cost_usd_ci95 > 0
    text = p.describe()
    assert "Checked at 3,000 trajectories x 3 replications" in text and "±" in text
    # the check's projected makespan agrees with the sample's projection within a few percent
    b = p.best
    same = p.check[(p.check.concurrency == b.concurrency)].iloc[0]
    assert abs(same.makespan_s / b.makespan_s - 1) < 0.05


def test_plan_refuses_everything_over_the_failure_budget_and_says_so():
    p = plan(_slots_scenario(**{"policy": {"timeout": 5}}), Goal(deadline_s=36000), concurrency=[16, 64],
             sample=1000, jobs=1, check=0)  # fmt: skip
    assert p.best is None
    assert "lose more than 0.10% of their trajectories" in p.describe()


def test_plan_sensitivity_says_whether_the_recommendation_survives_slower_latencies():
    from simrollout.whatif.planner import scaled

    scn = _slots_scenario(**{"substrates.0.cold_start": 20.0, "policy": {"timeout": 600}})
    slow = scaled(scn, 1.5)
    assert slow.substrates[0].cold_start.mean() == pytest.approx(30.0)
    assert slow.substrates[0].exec_overhead.mean() == pytest.approx(0.15)
    # 2000 x (20 + 11) s on 16 slots ~ 3,900 s: a deadline of 4,200 s holds at x0.8 and misses at x1.5
    p = plan(scn, Goal(deadline_s=4200), concurrency=[16], sample=2000, jobs=1, check=0, sensitivity=0.5)
    assert p.best is not None and len(p.sensitivity) == 2
    assert "x0.50: the recommendation still holds" in p.sensitivity[0]
    assert "x1.50: the recommendation MISSES the target" in p.sensitivity[1]
    assert "Sensitivity: latencies x1.50" in p.describe()


@pytest.mark.slow
@pytest.mark.parametrize("slack", [0.97, 1.0, 1.03])
def test_a_target_at_a_configurations_capacity_is_met_or_refused_as_the_check_says(slack):
    scn = _slots_scenario(**{"workload.trajectories": 3000,
                             "workload.llm_time": {"kind": "lognormal", "median": 1.0, "p99": 3.0}})  # fmt: skip
    probe_plan = plan(scn, Goal(deadline_s=1e9), concurrency=[16], sample=1000, jobs=1, check=3000)
    at = float(probe_plan.check.iloc[0].makespan_s)  # what the check says the configuration needs
    p = plan(scn, Goal(deadline_s=at * slack), concurrency=[16], sample=1000, jobs=1, check=3000)
    checked_meets = bool(p.check.iloc[0].meets)
    assert checked_meets == (at <= at * slack)
    assert (p.best is not None) == checked_meets
    if not checked_meets:
        assert "once checked" in p.describe()
