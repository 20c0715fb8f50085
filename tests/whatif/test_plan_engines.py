"""The planner searches the inference engine count and says when the engines bind."""

from __future__ import annotations

from simrollout.scenario import scenario_from_dict
from simrollout.whatif.planner import Goal, plan
from tests.conftest import cli
from tests.sim.test_serving import scenario


def test_plan_finds_the_fewest_engines_that_meet_a_throughput():
    d = scenario(1)
    d["workload"]["trajectories"] = 64
    scn = scenario_from_dict(d)
    p = plan(scn, Goal(throughput_per_h=1000.0), concurrency=[32], engines=[1, 2, 4, 8], sample=64, check=0)
    t = p.table.set_index("engines")
    # more engines: never slower; cost grows with the engines once they stop binding
    spans = t.makespan_s.loc[[1, 2, 4, 8]].to_numpy()
    assert all(b <= a * 1.001 for a, b in zip(spans, spans[1:]))
    assert t.binding.loc[1].startswith("the inference tier")
    assert t.trajectories_per_hour.loc[2] < 1000 <= t.trajectories_per_hour.loc[4]
    met = t[t.trajectories_per_hour >= 1000]
    assert p.best is not None and p.best.engines == met.cost_usd.idxmin() == min(met.index)
    assert "engine(s)" in p.describe()


def test_engines_option_needs_an_inference_tier(tmp_path):
    import yaml

    from tests.conftest import make

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make()))
    res = cli("plan", path, "--throughput", 10, "--engines", "1,2", "--check", 0)
    assert res.returncode == 2 and "--engines needs cluster.inference" in res.stderr
