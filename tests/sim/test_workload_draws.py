"""Tool latency sums drawn at once (trajectory and compiled fidelity) against the calls drawn one
by one, and the per-call detail of the bodies that need it."""

import numpy as np
import pytest
from scipy import stats

from simrollout.scenario import load_scenario
from simrollout.sim.substrate_draws import chunk_detail
from simrollout.sim.workload_draws import CHUNK, _sum_by, draw_work, sums_at_once

SCENARIO = """
version: 1
seed: 3
workload:
  trajectories: 40000
  steps: {kind: discrete, values: [10, 30, 60], weights: [0.3, 0.4, 0.3]}
  llm_time: {kind: lognormal, median: 5.7, p99: 84}
  calls_per_step: {kind: discrete, values: [1, 2, 3], weights: [0.8, 0.15, 0.05]}
  tool_timeout: 60
  tools:
    shell: {weight: 0.76, latency: {kind: lognormal, median: 0.85, p99: 235}}
    file_read: {weight: 0.24, latency: {kind: empirical, quantiles: {0.5: 0.043, 0.9: 0.47}}, category: read}
substrates:
  - name: docker
    cold_start: 0.2
    exec_overhead: {kind: lognormal, median: 0.053, p99: 0.2}
    teardown: 0.1
    tool_speed: {shell: 1.6, read: 0.5}
cluster: {concurrency: 64}
policy: {mode: async, timeout: 900}
"""


@pytest.fixture(scope="module")
def scn(tmp_path_factory):
    path = tmp_path_factory.mktemp("wl") / "s.yaml"
    path.write_text(SCENARIO)
    return load_scenario(path)


@pytest.fixture(scope="module")
def both(scn):
    sub = scn.substrates[0]
    return draw_work(scn, 0, sub=sub), draw_work(scn, 0, sub=sub, summed=True)


def test_only_a_cell_that_reads_no_call_draws_sums(scn):
    assert sums_at_once(scn, step=False) and not sums_at_once(scn, step=True)
    scn._overhead_per_call = True
    try:
        assert not sums_at_once(scn, step=False)
    finally:
        scn._overhead_per_call = False


def test_tool_sums_have_the_law_of_their_calls_sums(both):
    """Speed factors per category and the tool timeout are in the law the sums are drawn from:
    the sums of each number of calls against the sums of the calls drawn one by one."""
    calls, summed = both
    assert (calls.steps == summed.steps).all() and (calls.calls == summed.calls).all()
    assert (calls.llm == summed.llm).all()
    assert (calls.tool != summed.tool).mean() > 0.99  # other numbers
    for m in np.unique(calls.calls)[::7]:
        at = calls.calls == m
        if at.sum() > 500:
            assert stats.ks_2samp(calls.tool[at], summed.tool[at]).pvalue > 1e-4, m
    se = np.hypot(calls.tool.std(), summed.tool.std()) / np.sqrt(calls.n)
    assert abs(calls.tool.mean() - summed.tool.mean()) < 4 * se


def test_a_body_near_its_deadline_keeps_calls_adding_up_to_its_sum(both):
    _, summed = both
    assert len(summed.kept) > 20
    for i, (step_llm, step_calls, call_tool) in summed.kept.items():
        assert step_llm.size == summed.steps[i] and call_tool.size == step_calls.sum() == summed.calls[i]
        assert call_tool.sum() == pytest.approx(summed.tool[i], rel=1e-9)
        assert (call_tool >= 0).all()


def test_a_chunk_drawn_again_holds_each_trajectorys_drawn_sum(scn, both):
    _, summed = both
    d = chunk_detail(scn, scn.substrates[0], 0, summed, 1, summed=True)
    lo = CHUNK
    n = min(CHUNK, summed.n - lo)
    calls = summed.calls[lo : lo + n]
    np.testing.assert_allclose(_sum_by(d.call_tool, calls), summed.tool[lo : lo + n], rtol=1e-9)
    for i in (k for k in summed.kept if lo <= k < lo + n):
        np.testing.assert_array_equal(
            d.call_tool[d.call_off[i - lo] : d.call_off[i - lo + 1]], summed.kept[i][2]
        )


def test_same_seed_same_sums(scn):
    a = draw_work(scn, 0, summed=True, sub=scn.substrates[0])
    b = draw_work(scn, 0, summed=True, sub=scn.substrates[0], jobs=2)  # chunks in two processes
    np.testing.assert_array_equal(a.tool, b.tool)
    assert a.kept.keys() == b.kept.keys()


def test_a_token_workloads_turns_are_the_same_drawn_with_or_without_detail():
    """Without per-step detail the token counts are rounded inside the turns' compiled pass; the
    turns and their sums must be those of the counts the step engine reads, to the bit."""
    from simrollout.scenario import scenario_from_dict
    from simrollout.validation.fidelity import Row, build

    scn = scenario_from_dict({**build(Row("async", "tier", "tokens"), 3000, 8, 64), "fidelity": "trajectory"})
    fast, full = draw_work(scn, 0), draw_work(scn, 0, detail=True)
    assert np.array_equal(fast.llm, full.llm) and fast.llm.min() > 0
    assert full.step_output is not None and fast.step_output is None


def test_a_lognormal_drawn_in_place_is_the_former_expression_to_the_bit():
    from simrollout.distributions import parse_dist

    for spec in ({"kind": "lognormal", "median": 875, "p99": 92000},
                 {"kind": "lognormal", "mu": 0.3, "sigma": 1.2, "loc": 2.5}):  # fmt: skip
        d = parse_dist(spec)
        mu, sigma = d.params
        want = d.loc + np.exp(mu + sigma * np.random.default_rng(1).standard_normal(10_000, dtype=np.float32))
        got = d.sample(np.random.default_rng(1), 10_000)
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_fused_turn_sums_and_constant_calls_are_the_per_turn_paths_to_the_bit():
    """Without detail a token workload's turns are summed in their compiled pass (never stored)
    and a constant ``calls_per_step`` gives each trajectory's calls as steps times it: the sums,
    calls and the kept bodies' turns and calls of the chunk drawn with per-step detail (runs of
    1 to 260 turns: numpy's pairwise sums in blocks and halves). A drawn trajectory has at least
    one step (zero-step runs: tests/sim/test_turn_seconds.py)."""
    from simrollout.scenario import scenario_from_dict
    from simrollout.sim.workload_draws import _draw_chunk
    from tests.conftest import ROOT

    engine = str(ROOT / "calibration/engines/llama3.1-8b-h100-vllm.yaml")
    scn = scenario_from_dict({
        "version": 1, "seed": 11,
        "workload": {"trajectories": 3000, "max_turns": 260, "calls_per_step": 2,
                     "steps": {"kind": "discrete", "values": [1, 7, 40, 300], "weights": [0.2, 0.2, 0.3, 0.3]},
                     "tokens": {"prompt": 8000, "appended": {"kind": "lognormal", "median": 875, "p99": 92000},
                                "output": {"kind": "lognormal", "median": 214, "p99": 4800},
                                "max_context": 65536, "max_tokens": 2000},
                     "tools": {"read": {"weight": 1.0, "latency": 0.05}}},
        "substrates": [{"name": "local", "cold_start": 0.2, "exec_overhead": 0.05, "teardown": 0.1}],
        "cluster": {"concurrency": 64, "inference": {"engines": 8, "profile": engine}},
        "policy": {"mode": "async", "timeout": 400}})  # fmt: skip
    fast, full = _draw_chunk(scn, 0, False, 0, summed=True), _draw_chunk(scn, 0, True, 0)
    assert fast["llm"].tobytes() == full["llm"].tobytes() and (np.diff(fast["llm"]) != 0).any()
    assert fast["calls"].dtype == full["calls"].dtype and np.array_equal(fast["calls"], 2 * full["steps"])
    assert np.array_equal(fast["calls"], full["calls"]) and "step_calls" not in fast
    off = np.concatenate([[0], np.cumsum(full["steps"])])
    assert 50 < len(fast["kept"]) < 3000
    for i, (step_llm, step_calls, _) in fast["kept"].items():
        assert step_llm.tobytes() == full["step_llm"][off[i] : off[i + 1]].tobytes()
        assert step_calls.tobytes() == full["step_calls"][off[i] : off[i + 1]].tobytes()
