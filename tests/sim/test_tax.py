"""Where the infrastructure time goes: the records' phases in both fidelities, and the summary's
tax_* means, held to worker-hours, to each trajectory's own time and to its pre-drawn work."""

import numpy as np
import pytest

from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from simrollout.sim.metrics import TAX
from simrollout.sim.records import FAILED, OK
from simrollout.sim.substrate_draws import draw_substrate
from simrollout.sim.workload_draws import CHUNK, draw_work, sums_at_once
from simrollout.validation.fidelity import Row, build

WORKER_PHASES = ["tax_cold_start_s", "tax_exec_overhead_s", "tax_teardown_s", "tax_retry_s", "tax_tool_s"]
ROWS = [
    Row("async", "none"),  # nothing contends: one timeout per trajectory
    Row("async", "both", "failures"),  # lost sandboxes, failed creates, retries with backoff
    Row("sync", "both", "timeouts"),  # bodies cut at their deadline
    Row("poisson", "host", "warm_pool"),  # warm starts and a create-rate limit
    Row("async", "both", trajectories=6000),  # the steady state's one-wait trajectories
]


def _run(row: Row, fidelity: str):
    d = build(row, row.trajectories or 1000, 20, 256)
    scn = scenario_from_dict({**d, "fidelity": fidelity})
    return scn, run_scenario(scn, jobs=1)


def _param(row: Row, fidelity: str):
    """6,000 trajectories at step fidelity take 2.5-2.9 s of CPU: slow."""
    slow = row.trajectories and fidelity == "step"
    return pytest.param((row, fidelity), marks=pytest.mark.slow if slow else (), id=f"{row.name}-{fidelity}")


@pytest.fixture(scope="module", params=[_param(r, f) for r in ROWS for f in ("step", "trajectory")])
def ran(request):
    row, fidelity = request.param
    return (row, fidelity, *_run(row, fidelity))


@pytest.mark.slow
def test_worker_phases_sum_to_worker_hours_and_all_phases_to_time_outside_generation(ran):
    row, fidelity, scn, res = ran
    s = res.summary.iloc[0]
    (rec,) = res.records.values()
    per = s.worker_hours * 3600 / s.trajectories
    assert sum(s[c] for c in WORKER_PHASES) == pytest.approx(per, rel=1e-9)
    assert per == pytest.approx(s.worker_seconds_per_trajectory, rel=1e-12)
    # a trajectory's time holding its worker outside generation is worker time plus its waits
    assert sum(s[c] for c in TAX) == pytest.approx(float((rec.duration - rec.llm).mean()), rel=1e-9)
    assert s.tax_wait_s == pytest.approx(float((rec.duration - rec.llm - rec.worker).mean()), abs=1e-9)
    assert min(s[c] for c in TAX) >= 0 and s.tax_exec_overhead_s > 0 and s.tax_teardown_s > 0
    if row.trajectories and fidelity == "trajectory":
        assert s.one_wait_fraction > 0.3  # the one-wait rows are filled with their phases too


def test_what_is_left_of_worker_time_is_the_tasks_own_setup_tools_and_reward(ran):
    _, fidelity, scn, res = ran
    (rec,) = res.records.values()
    work = draw_work(scn, 0, summed=sums_at_once(scn, fidelity == "step"))  # as the run drew it
    once = (rec.status == OK) & (rec.attempts == 1)
    rest = rec.worker - rec.cold - rec.overhead - rec.teardown
    own = work.setup + work.tool + work.reward
    assert once.mean() > 0.75
    np.testing.assert_allclose(rest[once], own[once], rtol=1e-9, atol=1e-9)
    assert (rec.lost[once] == 0).all()


def test_failed_attempts_are_lost_work_and_a_failed_trajectory_is_all_lost():
    for fidelity in ("step", "trajectory"):
        _, res = _run(Row("async", "both", "failures"), fidelity)
        (rec,) = res.records.values()
        s = res.summary.iloc[0]
        failed, retried = rec.status == FAILED, rec.attempts > 1
        assert failed.any() and (retried & ~failed).any()
        np.testing.assert_allclose(rec.lost[failed], rec.worker[failed], rtol=1e-12)
        assert (rec.overhead[failed] == 0).all() and (rec.teardown[failed] == 0).all()
        assert (rec.lost[retried & ~failed] > 0).all() and (rec.lost[~retried] == 0).all()
        assert s.tax_retry_s == pytest.approx(float(rec.lost.mean()), rel=1e-12) and s.tax_retry_s > 1.0


def test_uncontended_exec_overhead_is_the_drawn_overhead_and_fidelities_agree():
    """The step engine's overhead and tool latency are its calls' draws; the trajectory engine's
    each sum drawn at once (the same laws, other numbers): the other phases agree exactly, the
    overhead and the tools within their sampling errors."""
    scn, step = _run(Row("async", "none"), "step")
    _, fast = _run(Row("async", "none"), "trajectory")
    work, summed = draw_work(scn, 0), draw_work(scn, 0, summed=True)
    assert (work.tool != summed.tool).mean() > 0.99 and (work.steps == summed.steps).all()
    tool_se = float(np.hypot(work.tool.std(), summed.tool.std())) / np.sqrt(work.n)
    for res, detail in ((step, True), (fast, False)):
        (rec,) = res.records.values()
        drawn = np.concatenate([draw_substrate(scn, scn.substrates[0], 0, work, c, detail=detail).overhead
                                for c in range(-(-work.n // CHUNK))])  # fmt: skip
        ok = rec.status == OK
        np.testing.assert_allclose(rec.overhead[ok], drawn[ok], rtol=1e-9)
    a, b = step.summary.iloc[0], fast.summary.iloc[0]
    (ra,), (rb,) = step.records.values(), fast.records.values()
    se = float(np.hypot(ra.overhead.std(), rb.overhead.std())) / np.sqrt(len(ra.overhead))
    for c in TAX:
        if c in ("tax_exec_overhead_s", "tax_wait_s"):  # the wait is the time after the overhead
            assert b[c] == pytest.approx(a[c], abs=4 * se), c
        elif c == "tax_tool_s":
            assert b[c] == pytest.approx(a[c], abs=4 * tool_se) and b[c] != a[c], c
        else:
            assert b[c] == pytest.approx(a[c], rel=1e-9, abs=1e-12), c


@pytest.mark.parametrize("row", [Row("async", "both", "failures"), Row("poisson", "host", "warm_pool")],
                         ids=lambda r: r.name)  # fmt: skip
def test_the_fast_engine_splits_worker_time_as_the_step_engine_does(row):
    scn, step = _run(row, "step")
    fast = _run(row, "trajectory")[1]
    a, b = step.summary.iloc[0], fast.summary.iloc[0]
    # the same tasks' own work: each tool sum drawn at once, within the sums' sampling error
    tool = draw_work(scn, 0).tool
    assert b.tax_tool_s == pytest.approx(a.tax_tool_s, abs=4 * np.sqrt(2) * tool.std() / np.sqrt(tool.size))
    for c in ("tax_cold_start_s", "tax_exec_overhead_s", "tax_teardown_s", "tax_wait_s"):
        assert b[c] == pytest.approx(a[c], rel=0.03, abs=1e-3), c
    # lost work grows with the body a failure cuts short: other tool sums, its sampling error
    (la,), (lb,) = (r.lost for r in step.records.values()), (r.lost for r in fast.records.values())
    assert b.tax_retry_s == pytest.approx(
        a.tax_retry_s, abs=4 * np.hypot(la.std(), lb.std()) / np.sqrt(la.size)
    )
