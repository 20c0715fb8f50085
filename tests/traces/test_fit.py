"""Importing a synthetic trace recovers its distributions; a fitted half predicts the other."""

from __future__ import annotations

import numpy as np
import pytest

from simrollout.distributions import parse_dist
from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from simrollout.traces import read_trace
from simrollout.traces import synthetic as sy
from simrollout.traces.fit import fit_workload, held_out

from .conftest import ZERO, write


def _q(d, q):
    return float(np.asarray(d.ppf(q)))


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    trajs = sy.generate(200, seed=5, steps_median=20)  # about 4,000 steps
    return trajs, write("tracelab", trajs, tmp_path_factory.mktemp("big"))


@pytest.mark.slow
def test_import_recovers_p50_p99(big):
    trajs, paths = big
    ts = read_trace("tracelab", paths)
    assert ts.steps > 3000
    section, rep = fit_workload(ts)
    wl = section["workload"]
    truth = {
        "llm_time": [s.llm for t in trajs for s in t.steps],
        "steps": [len(t.steps) for t in trajs],
        "tokens.output": [s.output_tokens for t in trajs for s in t.steps],
    }
    for name, (cat, *_) in sy.TOOLS.items():
        truth[f"tools.{cat}"] = [c[1] for t in trajs for s in t.steps for c in s.calls if c[0] == name]
    for key, x in truth.items():
        node = wl if "." not in key else (section["tokens"] if key.startswith("tokens") else wl["tools"])
        spec = node[key.split(".")[1]] if "." in key else node[key]
        dist = parse_dist(spec["latency"] if key.startswith("tools.") else spec)
        for q in (0.5, 0.99):
            want = float(np.quantile(np.maximum(x, 1e-3), q))
            assert _q(dist, q) == pytest.approx(want, rel=0.05), (key, q)
        assert rep[key]["n"] == len(x)
    # each quantity says how the family fitted
    assert rep["llm_time"]["family"] == "lognormal" and rep["llm_time"]["ks_pvalue"] > 0.05
    assert {"ks", "family_rel_error"} <= set(rep["tools.shell"])


@pytest.mark.slow
def test_held_out_half_predicts_duration(tmp_path):
    trajs = sy.generate(1000, seed=9, steps_median=10)
    ts = read_trace("tracelab", write("tracelab", trajs, tmp_path))
    train, test = held_out(ts)
    section, _ = fit_workload(train)
    wl = section["workload"] | {"trajectories": 4000}
    scn = scenario_from_dict({"version": 1, "seed": 2, "fidelity": "trajectory", "workload": wl,
                              "substrates": ZERO, "cluster": {"concurrency": 1}})  # fmt: skip
    res = run_scenario(scn)
    d = next(iter(res.records.values())).duration
    other = np.array([t.duration() for t in test.trajectories])
    for q in (0.5, 0.9):
        assert np.quantile(d, q) == pytest.approx(np.quantile(other, q), rel=0.10), q
