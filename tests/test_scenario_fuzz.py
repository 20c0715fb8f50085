"""Property: any mutation of a valid scenario is either a scenario or one InputError — never
another exception (no traceback reaches a user)."""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from simrollout.errors import InputError
from simrollout.scenario import scenario_from_dict
from tests.conftest import ROOT

SMALL = yaml.safe_load((ROOT / "scenarios/small.yaml").read_text())

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**18), 10**18),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["kind", "value", "median", "p99", "mu", "sigma", "x"]),
                    st.one_of(st.floats(-10, 1e6), st.text(max_size=4), st.sampled_from(["lognormal", "constant"])),
                    max_size=3),
)  # fmt: skip


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


PATHS = list(_paths(SMALL))


def _set(data, path, value):
    node = data
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PATHS), JUNK), min_size=1, max_size=3))
def test_a_mutated_scenario_is_valid_or_one_input_error(mutations):
    data = copy.deepcopy(SMALL)
    for path, value in mutations:
        try:
            _set(data, path, value)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation replaced a parent
    try:
        scn = scenario_from_dict(data, "fuzz.yaml")
    except InputError as exc:
        msg = str(exc)
        assert msg.startswith("fuzz.yaml") and "\n" not in msg.strip()
        return
    assert scn.workload.trajectories >= 1 and scn.workload.steps.mean() >= 1


# a training scenario to mutate too: the loop's fields are fuzzed like the rest
TRAINING = copy.deepcopy(SMALL)
TRAINING["workload"].pop("trajectories")
TRAINING["workload"]["steps"] = 3
TRAINING["cluster"]["concurrency"] = 16
TRAINING["substrates"] = TRAINING["substrates"][:1]
TRAINING["training"] = {"prompts_per_step": 2, "samples_per_prompt": 4, "steps": 3, "train_time": 5,
                        "weight_sync_time": 1, "over_sampling": 0.5, "task_spread": 0.3}  # fmt: skip


def _leaves(data) -> list:
    """Paths to scalar values: a plausible value there often validates, so the run is exercised."""
    out = []
    for p in _paths(data):
        node = data
        for k in p:
            node = node[k]
        if not isinstance(node, dict | list):
            out.append(p)
    return out


SMALL_LEAVES = _leaves(SMALL)
TRAINING_LEAVES = [p for p in _leaves(TRAINING) if p[0] in ("training", "cluster", "policy", "workload")]


def _bounded(scn) -> bool:
    """Small enough to run in a test (a mutation may ask for a billion trajectories)."""
    n = scn.trajectories * scn.workload.steps.mean()
    return n <= 5_000 and max(scn.cluster.levels) <= 512 and len(scn.cluster.levels) <= 3


# mostly plausible values, so that many mutations validate and are run
NUMBERS = st.one_of(st.integers(1, 30), st.floats(0.5, 30.0))
PLAUSIBLE = st.one_of(NUMBERS, NUMBERS, NUMBERS, st.sampled_from(["sync", "async", "carry", True]), JUNK)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["small", "training"]),
       st.lists(st.tuples(st.integers(0, 10**6), PLAUSIBLE), min_size=1, max_size=2))  # fmt: skip
def test_a_mutated_scenario_runs_or_is_one_input_error(base, mutations):
    """What validates also runs: a result, or one InputError — never another exception."""
    from simrollout.run.executors import run_scenario

    data = copy.deepcopy(SMALL if base == "small" else TRAINING)
    if base == "small":
        data["workload"]["trajectories"] = 60
    paths = SMALL_LEAVES if base == "small" else TRAINING_LEAVES
    for k, value in mutations:
        try:
            _set(data, paths[k % len(paths)], value)
        except (KeyError, IndexError, TypeError):
            pass
    try:
        scn = scenario_from_dict(data, "fuzz.yaml")
        if not _bounded(scn):
            event("too large to run here")
            return
        res = run_scenario(scn, executor="serial", keep_records=False)
    except InputError as exc:
        event("refused")
        assert str(exc).startswith("fuzz.yaml") or str(exc).startswith("--")
        return
    event("ran")
    s = res.summary
    assert len(s) == len(scn.substrates) * len(scn.cluster.levels)
    assert (s.completed + s.failed + s.timeouts + s.cancelled == s.trajectories).all()
