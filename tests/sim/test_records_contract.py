"""The trajectory records' contract with docs/extending.md's metric recipe: every engine writes every
field of :class:`simrollout.sim.records.Records`, and the recipe names exactly the modules where a
field is written (the rows an engine ends a trajectory with, and the bodies' results they take)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from simrollout.run.runner import CellKey, run_cell
from simrollout.scenario import scenario_from_dict
from simrollout.sim.engines import ENGINES
from simrollout.sim.records import RECORD_TYPES, ROW, Records
from simrollout.validation.fidelity import Row, build

ROOT = Path(__file__).resolve().parents[2]
# a field an engine leaves at its default by construction: the compiled engine runs no warm pool
# (Scenario.compiled_gaps), so no trajectory of it starts warm
LEFT_DEFAULT = {"compiled": {"warm"}}


def _scenario(engine: str, warm: bool):
    """A small cell with failures, retries, timeouts and a create-rate limit (and a warm pool where
    the engine runs one)."""
    d = build(Row("async", "host", "failures"), 160, 6, 16)
    d["policy"]["timeout"] = 6 * 30.0  # some bodies reach their deadline
    d["substrates"][0]["create_rate"] = 4.0  # creates wait for their token
    if warm:
        d["policy"]["warm_pool"] = 8
        d["substrates"][0]["warm_start"] = {"kind": "lognormal", "median": 0.05, "p99": 0.3}
    return scenario_from_dict({**d, "fidelity": engine})


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_writes_every_field_of_the_records(engine):
    warm = "warm" not in LEFT_DEFAULT.get(engine, set())
    scn = _scenario(engine, warm)
    rec = run_cell(scn, CellKey(0, 16, 0), keep=True).records
    assert isinstance(rec, Records)
    assert set(Records.fields()) == {"arrival", *ROW}  # the recipe: a field of the row is one of Records
    n = scn.trajectories
    for f in Records.fields():
        col = getattr(rec, f)
        assert len(col) == n, f
        assert col.dtype == np.dtype(RECORD_TYPES.get(f, np.float64)), f
        assert np.isfinite(col.astype(np.float64)).all(), f
    left = LEFT_DEFAULT.get(engine, set())
    written = {f for f in ROW if getattr(rec, f).astype(np.float64).any()}
    assert written == set(ROW) - left, f"{engine} leaves at zero: {sorted(set(ROW) - left - written)}"
    for f in left:  # what it leaves, it leaves at the default
        assert not getattr(rec, f).any(), f
    assert (rec.status == 2).any() and (rec.attempts > 1).any()  # timeouts and retries ran
    assert (rec.end >= rec.start).all() and (rec.worker >= rec.overhead).all()


def _recipe_modules() -> set[str]:
    """The modules step 1 of docs/extending.md's metric recipe says a trajectory's field is
    written in (the sentence up to "A cell-level quantity")."""
    text = (ROOT / "docs" / "extending.md").read_text()
    section = text.split("## A new metric", 1)[1].split("\n2. ", 1)[0]
    step1 = section.split("A cell-level quantity", 1)[0]
    named = re.findall(r"`((?:simrollout/)?sim/[\w/]+\.py)`", step1)
    return {m if m.startswith("simrollout/") else f"simrollout/{m}" for m in named}


def _writers() -> set[str]:
    """The modules that write a trajectory's fields: where the row is declared, where an engine
    ends a trajectory with a ``Row`` or writes its columns ``R_<name>`` (and where the compiled
    loop's worker floats they come from are named), and where a body ends with its
    ``BodyResult`` (what a row takes from the body)."""
    out = set()
    for p in sorted((ROOT / "simrollout" / "sim").rglob("*.py")):  # the engines' modules
        src = p.read_text()
        declares = re.search(r"^(ROW|NF) = ", src, re.M)
        if declares or re.search(r"\b(Row|BodyResult)\(", src) or "row[rec.R_" in src:
            out.add(p.relative_to(ROOT).as_posix())
    return out


def test_the_metric_recipe_names_exactly_the_modules_that_write_a_records_field():
    recipe, writers = _recipe_modules(), _writers()
    assert "simrollout/sim/records.py" in writers and len(writers) >= 4  # the scan found them
    assert recipe == writers, (
        f"named but writing none: {sorted(recipe - writers)}; unnamed: {sorted(writers - recipe)}"
    )
