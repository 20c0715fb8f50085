"""Property: any mutation of a valid scenario is either a scenario or one InputError — never
another exception (no traceback reaches a user)."""

from __future__ import annotations

import copy

import yaml
from hypothesis import HealthCheck, given, settings
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
