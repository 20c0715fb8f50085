"""The engines' registry: the names a scenario's ``fidelity`` takes are its entries, routing and
the runner read each engine's entry, and no module but the schema compares a fidelity with a
spelled-out name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from simrollout.scenario import Scenario, scenario_from_dict
from simrollout.sim.engines import COMPILED, ENGINES, STEP, TRAJECTORY, engine_named
from simrollout.sim.route import resolved_engine
from simrollout.validation.fidelity import Row, build

ROOT = Path(__file__).resolve().parents[2]


def test_the_schema_offers_the_registry_s_engines_and_auto():
    assert set(get_args(Scenario.model_fields["fidelity"].annotation)) == {"auto", *ENGINES}
    assert [e.name for e in ENGINES.values()] == list(ENGINES)
    for e in ENGINES.values():
        assert e.covers and e.runs and engine_named(e.name) is e


def test_each_entry_says_how_its_cells_run():
    assert STEP.per_step and STEP.cell == STEP.name and not STEP.compiled
    assert not TRAJECTORY.per_step and TRAJECTORY.cell == TRAJECTORY.name
    assert COMPILED.compiled and COMPILED.cell == TRAJECTORY.name  # the trajectory engine's cell
    tokens = scenario_from_dict(build(Row("async", "none", "tokens"), 200, 5, 16))
    loop = scenario_from_dict(build(Row("async", "none", "train_tokens"), 0, 20, 256))
    # a token workload: the step engine runs every turn; the others take a pilot's load, but the
    # compiled engine runs a training loop's turns on its own serving engines
    assert STEP.draws_steps(tokens) and not STEP.pilots(tokens)
    assert TRAJECTORY.pilots(tokens) and TRAJECTORY.pilots(loop) and COMPILED.pilots(tokens)
    assert COMPILED.draws_steps(loop) and not COMPILED.pilots(loop)


def test_routing_resolves_to_registry_entries():
    small = scenario_from_dict(build(Row("async", "none"), 200, 5, 16))
    assert resolved_engine(small) is STEP  # small enough to simulate every step
    big = scenario_from_dict(build(Row("async", "host"), 1_000_000, 20, 256))
    assert resolved_engine(big) is COMPILED
    warm = scenario_from_dict(build(Row("async", "host", "warm_pool"), 1_000_000, 20, 256))
    assert COMPILED.gaps(warm) == "a warm pool" and resolved_engine(warm) is TRAJECTORY
    assert STEP.gaps(warm) is None


def test_no_module_but_the_schema_compares_a_fidelity_with_a_spelled_out_name():
    pattern = re.compile(r"""(fidelity|fid)\w*\)?\s*[!=]=\s*["'](step|trajectory|compiled)["']""")
    found = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "simrollout").rglob("*.py")
        if pattern.search(p.read_text())
    }
    assert found == {"simrollout/scenario/model.py"}
