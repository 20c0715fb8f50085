"""``simrollout import``: the scenario written, the unmapped fields on screen, bad input exit 2."""

from __future__ import annotations

import pytest

from simrollout.scenario import load_scenario
from tests.conftest import cli
from tests.scenario.framework_configs import DATA

pytestmark = pytest.mark.slow  # each test starts the CLI in a fresh interpreter


def test_import_writes_a_scenario_that_loads_and_lists_the_unmapped(tmp_path):
    out = tmp_path / "verl.yaml"
    r = cli("import", "verl", DATA / "verl_dapo_7b_math_fsdp2_64_64.sh", "-o", out)
    assert r.returncode == 0, r.stderr
    scn = load_scenario(out)
    assert (scn.training.prompts_per_step, scn.training.mini_batch) == (512, 128)
    assert "mini_batch, preset, prompts_per_step" in r.stderr
    assert "not mapped (71 fields)" in r.stderr and "data.max_response_length=28672" in r.stderr
    assert "# Not mapped (71 fields" in out.read_text()


def test_import_prints_the_scenario_without_out(tmp_path):
    r = cli("import", "slime", DATA / "slime_run-glm4-9B.sh")
    assert r.returncode == 0, r.stderr
    assert "prompts_per_step: 32  # --rollout-batch-size 32" in r.stdout
    assert "not mapped" not in r.stdout  # the listing goes to stderr, the scenario to stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("import", "openrlhf", DATA / "verl_ppo_trainer.yaml"),
            "unknown framework 'openrlhf': expected one of",
        ),
        (("import", "verl", "missing.yaml"), "missing.yaml: file not found; expected verl's config file"),
        (("import", "areal", DATA / "prime-rl_wordle_rl.toml"), "malformed YAML at line 17"),
        (("import", "prime-rl", DATA / "areal_boba_grpo.yaml"), "malformed TOML"),
        (("import", "nemo-rl", DATA / "prime-rl_wordle_rl.toml"), "malformed YAML at line 17"),
    ],
)
def test_bad_input_is_one_paragraph_and_exit_2(args, said):
    r = cli(*args)
    assert r.returncode == 2
    assert said in " ".join(r.stderr.split())
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 3
