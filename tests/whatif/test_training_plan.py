"""Plans and sweeps over the training loop: steps per day as a target, training fields as a grid."""

from __future__ import annotations

import pytest
import yaml

from simrollout.scenario import scenario_from_dict
from simrollout.whatif.sweeps import sweep
from simrollout.whatif.training_plan import plan_training
from tests.conftest import cli, make


def _scenario() -> dict:
    d = make(**{"workload.steps": 4, "workload.llm_time": {"kind": "lognormal", "median": 2, "p99": 12},
                "workload.calls_per_step": 1, "substrates.0.cold_start": 0.4, "substrates.0.teardown": 0.1,
                "cluster.concurrency": 16, "cluster.inference": {"engines": 4, "price_per_hour": 2.0}})  # fmt: skip
    d["substrates"].append({"name": "slow", "cold_start": 20, "exec_overhead": 1.0, "teardown": 5,
                            "billing": {"price_per_second": 0.001}})  # fmt: skip
    d["workload"].pop("trajectories")
    d["training"] = {"prompts_per_step": 4, "samples_per_prompt": 4, "steps": 100, "train_time": 5,
                     "weight_sync_time": 1}  # fmt: skip
    return d


def test_plan_finds_the_cheapest_configuration_reaching_steps_per_day():
    scn = scenario_from_dict(_scenario())
    p = plan_training(scn, None, steps_per_day=1500, concurrency=[4, 16], sample_steps=6, executor="serial")
    t = p.table.set_index(["substrate", "concurrency"])
    # fewer slots than a step's 16 trajectories serialise generation: slower per step
    assert t.loc[("s", 4), "steps_per_day"] < t.loc[("s", 16), "steps_per_day"]
    # the slow substrate's 20 s cold start and 1 s per call cost it steps per day
    assert t.loc[("slow", 16), "steps_per_day"] < t.loc[("s", 16), "steps_per_day"]
    assert p.best is not None and p.best.substrate == "s" and p.best.steps_per_day >= 1500
    # the projection: the whole run at the sampled rate
    b = p.best
    assert b.time_s < 100 / b.steps_per_day * 86400 + 60
    assert "steps/day" in p.describe() and "Checked with 3 replications" in p.describe()


@pytest.mark.slow
def test_plan_says_when_no_configuration_reaches_the_target(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(_scenario()))
    r = cli("plan", str(path), "--steps-per-day", "1000000", "--concurrency", "16", "--executor", "serial")
    assert r.returncode == 1
    assert "No configuration meets 1,000,000.0 training steps/day" in r.stdout
    r = cli("plan", str(path), "--throughput", "100", "--concurrency", "16")
    assert r.returncode == 2 and "--steps-per-day, --deadline or --budget" in r.stderr


def test_sweep_over_staleness_changes_steps_per_day():
    d = _scenario()
    d["substrates"] = d["substrates"][:1]
    d["training"].update(mode="async", placement="disaggregated", trainer={"gpus": 2}, steps=12, task_spread=0.8,
                         train_time=2)  # fmt: skip
    df = sweep(scenario_from_dict(d), {"training.max_staleness": [0, 2]}, executor="serial")
    assert list(df["training.max_staleness"]) == [0, 2]
    assert (df.staleness_max <= df["training.max_staleness"]).all()
    # a looser bound keeps the rollout side busy through the training steps
    assert df.training_steps_per_day.iloc[1] > df.training_steps_per_day.iloc[0]
