import copy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "version": 1,
    "name": "t",
    "seed": 3,
    "workload": {
        "trajectories": 100,
        "steps": 1,
        "llm_time": 0,
        "calls_per_step": 0,
        "tools": {"shell": {"weight": 1, "latency": 0}},
    },
    "substrates": [{"name": "s", "cold_start": 0, "exec_overhead": 0, "teardown": 0}],
    "cluster": {"concurrency": 1},
}


def make(**over) -> dict:
    """A minimal scenario dict with dotted-path overrides, e.g. make(**{"workload.steps": 5})."""
    d = copy.deepcopy(BASE)
    for path, value in over.items():
        node = d
        *parents, last = path.split(".")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        node[last] = value
    return d


@pytest.fixture
def root() -> Path:
    return ROOT
