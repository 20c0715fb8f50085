"""A scenario as a plain mapping, and dotted-path overrides of it: what sweeps, plans and the
serving pilot build their variants of a scenario from.

>>> from simrollout.scenario.overrides import set_path
>>> set_path({"cluster": {"concurrency": 64}}, "cluster.concurrency", 256)
{'cluster': {'concurrency': 256}}
"""

from __future__ import annotations

import copy

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
