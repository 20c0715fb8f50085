"""The compiled engine against the step engine (the reference) and the trajectory engine, its
arithmetic against the Python model's, and where ``fidelity: auto`` routes it."""

from __future__ import annotations

import numpy as np
import pytest

from simrollout.errors import InputError
from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from simrollout.scenario.substrate import slowdown
from simrollout.sim.compiled_ops import curve_params, factor
from simrollout.sim.route import fidelity_choice
from simrollout.validation.fidelity import Row, build, compare
from simrollout.validation.verdicts import TOLERANCE


def _run(d: dict, fid: str, keep: bool = False):
    scn = scenario_from_dict({**d, "fidelity": fid})
    scn._overhead_per_call = True
    return run_scenario(scn, jobs=1, keep_records=keep)


@pytest.mark.slow
@pytest.mark.parametrize(
    "row",
    [
        Row("async", "host"),
        Row("sync", "none", "failures"),
        Row("poisson", "host", "weights"),
        Row("async", "none", "timeouts"),
        Row("sync", "host"),
    ],  # fmt: skip
    ids=lambda r: r.name,
)
def test_compiled_within_the_matrix_tolerance_of_the_step_engine(row):
    c = compare(row, trajectories=1500, steps=20, fast="compiled")
    assert not c.misses(), (row.name, c.as_dict())
    for m in TOLERANCE[row.regime]:
        assert float(c.fast[m]) > 0


def test_compiled_matches_the_trajectory_engine_without_load():
    """Nothing contends: both engines wait the same pre-drawn sums, so the same numbers."""
    d = build(Row("async", "none", "failures"), 1200, 15, 128)
    fast, comp = _run(d, "trajectory", keep=True), _run(d, "compiled", keep=True)
    a, b = next(iter(fast.records.values())), next(iter(comp.records.values()))
    np.testing.assert_allclose(
        np.sort(a.duration), np.sort(b.duration), rtol=1e-7
    )  # event times summed in another order
    assert (a.status == b.status).all() and (a.attempts == b.attempts).all()
    assert (b.attempts > 1).any()  # retries ran (their draws came from Python)


def test_same_seed_same_numbers():
    d = build(Row("async", "host", "timeouts"), 800, 12, 64)
    a, b = _run(d, "compiled", keep=True), _run(d, "compiled", keep=True)
    ra, rb = next(iter(a.records.values())), next(iter(b.records.values()))
    for f in ("start", "end", "worker", "llm", "overhead", "teardown"):
        assert np.array_equal(getattr(ra, f), getattr(rb, f)), f
    assert (ra.status == 2).any()  # some timed out (the per-step cut)


@pytest.mark.parametrize("spec", [0.1, {8: 3.0, 32: 12.0}, {4: 1.5, 16: 2.0, 64: 9.0}])
def test_contention_curve_as_python_computes_it(spec):
    tables: list = []
    par = curve_params(spec, tables)
    tab = np.concatenate(tables) if tables else np.zeros(1)
    size = len(tables[0]) if tables else 0
    f = slowdown(spec)
    for n in np.linspace(0.0, 120.0, 481):
        assert factor(par, tab, size, float(n)) == pytest.approx(f(float(n)), rel=1e-12)


def test_forced_compiled_on_a_warm_pool_is_a_clear_error():
    d = build(Row("async", "none", "warm_pool"), 500, 10, 64)
    assert scenario_from_dict(d).compiled_gaps() == "a warm pool"
    with pytest.raises(InputError, match="does not cover a warm pool"):
        scenario_from_dict({**d, "fidelity": "compiled"})


def test_auto_routes_to_the_compiled_engine_only_where_it_covers():
    big = build(Row("async", "host"), 1_000_000, 30, 256)
    fid, why = fidelity_choice(scenario_from_dict({**big, "fidelity": "auto"}))
    assert fid == "compiled" and "compiled" in why
    pool = build(Row("async", "host", "warm_pool"), 1_000_000, 30, 256)
    assert fidelity_choice(scenario_from_dict({**pool, "fidelity": "auto"}))[0] == "trajectory"
    tier = build(Row("async", "tier"), 1_000_000, 30, 256)
    assert fidelity_choice(scenario_from_dict({**tier, "fidelity": "auto"}))[0] == "trajectory"


def test_fail_rate_is_numpys_interp_to_the_bit():
    """The loop's allocation-free interpolation of a failure rate by operations in flight."""
    from simrollout.sim.compiled_ops import fail_rate

    rng = np.random.default_rng(7)
    xs = np.array([1.0, 4.0, 16.0, 64.0])
    ys = np.array([0.001, 0.004, 0.02, 0.1])
    for n in [*xs, 0.0, 0.5, 100.0, *rng.uniform(0, 80, 500)]:
        assert fail_rate(xs, ys, n) == np.interp(n, xs, ys)
    assert fail_rate(np.array([1.0]), np.array([0.03]), 7.0) == 0.03  # a constant rate


@pytest.mark.slow
def test_each_chunks_per_step_detail_is_drawn_once_and_gives_the_numbers_of_keeping_all(monkeypatch):
    """Bodies near their deadline or meeting an exec failure read their chunk's per-step detail;
    bodies of two chunks in flight at once take turns. Each chunk's detail is drawn once (kept
    while a body may read it), with the numbers of every detail kept to the end."""
    from simrollout.sim import chunks, compiled

    d = build(Row("async", "host", "failures"), 70_000, 4, 512)  # three chunks, 512 in flight
    d["policy"]["timeout"] = 120.0  # many bodies near it
    drawn = []
    real = chunks.chunk_detail
    monkeypatch.setattr(chunks, "chunk_detail", lambda *a, **k: drawn.append(a[4]) or real(*a, **k))
    kept = _run(d, "compiled").cells
    assert len(drawn) == len(set(drawn)) >= 2
    monkeypatch.setattr(compiled.CompiledRun, "_drop_details", lambda self, c: None)
    drawn.clear()
    everything = _run(d, "compiled").cells
    assert len(drawn) == len(set(drawn))
    cols = [c for c in kept.columns if not c.startswith("_")]
    assert kept[cols].to_csv() == everything[cols].to_csv()
    assert kept.timeouts.iloc[0] > 0 and kept.failed.iloc[0] + kept.timeouts.iloc[0] > 0


@pytest.mark.slow
def test_chunks_folded_while_the_loop_runs_give_the_numbers_of_folding_at_its_end(monkeypatch):
    """A compiled cell folds each chunk into its metrics once it and those before it ended, and
    hands back its rows' pages: the numbers of folding every chunk after the loop."""
    from simrollout.sim import compiled_fold

    d = build(Row("async", "host", "failures"), 70_000, 4, 512)  # three chunks, 512 in flight
    d["policy"]["timeout"] = 120.0
    folded, real = [], compiled_fold.Folding.step

    def step(self):
        before = self.next
        real(self)
        folded.extend(range(before, self.next))

    monkeypatch.setattr(compiled_fold.Folding, "step", step)
    streamed = _run(d, "compiled").cells
    assert folded[:1] == [0] and folded == sorted(set(folded)) and 2 not in folded  # the last: after
    monkeypatch.setattr(compiled_fold.Folding, "step", lambda self: None)
    at_end = _run(d, "compiled").cells
    cols = [c for c in streamed.columns if not c.startswith("_")]
    assert streamed[cols].to_csv() == at_end[cols].to_csv()


def test_the_loop_compiled_by_the_pool_has_every_cells_types(monkeypatch):
    """On a fresh install a run's pool compiles the loop for ``example_state``'s types, which each
    cell process then loads from the cache: a plain cell's state and a training loop's have those
    types (else each cell process would compile the loop again)."""
    import numba

    from simrollout.sim import compiled
    from tests.sim.test_compiled_training import _row

    seen = []
    real = compiled.compile_loop

    def compile_loop(S=None, training=False, tokens=False, V=None):
        seen.append((numba.typeof(tuple(S)), training))
        assert not tokens and V is None  # (a token loop's entry: tests/sim/test_compiled_tokens.py)
        return real(S, training, tokens, V)

    monkeypatch.setattr(compiled, "compile_loop", compile_loop)
    _run(build(Row("async", "host", "failures"), 300, 5, 32), "compiled")
    _run(_row(steps=3), "compiled")
    assert seen == [(numba.typeof(compiled.example_state()), False), (seen[0][0], True)]
