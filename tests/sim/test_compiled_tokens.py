"""A training loop on a token workload through the compiled engine (simrollout.sim.compiled_tokens):
against the step engine on the fidelity matrix's train_tokens rows, its mechanisms (interrupted
requests resumed, cancelled groups, the gate), its reproducibility, its route and its compile."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from simrollout.scenario import load_scenario, scenario_from_dict
from simrollout.sim.engines import COMPILED, STEP, TRAJECTORY
from simrollout.sim.route import fidelity_choice, resolved_engine
from simrollout.validation.fidelity import Row, build, compare, compiled_rows, token_rows
from simrollout.validation.verdicts import TRAINING_TOLERANCE
from tests.sim.test_compiled_training import _cell

ROOT = Path(__file__).resolve().parents[2]


def _tokens(mode: str = "async", load: str = "host", steps: int = 12, **training) -> dict:
    d = build(Row(mode, load, "train_tokens"), 0, 20, 256)
    d["training"].update(steps=steps, **training)
    return d


@pytest.mark.slow
@pytest.mark.parametrize("row", [Row("async", "host", "train_tokens"), Row("one_step_off", "none", "train_tokens"),
                                 Row("sync", "host", "train_tokens")], ids=lambda r: r.name)  # fmt: skip
def test_within_the_training_rows_tolerance_of_the_step_engine(row):
    c = compare(row, fast="compiled")
    for metric, limit in TRAINING_TOLERANCE.items():
        assert abs(c.diff(metric)) <= limit, (row.name, metric, c.diff(metric))
    # the serving engines' own figures follow the step engine's too
    for metric in ("llm_requests", "engine_busy_fraction", "kv_held_mean", "ttft_p50"):
        assert abs(c.diff(metric)) <= 2.0, (row.name, metric, c.diff(metric))
    assert c.step.masked_samples > 50
    if row.policy != "sync":  # requests generating at a weight sync were interrupted and resumed
        assert c.step.interrupted_requests > 0 and c.fast.interrupted_requests > 0
        assert abs(c.diff("interrupted_requests")) <= 10.0


@pytest.mark.slow
def test_interrupts_cancels_and_the_gate_run_and_the_same_seed_gives_the_same_numbers():
    """async with a staleness bound (groups dropped, their members cancelled), requests interrupted
    at each sync (the engines paused: the gate), on a loaded host."""
    d = _tokens(steps=12, max_staleness=1, stale_samples="discard")
    s, rec = _cell(d, "compiled")
    again, _ = _cell(d, "compiled")
    assert pd.Series(s).equals(pd.Series(again))
    assert s["training_steps_done"] == 12
    assert s["interrupted_requests"] > 0 and s["resumed_samples_trained"] > 0
    assert (rec.status == 4).sum() > 0  # cancelled members of dropped groups
    assert s["discarded_staleness"] > 0
    assert 0 < s["prefix_hit_rate"] < 1  # the prefix cache served turns, and a sync cleared it
    assert s["llm_requests"] >= rec.steps_done.sum()  # a resumed turn is sent again


def test_auto_runs_a_token_loop_on_the_compiled_engine_where_it_covers_it():
    scn = load_scenario(ROOT / "scenarios/grpo_async_tokens.yaml")
    assert resolved_engine(scn) is COMPILED, fidelity_choice(scn)
    assert COMPILED.draws_steps(scn) and not COMPILED.pilots(scn)  # every turn in tokens, no pilot
    assert TRAJECTORY.pilots(scn) and not TRAJECTORY.draws_steps(scn) and STEP.draws_steps(scn)
    d = _tokens()
    d["substrates"][0]["contention"] = {"exec": {1: 1.0, 8: 1.5, 32: 3.0}}  # a measured curve
    curved = scenario_from_dict(d)
    assert "measured exec contention curve" in COMPILED.gaps(curved)
    assert all(r in compiled_rows() for r in token_rows())


@pytest.mark.slow
def test_the_token_loop_compiled_by_the_pool_has_every_cells_types(monkeypatch):
    """A run's pool compiles the token loop's entry for ``compiled_tokens.example_state``'s types on a
    fresh install: a cell's serving state has those types (else each cell would compile again)."""
    import numba

    from simrollout.sim import compiled
    from simrollout.sim.compiled_tokens import example_state

    seen = []
    real = compiled.compile_loop

    def compile_loop(S=None, training=False, tokens=False, V=None):
        seen.append((tokens, numba.typeof(V)))
        return real(S, training, tokens, V)

    monkeypatch.setattr(compiled, "compile_loop", compile_loop)
    _cell(_tokens(steps=2), "compiled")
    assert seen == [(True, numba.typeof(example_state()))]


@pytest.mark.slow
def test_the_token_loop_writes_every_field_of_the_records():
    """As the engines' records contract (tests/sim/test_records_contract.py), for a token loop's
    bodies: every field written but ``warm`` (no warm pool), timeouts and retries among them."""
    import numpy as np

    from simrollout.sim.records import ROW

    d = _tokens(steps=6)
    d["policy"]["retries"] = 2
    d["substrates"][0]["failures"] = {"create": 0.05, "exec": 0.01, "teardown": 0.01}
    d["substrates"][0]["create_rate"] = 4.0  # creates wait for their token
    _, rec = _cell(d, "compiled")
    written = {f for f in ROW if getattr(rec, f).astype(np.float64).any()}
    assert written == set(ROW) - {"warm"}, sorted(set(ROW) - written)
    for f in ROW:
        assert np.isfinite(getattr(rec, f).astype(np.float64)).all(), f
    assert (rec.status == 2).any() and (rec.attempts > 1).any()  # timeouts, retries (lost: written)
    assert (rec.end >= rec.start).all() and (rec.worker >= rec.overhead).all()
