"""A scenario as a plain mapping, and dotted-path overrides of it: what sweeps, plans, the
serving pilot and ``run --set`` build their variants of a scenario from.

>>> from simrollout.scenario.overrides import set_path
>>> set_path({"cluster": {"concurrency": 64}}, "cluster.concurrency", 256)
{'cluster': {'concurrency': 256}}
"""

from __future__ import annotations

import copy
from pathlib import Path

from ..errors import InputError
from . import Scenario


def set_path(data: dict, path: str, value) -> dict:
    """A copy of ``data`` with ``path`` (dots; integers index lists) set to ``value``."""
    out = copy.deepcopy(data)
    node = out
    *parents, last = path.split(".")
    for part in parents:
        if isinstance(node, list):
            try:
                node = node[int(part)]
            except (ValueError, IndexError):
                raise InputError(f"--set {path}: '{part}' is not an index of that list.") from None
        else:
            if not isinstance(node.get(part, {}), dict | list):
                raise InputError(f"--set {path}: '{part}' is not a mapping.")
            node = node.setdefault(part, {})
    if isinstance(node, list):
        try:
            node[int(last)] = value
        except (ValueError, IndexError):
            raise InputError(f"--set {path}: '{last}' is not an index of that list.") from None
    else:
        node[last] = value
    return out


def base_dict(scn: Scenario) -> dict:
    """The scenario as a mapping, profiles already merged in (so it validates from anywhere)."""
    data = scn.model_dump(mode="json", by_alias=True, exclude_none=True)
    for sub in data["substrates"]:
        sub.pop("profile", None)
    (data["cluster"].get("inference") or {}).pop("profile", None)
    return data


def parse_one(text: str) -> tuple[str, object]:
    """``PATH=VALUE`` (one ``--set``) -> (path, value); the value parses as YAML
    (``{import: p.yaml}``, ``null``)."""
    import yaml

    path, eq, value = text.partition("=")
    if not eq or not path.strip() or not value:
        raise InputError(f"--set '{text}': expected PATH=VALUE, e.g. training.mode=async.")
    try:
        return path.strip(), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"--set '{text}': the value is not YAML ({problem}).") from None


def load_with_sets(path: Path, sets: list[str]) -> tuple[dict, Scenario]:
    """The scenario file's mapping with each ``--set`` applied (before its imports are read, so a
    set ``import`` is read as the file's own would be), and the scenario it validates to."""
    from ..errors import load_yaml
    from .files import scenario_from_dict

    data, node = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of scenario fields at the top level.")
    for text in sets:
        data = set_path(data, *parse_one(text))
    return data, scenario_from_dict(data, path, node if not sets else None)
