"""Training presets: a preset resolves to its fields, the scenario's own fields override it."""

from __future__ import annotations

import pytest

from simrollout.errors import InputError
from simrollout.scenario.presets import PRESETS, SOURCES
from tests.sim.test_training import scenario

TRAINER = {"trainer": {"gpus": 2}}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_resolves_to_its_fields_and_cites_its_source(name):
    tr = scenario({"preset": name, **TRAINER}).training
    for field, value in PRESETS[name].items():
        assert getattr(tr, field) == value
    assert SOURCES[name].startswith("https://")


def test_verl_preset_known_answer():
    tr = scenario({"preset": "verl-fully-async", **TRAINER}).training
    assert (tr.mode, tr.placement, tr.staleness_fraction, tr.stale_policy) == (
        "async",
        "disaggregated",
        0.5,
        "keep",
    )
    assert tr.ahead == pytest.approx(0.5) and tr.partial_rollouts


def test_user_fields_override_the_preset():
    tr = scenario({"preset": "areal", "max_staleness": 1, "partial_rollouts": False, **TRAINER}).training
    assert tr.max_staleness == 1 and not tr.partial_rollouts and tr.mode == "async"
    assert tr.at_sync == "finish"  # no trajectory crosses a sync: nothing to interrupt
    tr = scenario({"preset": "skyrl", "pause_engines_on_sync": False, **TRAINER}).training
    assert tr.at_sync == "finish"
    tr = scenario({"preset": "skyrl", "at_sync": "finish", **TRAINER}).training
    assert tr.at_sync == "finish" and tr.max_staleness == 4
    # the other form of the bound replaces the preset's
    tr = scenario({"preset": "verl-fully-async", "max_staleness": 2, **TRAINER}).training
    assert tr.staleness_fraction is None and tr.stale_versions == 2
    tr = scenario({"preset": "areal", "staleness_fraction": 0.3, **TRAINER}).training
    assert tr.stale_versions == 1 and tr.ahead == pytest.approx(0.3)


def test_an_unknown_preset_is_refused_naming_the_presets():
    with pytest.raises(InputError, match="preset 'verl' is not one of: areal, prime-rl"):
        scenario({"preset": "verl"})


def test_the_interrupting_frameworks_presets_interrupt():
    # verl's partial_rollout (sleep and resume at a sync), AReaL's partial rollouts, SkyRL's
    # in-flight weight update; slime's one-step-off and prime-rl let running requests finish
    got = {n: scenario({"preset": n, **TRAINER}).training.at_sync for n in sorted(PRESETS)}
    assert got == {"areal": "interrupt", "prime-rl": "finish", "skyrl": "interrupt",
                   "slime-async": "finish", "verl-fully-async": "interrupt"}  # fmt: skip
    tr = scenario({"preset": "skyrl", **TRAINER}).training
    assert (tr.mode, tr.max_staleness, tr.stale_policy) == ("async", 4, "keep")


def test_a_preset_loop_runs():
    from tests.sim.test_training import loop_of

    loop, _ = loop_of(scenario({"preset": "prime-rl", **TRAINER}))
    assert len(loop.step_table()) == 6 and max(loop.staleness) <= 2
