"""End to end: reproducibility, parallel == serial, common random numbers, the results folder,
and the two fidelities of one model agreeing on a small run."""

import importlib

import numpy as np
import pandas as pd
import pytest

from simrollout.run.executors import run_scenario
from simrollout.scenario import load_scenario, scenario_from_dict
from simrollout.sim.workload_draws import draw_work
from tests.conftest import cli


@pytest.fixture(scope="module")
def small(request):
    from tests.conftest import ROOT

    return load_scenario(ROOT / "scenarios" / "small.yaml")


def with_(scn, **over):
    d = scn.model_dump(by_alias=True, exclude_none=True)
    d.update(over)
    return scenario_from_dict(d)


def per_call(scn):
    """``scn`` drawing its tool latencies call by call, as the step engine does (the fidelities
    compared on the same tool work)."""
    scn._tools_per_call = True
    return scn


@pytest.mark.slow
def test_same_seed_same_numbers_and_parallel_equals_serial(small):
    scn = with_(small, fidelity="trajectory")
    a = run_scenario(scn, jobs=1).cells
    b = run_scenario(scn, jobs=2).cells
    pd.testing.assert_frame_equal(a, b)
    c = run_scenario(with_(small, fidelity="trajectory", seed=99), jobs=1).cells
    assert not np.allclose(a.worker_hours, c.worker_hours)


def test_workload_is_common_across_substrates_and_concurrency(small):
    scn = with_(small, fidelity="trajectory")
    res = run_scenario(scn, jobs=1)
    work = draw_work(scn, 0)
    assert len(res.records) == 4
    for rec in res.records.values():
        ok = rec.status == 0
        assert ok.mean() > 0.9
        # every cell ran the same trajectories: same steps, same tool work
        assert np.array_equal(rec.steps_done[ok], work.steps[ok])
    hosted = [r for k, r in res.records.items() if scn.substrates[k.substrate].name == "hosted"]
    docker = [r for k, r in res.records.items() if scn.substrates[k.substrate].name == "docker"]
    # worker time minus substrate overheads is the same tool work on both substrates
    assert np.corrcoef(hosted[0].worker, docker[0].worker)[0, 1] > 0.99


@pytest.mark.slow
def test_fidelities_agree_on_a_small_uncontended_run(small):
    kw = dict(cluster={"concurrency": 64, "inference": {"engines": 64}}, policy={"mode": "async"})
    step = run_scenario(with_(small, fidelity="step", **kw), jobs=1).summary.set_index("substrate")
    traj = run_scenario(per_call(with_(small, fidelity="trajectory", **kw)), jobs=1).summary.set_index(
        "substrate"
    )
    for m, tol in [("worker_hours", 0.005), ("makespan_hours", 0.01), ("duration_p99", 0.02)]:
        assert np.allclose(traj[m], step[m], rtol=tol), (m, traj[m], step[m])


@pytest.mark.slow
def test_fidelities_agree_with_a_saturated_inference_tier(small):
    kw = dict(cluster={"concurrency": 128, "inference": {"engines": 4, "slowdown": 0.05}})
    step_run = run_scenario(with_(small, fidelity="step", **kw), jobs=1)
    step = step_run.summary.set_index("substrate")
    traj = run_scenario(per_call(with_(small, fidelity="trajectory", **kw)), jobs=1).summary.set_index(
        "substrate"
    )
    # saturated: generation runs well over its unloaded time
    rec = next(iter(step_run.records.values()))
    unloaded = draw_work(step_run.scenario, 0).llm
    ok = rec.status == 0
    assert rec.llm[ok].sum() / unloaded[ok].sum() > 1.3
    for m in ["worker_hours", "makespan_hours", "duration_p50", "duration_p99"]:
        assert np.allclose(traj[m], step[m], rtol=0.05), (m, traj[m], step[m])


@pytest.mark.slow
def test_cli_run_writes_the_results_folder(tmp_path, root):
    out = tmp_path / "res"
    r = cli("run", str(root / "scenarios/small.yaml"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "docker" in r.stdout and "hosted" in r.stdout
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary.substrate) == {"docker", "hosted"} and len(summary) == 4
    traj = pd.read_parquet(out / "trajectories")
    assert len(traj) == 4 * 2000
    assert (traj.end >= traj.start).all()
    for png in ["duration_cdf.png", "worker_hours_cost.png", "concurrency.png"]:
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert "durations are of completed trajectories" in " ".join(r.stdout.split())
    explained = cli("run", str(root / "scenarios/small.yaml"), "-o", str(out), "--explain", "--no-records")
    text = " ".join(explained.stdout.split())
    assert "the Rollout Infrastructure Tax paper's definition" in text and "minimum billing" in text
    # the table's worker-hours are the parquet's, summed
    g = traj[traj.concurrency == 64].groupby("substrate", observed=True).worker.sum() / 3600
    s = summary[summary.concurrency == 64].set_index("substrate").worker_hours
    assert np.allclose(g.sort_index(), s.sort_index())


def test_replications_give_a_confidence_interval(small):
    scn = with_(small, fidelity="trajectory", replications=3, cluster={"concurrency": 64})
    s = run_scenario(scn, jobs=1, keep_records=False).summary
    assert (s.worker_hours_ci95 > 0).all() and (s.replications == 3).all()


def test_warm_pool_hides_cold_starts_and_rate_limit_queues():
    from tests.conftest import make

    d = make(
        **{
            "workload.trajectories": 400,
            "workload.steps": 5,
            "workload.llm_time": 1.0,
            "substrates.0.cold_start": 2.0,
            "substrates.0.warm_start": 0.05,
            "substrates.0.create_rate": 2.0,
            "cluster.concurrency": 16,
        }
    )
    cold = run_scenario(scenario_from_dict(d), jobs=1).summary.iloc[0]
    d["policy"] = {"warm_pool": 16}
    warm = run_scenario(scenario_from_dict(d), jobs=1).summary.iloc[0]
    assert cold.acquire_wait_p99 > 1.0  # 16 creates at 2/s queue for the token
    assert warm.warm_hit_fraction > 0.3
    assert warm.warm_pool_idle_hours > 0 and cold.warm_pool_idle_hours == 0
    assert warm.cold_start_p50 < cold.cold_start_p50
    # 400 creates at 2/s bound the run from below either way
    assert cold.makespan_hours * 3600 >= 400 / 2.0 - 1


@pytest.mark.slow
def test_failures_are_retried_and_counted():
    from tests.conftest import make

    d = make(
        **{
            "workload.trajectories": 20000,
            "workload.steps": 10,
            "workload.calls_per_step": 1,
            "substrates.0.exec_overhead": 0.1,
            "substrates.0.failures": {"create": 0.1, "exec": 0.01},
            "cluster.concurrency": 50,
            "policy": {"retries": 1},
        }
    )
    s = run_scenario(scenario_from_dict(d), jobs=1).summary.iloc[0]
    # per attempt: P(fail) = 1 - 0.9 * 0.99^10 ~ 0.186; both attempts fail ~ 3.5%
    p = 1 - 0.9 * 0.99**10
    assert s.retries == pytest.approx(20000 * p, rel=0.05)
    assert s.failed == pytest.approx(20000 * p * p, rel=0.15)


def test_timeout_cuts_trajectories():
    from tests.conftest import make

    d = make(
        **{
            "workload.trajectories": 500,
            "workload.steps": 10,
            "workload.llm_time": {"kind": "exponential", "mean": 1.0},
            "cluster.concurrency": 50,
            "policy": {"timeout": 10.0},
        }
    )
    res = run_scenario(scenario_from_dict(d), jobs=1)
    rec = next(iter(res.records.values()))
    assert rec.duration.max() <= 10.0 + 1e-9
    # sum of 10 exp(1) exceeds 10 with probability ~ 0.458
    row = res.summary.iloc[0]
    assert row.timeouts == pytest.approx(500 * 0.458, rel=0.15)
    # the table's durations are of completed trajectories: below the timeout, not the timeout itself
    ok = rec.status == 0
    assert row.duration_p99 == pytest.approx(10.0, rel=1e-3)
    assert row.completed_duration_p99 < 10.0
    assert row.completed_duration_p50 == pytest.approx(np.quantile(rec.duration[ok], 0.5), rel=2e-3)
    assert row.queue_wait_mean == pytest.approx(rec.queue_wait.mean())
    assert row.acquire_wait_mean == pytest.approx(rec.acquire_wait.mean())


def test_failure_probability_grows_with_operations_in_flight():
    from tests.conftest import make

    def failed_share(concurrency):
        d = make(
            **{
                "workload.trajectories": 3000,
                "substrates.0.cold_start": 1.0,
                "substrates.0.failures": {"create": {1: 0.0, 16: 0.5}},
                "cluster.concurrency": concurrency,
                "policy": {"retries": 0},
            }
        )
        s = run_scenario(scenario_from_dict(d), jobs=1, keep_records=False).summary.iloc[0]
        return s.failed / s.trajectories

    alone, crowded = failed_share(1), failed_share(16)
    assert alone == 0.0
    assert 0.3 < crowded < 0.55  # creates see up to 16 in flight on the one host


def test_a_cell_run_again_reuses_its_serving_pilot_and_gives_the_same_numbers(monkeypatch):
    """A pilot comes back with its cell's summary (from any worker) and serves the same slice of
    the cluster again in this process: a plan's check of its sample's candidates."""
    import importlib

    from simrollout.validation.fidelity import Row, build

    runner = importlib.import_module("simrollout.run.runner")
    d = build(Row("async", "tier", "tokens"), 300, 8, 64)
    runs = []
    real = runner.run_pilot
    monkeypatch.setattr(runner, "run_pilot", lambda *a: runs.append(a) or real(*a))
    monkeypatch.setattr(runner, "PILOTS", {})
    scn = scenario_from_dict({**d, "fidelity": "trajectory"})
    first = run_scenario(scn, jobs=1).summary
    assert len(runs) == 1 and len(runner.PILOTS) == 1
    again = run_scenario(scenario_from_dict({**d, "fidelity": "trajectory"}), jobs=1).summary
    assert len(runs) == 1  # not run again
    pd.testing.assert_frame_equal(first, again)
    other = scenario_from_dict({**d, "fidelity": "trajectory", "seed": 6})
    run_scenario(other, jobs=1)
    assert len(runs) == 2  # another slice (here its seed) runs its own


@pytest.mark.slow
def test_pilots_run_beside_the_workload_draw_give_the_cells_numbers_run_alone(monkeypatch):
    """Local workers run every cell's pilot while the workload's chunks are drawn, before the cells
    (which then find them): the same numbers as cells that run their own pilots one by one."""
    import importlib

    from simrollout.validation.fidelity import Row, build

    runner = importlib.import_module("simrollout.run.runner")
    monkeypatch.setattr(runner, "PILOTS", {})
    monkeypatch.setattr(runner, "_WORK", {})
    d = build(Row("async", "tier", "tokens"), 70_000, 6, 64)  # three chunks of workload
    d["cluster"]["concurrency"] = [32, 64]
    scn = scenario_from_dict({**d, "fidelity": "compiled"})
    executors = importlib.import_module("simrollout.run.executors")
    executors._prepare([scn], [(0, k) for k in runner.cell_keys(scn)], 2)
    assert len(runner.PILOTS) == 2 and len(runner._WORK) == 1  # before any cell ran
    both = run_scenario(scn, jobs=2, keep_records=False).cells
    monkeypatch.setattr(runner, "PILOTS", {})
    monkeypatch.setattr(runner, "_WORK", {})
    alone = run_scenario(scn, executor="serial", keep_records=False).cells
    pd.testing.assert_frame_equal(both, alone)
    assert both.engine_busy_fraction.gt(0).all()


@pytest.mark.slow
def test_one_compiled_cell_takes_its_workloads_chunks_as_they_are_drawn(monkeypatch):
    """One cell on a local executor: its loop starts once the pilot ran and takes each chunk of
    the workload when it reaches it, the pool still drawing the rest; the same numbers as the
    workload drawn whole first."""
    import importlib

    from simrollout.validation.fidelity import Row, build

    runner = importlib.import_module("simrollout.run.runner")
    executors = importlib.import_module("simrollout.run.executors")
    compiled = importlib.import_module("simrollout.sim.compiled")
    d = build(Row("async", "tier", "tokens"), 100_000, 4, 64)  # four chunks
    d["policy"]["timeout"] = 160.0  # bodies near it keep their calls (Work.kept, filled as it goes)
    scn = scenario_from_dict({**d, "fidelity": "compiled"})
    monkeypatch.setattr(runner, "PILOTS", {})
    monkeypatch.setattr(runner, "_WORK", {})
    seen = []
    real = compiled.CompiledRun._take
    monkeypatch.setattr(
        compiled.CompiledRun, "_take", lambda self, k: seen.append(self.streamed) or real(self, k)
    )
    streamed = executors.run_scenario(scn, jobs=2, keep_records=False).cells
    assert seen == [True] * 4
    (work,) = runner._WORK.values()
    assert work.filling is not None and work.filling.complete and work.filling.done == 4
    # drawn for this cell alone: its pages handed back and its kept calls dropped as it folded
    assert work.single and work.spent and not work.kept and streamed.timeouts.iloc[0] > 0
    assert runner.work_for(scn, 0, False) is not work  # a spent workload is drawn again
    monkeypatch.setattr(runner, "PILOTS", {})
    monkeypatch.setattr(runner, "_WORK", {})
    whole = executors.run_scenario(scn, executor="serial", keep_records=False).cells
    (drawn,) = runner._WORK.values()
    assert seen[4:] == [True] * 4 and not drawn.single and len(drawn.kept) > 0  # drawn whole, kept
    pd.testing.assert_frame_equal(streamed, whole)


def test_a_failed_background_draw_is_raised_to_the_cell_that_waits_for_it():
    from simrollout.sim.workload_draws import Filling

    f = Filling(3)
    f.filled(0)
    f.failed(RuntimeError("worker died"))
    f.wait(0)  # drawn before the failure
    with pytest.raises(RuntimeError, match="worker died"):
        f.wait(1)


def test_a_background_draw_waits_for_room_until_stopped():
    """The filling thread keeps at most LEAD chunks ahead of the cell reading them; a stopped run
    (its error set) lets it go on at once, to end."""
    import threading

    from simrollout.sim.workload_draws import LEAD, Filling

    f = Filling(100)
    f.room(LEAD)  # within the lead: no wait
    waited = threading.Thread(target=f.room, args=(LEAD + 5,), daemon=True)
    waited.start()
    waited.join(0.2)
    assert waited.is_alive()  # too far ahead of the reader
    f.filled(4)
    f.wait(4)  # the reader reached chunk 4: room for chunk LEAD + 4, not LEAD + 5
    waited.join(0.2)
    assert waited.is_alive()
    f.failed(RuntimeError("the run was stopped"))
    waited.join(2.0)
    assert not waited.is_alive()


def test_a_scenario_gets_its_own_draws_whatever_ran_before_in_the_process():
    """Tools listed in another order draw other latencies (the mixture draws them in order): a
    run after one of the other order gives the numbers it gives alone (a workload cache keyed
    on the sorted scenario once handed it the other's draws)."""
    tools = {"read": {"weight": 0.5, "latency": 0.2}, "edit": {"weight": 0.5, "latency": 3.0}}
    d = {"version": 1, "seed": 3, "fidelity": "step",  # tools drawn call by call
         "workload": {"trajectories": 200, "steps": 10, "llm_time": 1.0, "tools": tools},
         "substrates": [{"name": "s", "cold_start": 1.0, "exec_overhead": 0.01, "teardown": 0.5}],
         "cluster": {"concurrency": 20}}  # fmt: skip
    other = {**d, "workload": {**d["workload"], "tools": dict(reversed(tools.items()))}}
    runner = importlib.import_module("simrollout.run.runner")
    runner._WORK.clear()
    alone = run_scenario(scenario_from_dict(d), jobs=1).summary
    runner._WORK.clear()
    run_scenario(scenario_from_dict(other), jobs=1)
    after = run_scenario(scenario_from_dict(d), jobs=1).summary
    pd.testing.assert_frame_equal(after, alone)
