"""Traces the tests write with the project's generator, in each format's shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrollout.traces import synthetic as sy

ZERO = [{"name": "zero", "cold_start": 0, "exec_overhead": 0, "teardown": 0}]
SAMPLE = Path(__file__).resolve().parents[1] / "data/traces/tracelab/sanitized.round_trace.jsonl"


def write(fmt: str, trajs, folder: Path) -> list[Path]:
    if fmt == "tracelab":
        return [sy.write_tracelab(trajs, folder / "round_trace.jsonl")]
    if fmt == "verifiers":
        return [sy.write_verifiers(trajs, folder / "results.jsonl")]
    return sy.write_documents(trajs, folder / fmt, fmt)


# per format: what the generator may vary there (ATIF's split is exact when generation is linear in
# the output tokens; mini-swe-agent and SWE-agent run commands one after another)
KW = {
    "tracelab": {"overlap": 0.5, "human": 0.05},
    "atif": {"linear_llm": True},
    "verifiers": {},
    "mini-swe-agent": {},
    "swe-agent": {},
}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Per format: (generated trajectories, files written)."""
    out = {}
    for fmt, kw in KW.items():
        trajs = sy.generate(60, seed=11, steps_median=12, **kw)
        out[fmt] = trajs, write(fmt, trajs, tmp_path_factory.mktemp(fmt.replace("-", "_")))
    return out
