"""What-if grids: override any scenario field by dotted path and run every combination.

>>> from simrollout.sweeps import parse_set
>>> parse_set("cluster.concurrency=64,256")
('cluster.concurrency', [64, 256])
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import pandas as pd
import yaml

from .errors import InputError
from .scenario import Scenario, scenario_from_dict


def parse_set(text: str) -> tuple[str, list]:
    """``path=v1,v2`` -> (path, [values]); values parse as YAML scalars (numbers, true, null)."""
    if "=" not in text:
        raise InputError(f"--set '{text}': expected PATH=VALUE[,VALUE...], e.g. cluster.concurrency=64,256.")
    path, values = text.split("=", 1)
    if not path or not values:
        raise InputError(f"--set '{text}': expected PATH=VALUE[,VALUE...].")
    try:
        return path.strip(), [yaml.safe_load(v) for v in values.split(",")]
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"--set '{text}': a value is not a YAML scalar ({problem}).") from None


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


def grid(
    scn: Scenario, sets: dict[str, list], source: str | Path | None = None
) -> list[tuple[dict, Scenario]]:
    """Every combination of ``sets`` applied to ``scn``; each validated like a scenario file."""
    base = base_dict(scn)
    out = []
    paths = list(sets)
    for combo in itertools.product(*(sets[p] for p in paths)):
        data = base
        for p, v in zip(paths, combo):
            data = set_path(data, p, v)
        point = dict(zip(paths, combo))
        where = f"{source or scn._source} with --set " + ", ".join(f"{p}={v}" for p, v in point.items())
        out.append((point, scenario_from_dict(data, where)))
    return out


def sweep(
    scn: Scenario,
    sets: dict[str, list],
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    progress=None,
) -> pd.DataFrame:
    """Run the grid; one row per (grid point, substrate, concurrency) with the grid's columns."""
    from .executors import run_many

    points = grid(scn, sets)
    results = run_many([s for _, s in points], executor, jobs, False, progress, address)
    frames = []
    for (point, _), res in zip(points, results):
        df = res.summary.copy()
        for k, v in point.items():
            df.insert(0, k, v if not isinstance(v, list) else str(v))
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def knee(concurrency, throughput, share: float = 0.9) -> int:
    """The smallest concurrency reaching ``share`` of the best throughput seen."""
    pairs = sorted(zip(concurrency, throughput))
    best = max(t for _, t in pairs)
    return next(c for c, t in pairs if t >= share * best)
