"""The notebooks run top to bottom at small sizes, and what they compute is checked: a last cell
appended here reports the notebook's own variables, and the test holds them to independent
answers (the same run outside the notebook, the plan's ordering, the probes' own medians)."""

import json

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import simrollout as sr

FACTS = {
    "capacity_planning": """
import json
print("FACTS " + json.dumps({
    "n": N, "worker_hours": s.worker_hours.to_dict(), "cost": s.cost_usd.to_dict(),
    "sweep": sw[["substrate", "concurrency", "trajectories_per_hour"]].to_dict("records"),
    "plans": [{"deadline_h": r["deadline_h"], "cost": r["cost"]} for r in rows],
}))
""",
    "calibration": """
import json
from simrollout.calibration.probe import read_records as _read
_med = {}
for _name, _f in files.items():
    _ex = [r["latency"] for r in _read([_f]) if r["phase"] == "exec" and r["ok"] and r["concurrency"] == 1]
    _med[_name] = float(np.median(_ex))
print("FACTS " + json.dumps({
    "backends": backends, "exec_median": _med,
    "fitted_exec_median": {k: float(Substrate.model_validate({"name": k, **v.substrate}).exec_overhead.ppf(0.5))
                           for k, v in fresh.items()},
    "mixed": res.summary[["substrate", "worker_hours"]].to_dict("records"),
}))
""",
}


def _run(root, name, monkeypatch) -> dict:
    monkeypatch.setenv("SIMROLLOUT_NOTEBOOK_N", "3000")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(root / "notebooks" / f"{name}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(FACTS[name]))
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(root)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any(o.get("output_type") == "execute_result" for o in outputs)  # its tables were shown
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    return json.loads(text.split("FACTS ", 1)[1].splitlines()[0])


@pytest.mark.slow
def test_capacity_planning_notebook(root, monkeypatch):
    facts = _run(root, "capacity_planning", monkeypatch)
    assert facts["n"] == 3000
    # the notebook's run is the same run made here: same scenario and seed, same numbers
    scn = sr.override(sr.load(root / "scenarios" / "1m_150step.yaml"), {"workload.trajectories": 3000})
    mine = sr.run(scn, keep_records=False, executor="serial").summary.set_index("substrate")
    for sub, wh in facts["worker_hours"].items():
        assert wh == pytest.approx(mine.worker_hours[sub], rel=1e-12)
        assert facts["cost"][sub] == pytest.approx(mine.cost_usd[sub], rel=1e-12)
    assert len(facts["sweep"]) == len(scn.substrates) * 3
    assert all(r["trajectories_per_hour"] > 0 for r in facts["sweep"])
    # a looser deadline never costs more
    costs = [
        p["cost"] for p in sorted(facts["plans"], key=lambda p: p["deadline_h"]) if p["cost"] is not None
    ]
    assert costs and all(b <= a + 1e-9 for a, b in zip(costs, costs[1:]))


@pytest.mark.slow
def test_calibration_notebook(root, monkeypatch):
    facts = _run(root, "calibration", monkeypatch)
    assert "process" in facts["backends"]
    for name, med in facts["exec_median"].items():
        # the fitted profile reproduces the median exec round trip of the level it was fitted on (1)
        assert facts["fitted_exec_median"][name] == pytest.approx(med, rel=0.25)
    mixed = {r["substrate"]: r["worker_hours"] for r in facts["mixed"]}
    assert set(mixed) >= {f"{b}-fresh" for b in facts["backends"]} | {"daytona"}
    assert all(np.isfinite(v) and v > 0 for v in mixed.values())
