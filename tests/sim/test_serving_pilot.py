"""Serving engines at trajectory fidelity: the unloaded turn, the pilot's slice, and the engine
count in the headline scenario (the fidelity matrix holds the rest against the step engine)."""

from __future__ import annotations

import numpy as np
import pytest

from simrollout.run.executors import run_scenario
from simrollout.run.runner import work_for
from simrollout.scenario import load_scenario, scenario_from_dict
from simrollout.scenario.overrides import base_dict
from simrollout.sim.model import Cell
from simrollout.sim.pilot_run import run_pilot, slice_scenario
from simrollout.sim.route import resolved_fidelity
from simrollout.sim.serving_pilot import FIRST, LAST, STEADY, phases
from simrollout.validation.fidelity import Row, build


def _alone(tokens: dict, steps: int = 12, trajectories: int = 3) -> dict:
    d = build(Row("async", "none", "tokens"), trajectories, steps, trajectories)
    d["workload"]["tokens"] = tokens
    d["workload"]["tools"] = {"t": {"weight": 1, "latency": 0.5}}
    d["cluster"]["inference"]["engines"] = trajectories  # one engine each: nothing shares one
    return d


@pytest.mark.parametrize(
    "tokens",
    [
        {"prompt": 3000, "appended": {"kind": "lognormal", "median": 900, "p99": 20000},
         "output": {"kind": "lognormal", "median": 200, "p99": 2000}},
        # a small window: compactions, and prefills longer than one iteration's 8,192 tokens
        {"prompt": 9000, "appended": {"kind": "lognormal", "median": 4000, "p99": 30000},
         "output": {"kind": "lognormal", "median": 100, "p99": 900}, "max_context": 40000},
    ],
)  # fmt: skip
def test_unloaded_turns_equal_the_step_engine_for_a_trajectory_alone_on_its_engine(tokens):
    scn = scenario_from_dict({**_alone(tokens), "fidelity": "step"})
    work = work_for(scn, 0, True)
    cell = Cell(scn, scn.substrates[0], 3, 0, work, "step", keep=True)
    rec = cell.run()
    assert (cell.tier.compacted > 0) == ("max_context" in tokens)
    np.testing.assert_allclose(rec.llm, work.llm, rtol=1e-9)
    # and per turn: the workload's per-step unloaded seconds sum to each trajectory's
    per = np.add.reduceat(work.step_llm, work.step_off[:-1])
    np.testing.assert_allclose(per, work.llm, rtol=1e-12)


def test_uncontended_engines_make_the_trajectory_engine_exact():
    d = _alone({"prompt": 2000, "appended": 500, "output": 150}, steps=10, trajectories=8)
    d["workload"]["trajectories"] = 40
    out = {}
    for f in ("step", "trajectory"):
        scn = scenario_from_dict({**d, "fidelity": f})
        scn._overhead_per_call = True  # the step engine's exec overhead draws
        out[f] = run_scenario(scn, jobs=1).summary.iloc[0]
    for m in ("makespan_hours", "duration_p50", "duration_p99", "worker_hours"):
        assert out["trajectory"][m] == pytest.approx(out["step"][m], rel=1e-9), m
    assert out["trajectory"].serving_from.startswith("pilot: ")


def test_the_pilot_is_a_slice_of_the_cluster():
    d = build(Row("async", "tier", "tokens"), 4000, 20, 256)  # 16 engines, 2 hosts x 128
    d["substrates"][0]["create_rate"] = 40.0
    d["policy"]["warm_pool"] = 32
    d["cluster"]["clients"] = 8
    scn = scenario_from_dict(d)
    pilot, conc = slice_scenario(scn, scn.substrates[0], 256)
    # 16 in flight per engine: 4 engines carry 64 in flight, a quarter of everything
    assert pilot.cluster.inference.engines == 4 and conc == 64
    assert pilot.trajectories == 4 * 64 and resolved_fidelity(pilot) == "step"
    sub = pilot.substrates[0]
    assert sub.capacity.hosts == 1 and sub.create_rate == pytest.approx(10.0)
    assert pilot.policy.warm_pool == 8 and pilot.cluster.clients == 2
    # fewer hosts than one in the slice: one host with the slice's share of the slots
    d["substrates"][0]["capacity"] = {"hosts": 2, "sandboxes_per_host": 64}
    pilot, conc = slice_scenario(scenario_from_dict(d), scn.substrates[0], 256)
    cap = pilot.substrates[0].capacity
    assert (cap.hosts, cap.sandboxes_per_host, conc) == (1, 32, 64)


def test_phases_of_an_async_batch_run_and_of_the_others():
    scn = scenario_from_dict(build(Row("async", "none"), 10, 5, 3))
    assert phases(10, 3, scn).tolist() == [FIRST] * 3 + [STEADY] * 4 + [LAST] * 3
    assert phases(10, 3, scn, 6, 8).tolist() == [STEADY, LAST]
    sync = scenario_from_dict(build(Row("sync", "none"), 10, 5, 3))
    assert set(phases(10, 3, sync).tolist()) == {STEADY}


@pytest.mark.slow
def test_pilot_load_curve_rises_with_the_load_and_luck_falls_with_size():
    d = build(Row("async", "tier", "tokens"), 2000, 20, 256)
    scn = scenario_from_dict(d)
    p = run_pilot(scn, scn.substrates[0], 256, 0)
    assert np.all(np.diff(p.ratio) >= 0) and np.all(np.diff(p.busy) >= -1e-12)
    # KV-bound at 16 per engine: turns several times slower than alone, engines mostly busy
    assert p.at(16)[0] > 3 * p.at(1)[0]
    assert 0.5 < p.at(16)[1] <= 1.0 + 1e-9
    # a wait for KV space does not grow with the turn: bigger trajectories are luckier
    assert p.luck[STEADY][1] < 0


def headline(trajectories: int, engines: int, fidelity: str = "trajectory"):
    d = base_dict(load_scenario("scenarios/1m_150step.yaml"))
    d["substrates"] = d["substrates"][:1]
    d["substrates"][0]["capacity"]["hosts"] = 8
    d["workload"].update(trajectories=trajectories, steps=40)
    d["cluster"].update(concurrency=512)
    d["cluster"]["inference"]["engines"] = engines
    scn = scenario_from_dict({**d, "fidelity": fidelity})
    scn._tools_per_call = True  # the step engine's tool latencies: the engines are what is compared
    return run_scenario(scn, jobs=1).summary.iloc[0]


@pytest.mark.slow
def test_the_headline_engine_count_changes_makespan_and_gpu_cost():
    few, many = headline(4096, 16), headline(4096, 64)
    # 32 trajectories per engine do not fit its KV cache: turns queue, the run takes longer
    assert few.kv_queued_fraction > 0.2 > many.kv_queued_fraction
    assert few.makespan_hours > 1.5 * many.makespan_hours
    assert few.gpu_idle_fraction < many.gpu_idle_fraction
    assert few.gpu_hours != pytest.approx(many.gpu_hours, rel=0.05)
    again = headline(4096, 16)  # same scenario and seed, same numbers
    assert again.makespan_hours == few.makespan_hours and again.gpu_hours == few.gpu_hours


@pytest.mark.slow
def test_headline_engines_in_the_fast_engine_match_the_step_engine():
    step, fast = headline(3072, 64, "step"), headline(3072, 64, "trajectory")  # 6 waves
    for m, limit in (("makespan_hours", 3.0), ("duration_p50", 5.0), ("duration_p99", 8.0)):
        assert abs(fast[m] / step[m] - 1) * 100 <= limit, (m, fast[m], step[m])
    assert fast.worker_hours == pytest.approx(step.worker_hours, rel=5e-3)
    assert abs(fast.gpu_idle_fraction - step.gpu_idle_fraction) < 0.1
