"""The importers on the frameworks' real configs (tests/data/framework_configs/PROVENANCE.md)."""

from __future__ import annotations

from pathlib import Path

import yaml

from simrollout.scenario import load_scenario
from simrollout.scenario.framework_configs import import_config, scenario_yaml

DATA = Path(__file__).resolve().parents[2] / "data" / "framework_configs"


def imported(framework: str, name: str, tmp: Path):
    """``(imported, written text, loaded scenario)``: the file read, its scenario written and loaded
    back with the project's loader (every field validated)."""
    imp = import_config(framework, DATA / name)
    text = scenario_yaml(imp, Path(name).stem)
    out = tmp / "scenario.yaml"
    out.write_text(text)
    assert yaml.safe_load(text)["training"]  # the file is YAML with a training section
    return imp, text, load_scenario(out)


def values(imp) -> dict:
    return {p: m.value for p, m in imp.fields.items()}
