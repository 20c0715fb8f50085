"""What-if grids: override any scenario field by dotted path and run every combination.

>>> from simrollout.whatif.sweeps import parse_set
>>> parse_set("cluster.concurrency=64,256")
('cluster.concurrency', [64, 256])
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import yaml

from ..errors import InputError
from ..scenario import Scenario, scenario_from_dict
from ..scenario.overrides import base_dict, set_path


def parse_set(text: str) -> tuple[str, list]:
    """``path=v1,v2`` -> (path, [values]); values parse as YAML scalars (numbers, true, null)."""
    if "=" not in text:
        raise InputError(f"--set '{text}': expected PATH=VALUE[,VALUE...], e.g. cluster.concurrency=64,256.")
    path, values = text.split("=", 1)
    if not path or not values:
        raise InputError(f"--set '{text}': expected PATH=VALUE[,VALUE...].")
    try:
        nodes = [yaml.compose(v, Loader=yaml.SafeLoader) for v in values.split(",")]
        if any(n is not None and not isinstance(n, yaml.ScalarNode) for n in nodes):
            raise InputError(
                f"--set '{text}': each value must be a YAML scalar (a number, a word, true, null)."
            )
        return path.strip(), [yaml.safe_load(v) for v in values.split(",")]
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"--set '{text}': a value is not a YAML scalar ({problem}).") from None


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
    from ..run.executors import run_many

    points = grid(scn, sets)
    results = run_many([s for _, s in points], executor, jobs, False, progress, address)
    frames = []
    for (point, _), res in zip(points, results):
        df = res.summary.copy()
        for k, v in point.items():
            df.insert(0, k, v if not isinstance(v, list) else str(v))
        frames.append(df)
    return pd.concat(frames, ignore_index=True)
