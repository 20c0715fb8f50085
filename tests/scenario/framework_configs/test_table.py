"""The shared readers and the knob accessor: nested fields, references, bad values named."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrollout.errors import InputError
from simrollout.scenario.framework_configs import import_config
from simrollout.scenario.framework_configs.table import Knobs, flatten, resolve


def test_flatten_and_resolve_omegaconf_references():
    flat = resolve(flatten({"a": {"b": 4, "c": "${a.b}", "d": "${oc.select:x.y,7}"}, "e": [1, 2]}))
    assert flat == {"a.b": 4, "a.c": 4, "a.d": 7, "e": [1, 2]}


def test_a_knob_that_is_not_a_number_is_named():
    k = Knobs({"data.train_batch_size": "lots", "n": 2.5, "ok": "16"}, Path("cfg.yaml"))
    with pytest.raises(
        InputError, match="cfg.yaml: field 'data.train_batch_size' is 'lots'; expected a whole"
    ):
        k.number("data.train_batch_size")
    with pytest.raises(InputError, match="field 'n' is 2.5"):
        k.number("n")
    assert k.number("ok") == 16 and k.rest() == {}  # every knob read counts as used
    with pytest.raises(InputError, match="field 'missing' is missing; it gives the prompts"):
        k.need("missing", "the prompts a step trains")


def test_a_config_without_its_batch_is_refused(tmp_path):
    cfg = tmp_path / "ppo.yaml"
    cfg.write_text("actor_rollout_ref: {rollout: {n: 4}}\n")
    with pytest.raises(InputError, match="field 'data.train_batch_size' is missing"):
        import_config("verl", cfg)
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m main async_training.require_batches=0 actor_rollout_ref.actor.ppo_mini_batch_size=8\n"
    )
    with pytest.raises(
        InputError, match="run.sh: framework knob 'require_batches' must be a whole number >= 1"
    ):
        import_config("verl", script)
