"""A sweep's table: the swept variables and the row's names first, the serving columns only where
the rows have serving engines (as docs/examples.md shows them), the training ones with a loop."""

import numpy as np
import pandas as pd

from simrollout.run import html_report
from simrollout.run.sweep_output import sweep_columns, sweep_report
from simrollout.scenario import load_scenario
from tests.conftest import ROOT

BASE = pd.DataFrame(
    {
        "cluster.inference.engines": [16, 64],
        "substrate": ["docker", "docker"],
        "concurrency": [256, 256],
        "trajectories_per_hour": [276.0, 1248.0],
        "makespan_hours": [3.71, 0.82],
        "duration_p99": [9000.0, 1500.0],
        "worker_hours": [40.0, 39.0],
        "cost_usd": [128.0, 107.0],
        "gpu_hours": [59.3, 52.6],
        "duration_p50": [3118.0, 517.0],
    }
)
SERVING = {"kv_queued_fraction": [0.96, 0.0], "prefix_hit_rate": [0.02, 0.99],
           "reprefill_gpu_hours": [26.0, 0.3], "llm_request_p50": [51.9, 3.3]}  # fmt: skip


def heads(df, swept):
    cols, keys = sweep_columns(df, swept)
    return [h for _, h, _ in cols], keys


def test_serving_columns_show_where_the_rows_have_serving_engines():
    got, keys = heads(BASE.assign(**SERVING), ["cluster.inference.engines"])
    assert keys == 3
    assert got == ["engines", "substrate", "conc.", "traj/h", "makespan h", "dur p99 s",
                   "worker-h", "cost $", "GPU-h", "KV queued", "prefix hit", "re-prefill GPU-h", "turn p50 s",
                   "dur p50 s"]  # fmt: skip
    plain, _ = heads(BASE, ["cluster.inference.engines"])
    assert plain == ["engines", "substrate", "conc.", "traj/h", "makespan h", "dur p99 s",
                     "worker-h", "cost $"]  # fmt: skip


def test_a_concurrency_sweep_names_it_once_and_training_adds_its_columns():
    df = BASE.drop(columns="cluster.inference.engines").assign(
        **{"cluster.concurrency": [64, 256]},
        training_steps_per_day=[57.0, 156.0],
        staleness_max=[0.0, np.nan],
    )
    got, keys = heads(df, ["cluster.concurrency"])
    assert keys == 2 and got[:5] == ["substrate", "conc.", "steps/day", "stale max", "traj/h"]


def test_the_report_names_the_grid_and_its_inputs():
    scn = load_scenario(ROOT / "scenarios" / "small.yaml")
    report = sweep_report(BASE, {"cluster.inference.engines": [16, 64]}, scn, [])
    facts = dict(report.facts)
    assert facts["command"].endswith("small.yaml --set cluster.inference.engines=16,64")
    assert facts["grid"] == "2 rows: cluster.inference.engines = 16, 64"
    assert facts["seed"] == "1" and facts["fidelity"].startswith("step (auto:")
    page = html_report.render(report)
    assert page.count("<tr>") == 3 and ">3,118.0<" not in page and ">9,000.0<" in page
