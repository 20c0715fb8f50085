"""The notebooks run top to bottom at small sizes."""

import os

import nbformat
import pytest
from nbclient import NotebookClient


@pytest.mark.parametrize("name", ["capacity_planning", "calibration"])
def test_notebook_runs(name, root, monkeypatch):
    monkeypatch.setenv("SIMROLLOUT_NOTEBOOK_N", "3000")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(root / "notebooks" / f"{name}.ipynb", as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(root)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any(o.get("output_type") in ("execute_result", "display_data") for o in outputs)
    assert os.environ["SIMROLLOUT_NOTEBOOK_N"] == "3000"
