"""The engine validation's speed check, against a stand-in server whose speed is known."""

from __future__ import annotations

import pytest

from simrollout.calibration.validate_engine import SPEED_OUTPUT, agent_scenario, speed_check
from tests.conftest import ROOT

PROFILE = ROOT / "calibration" / "engines" / "llama-cpp-tiny-c.yaml"


class Scaled:
    """Answers every completion in ``factor`` times the profile's own seconds for it."""

    def __init__(self, factor: float, seconds: float):
        self.factor, self.seconds, self.prompts = factor, seconds, []

    def complete(self, prompt: str, output: int, extra: dict) -> dict:
        self.prompts.append(prompt)
        end = self.factor * self.seconds
        return {"end": end, "ttft": end / 10, "prompt_tokens": len(prompt), "output_tokens": output}


def _scenario():
    tool = {"kind": "lognormal", "median": 0.05, "p99": 0.5}
    return agent_scenario(PROFILE, 2, 2, [1], prompt=256, appended=64, output=32, tool=tool)


@pytest.mark.parametrize("factor", [0.8, 1.0, 1.3])
def test_speed_check_reads_the_engines_drift_from_its_profile(factor):
    scn = _scenario()
    engine = scn.cluster.inference.engine
    it = engine.iteration
    # one lone request of the check's shape on the profile: overhead, the prefill, 31 decodes
    lone = (engine.overhead + it.base + it.per_prefill_token * 128
            + sum(it(0, 1, 128 + k) for k in range(1, SPEED_OUTPUT)))  # fmt: skip
    server = Scaled(factor, lone)
    got = speed_check(server, scn, None, "before run 1")
    assert got["profile"] == pytest.approx(lone, rel=1e-9)
    assert got["drift_pct"] == pytest.approx(100 * (factor - 1), abs=1e-6)
    # fresh text for every request: nothing the server cached serves it
    assert len(set(server.prompts)) == len(server.prompts) > 1
