"""The compiled pilot's bodies and engines against the SimPy step engine they transcribe: the same
scenario and seed give the same records, turns, serving metrics and pilot, to the bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simrollout.run.runner import work_for
from simrollout.scenario import load_scenario, scenario_from_dict
from simrollout.scenario.overrides import set_path
from simrollout.sim import pilot_compiled
from simrollout.sim.model import Cell
from simrollout.sim.pilot_run import run_pilot
from simrollout.sim.records import LOST, OK, TIMEOUT, Records
from simrollout.validation.fidelity import Row, build


def _scenario(load: str = "tier", **change) -> dict:
    d = build(Row("async", load, "tokens"), 48, 24, 32)  # 2 engines of 16 trajectories each
    d = set_path(d, "fidelity", "step")  # a copy: the row's engine is the module's
    for path, value in change.items():
        d = set_path(d, path.replace("__", "."), value)
    return d


def _run(d: dict, compiled: bool):
    scn = scenario_from_dict(d)
    cell = Cell(scn, scn.substrates[0], scn.cluster.concurrency, 0, work_for(scn, 0, True), "step", keep=True)
    if compiled:
        assert pilot_compiled.gaps(cell) is None
        co = pilot_compiled.attach(cell)
    cell.turn_log = []
    rec = cell.run()
    log = co.turn_log() if compiled else np.array(cell.turn_log, dtype=float).reshape(-1, 4)
    return rec, log, cell.tier.summary(cell.acc.end), cell.tier.busy_seconds


CASES = {
    "contended hosts": {},
    "timeouts cut turns": {"policy__timeout": 500.0},
    "exec failures, retried": {"substrates__0__failures": {"create": 0.05, "exec": 0.01, "teardown": 0.0},
                               "policy__retries": 2},
    "least loaded, no prefix cache": {"cluster__inference__routing": "least_loaded",
                                      "cluster__inference__prefix_cache": False},
    "compactions, a small cache, few slots": {
        "workload__tokens__max_context": 20000, "cluster__inference__engine__kv_capacity_tokens": 120000,
        "cluster__inference__engine__max_running": 6, "workload__tokens__max_tokens": 400},
    "cached attention below a chunk size": {
        "cluster__inference__engine__iteration__per_prefill_attention": 2e-9,
        "cluster__inference__engine__iteration__per_cached_attention": 6e-9,
        "cluster__inference__engine__iteration__cached_attention_below": 64,
        "cluster__inference__engine__max_batch_tokens": 2048},
    "sync batches, a warm pool, weighed operations": {
        "policy__mode": "sync", "policy__batch_size": 16, "policy__warm_pool": 8,
        "substrates__0__contention__weights": {"exec": {"create": 2.0, "teardown": 0.5}}},
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_the_compiled_bodies_and_engines_equal_the_step_engine(case):
    d = _scenario(**CASES[case])
    ref, ref_log, ref_sum, ref_busy = _run(d, False)
    rec, log, summ, busy = _run(d, True)
    for f in Records.fields():
        np.testing.assert_array_equal(getattr(rec, f), getattr(ref, f), err_msg=f)
    np.testing.assert_array_equal(log, ref_log)
    assert busy == ref_busy
    assert summ.keys() == ref_sum.keys()
    for k, v in ref_sum.items():
        assert summ[k] == v or (math.isnan(v) and math.isnan(summ[k])), k
    # each case reaches the path it is named for
    if case.startswith("timeouts"):
        assert (ref.status == TIMEOUT).any() and (ref.status == OK).any()
    if case.startswith("exec failures"):
        assert (ref.lost > 0).any() or (ref.status == LOST).any() or (ref.attempts > 1).any()
    if case.startswith("compactions"):
        assert ref_sum["compactions"] > 0 and ref_sum["prefix_evictions"] > 0
        assert ref_sum["kv_queued_fraction"] > 0


@pytest.mark.slow
def test_the_headline_pilots_are_the_simpy_pilots():
    scn = load_scenario("scenarios/1m_150step.yaml")
    for sub in scn.substrates[:2]:
        a = run_pilot(scn, sub, 4096, 0, compiled=False)
        b = run_pilot(scn, sub, 4096, 0, compiled=True)
        for f in ("load", "ratio", "busy"):
            np.testing.assert_array_equal(getattr(b, f), getattr(a, f))
        assert b.turns == a.turns and b.describe == a.describe and b.u_range == a.u_range
        assert a.luck.keys() == b.luck.keys()
        for p in a.luck:
            assert a.luck[p][:3] == b.luck[p][:3]
            np.testing.assert_array_equal(a.luck[p][3], b.luck[p][3])


def test_what_keeps_a_pilot_on_simpy_is_named():
    d = _scenario(substrates__0__contention__shared=True)
    scn = scenario_from_dict(d)
    cell = Cell(scn, scn.substrates[0], 32, 0, work_for(scn, 0, True), "step", keep=True)
    assert pilot_compiled.gaps(cell) == "operations share their contention domain"
