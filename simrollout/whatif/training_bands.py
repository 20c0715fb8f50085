"""``run --set`` on a scenario file, and the band a training profile's refits give a run
(``run --uncertainty`` on a scenario with ``training: {import: PROFILE}``): the scenario simulated
once per refit (``training.refit: k``, the same seed: common random numbers), the band per
metric the 5th to 95th percentile of the refits' values, widened to hold the point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ..errors import InputError, load_yaml
from ..scenario import Scenario
from ..scenario.files import scenario_from_dict
from ..scenario.overrides import set_path
from ..scenario.workload_files import _find

BANDED = ("step_seconds_mean", "step_seconds_p50", "training_steps_per_day", "step_train_seconds",
          "step_rollout_seconds", "training_hours")  # fmt: skip
MAX_REFITS = 20  # refits a run re-simulates (the profile's first ones)
LO, HI = 5, 95


def parse_one(text: str) -> tuple[str, object]:
    """``PATH=VALUE`` -> (path, value); the value parses as YAML (``{import: p.yaml}``, ``null``)."""
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
    data, node = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of scenario fields at the top level.")
    for text in sets:
        data = set_path(data, *parse_one(text))
    return data, scenario_from_dict(data, path, node if not sets else None)


def refit_count(data: dict, path: Path) -> int:
    """Refits the scenario's imported training profile holds (0: none, or no import)."""
    tr = data.get("training")
    if not isinstance(tr, dict) or "import" not in tr or tr.get("refit") is not None:
        return 0
    prof, _ = load_yaml(_find(tr["import"], path, "import", "training"))
    return len(((prof or {}).get("uncertainty") or {}).get("training") or [])


def attach_band(summary: pd.DataFrame, refits: list[pd.DataFrame], label: str) -> pd.DataFrame:
    """``summary`` with ``<metric>_lo`` / ``_hi`` over the refits' summaries (rows in the same order),
    each the 5th-95th percentile widened to hold the point, and ``band`` naming the source."""
    out = summary.copy()
    for m in BANDED:
        if m not in out or not refits:
            continue
        vals = np.array([r[m].to_numpy(float) for r in refits])
        point = out[m].to_numpy(float)
        out[f"{m}_lo"] = np.minimum(np.percentile(vals, LO, axis=0), point)
        out[f"{m}_hi"] = np.maximum(np.percentile(vals, HI, axis=0), point)
    out["band"] = label
    return out


def with_training_band(data: dict, path: Path, result, jobs=None, executor="local", address=None):
    """``result`` (the plain run) with the training profile's refit band on its summary."""
    from ..run.executors import run_many

    n = min(refit_count(data, path), MAX_REFITS)
    if not n:
        return result
    scns = [scenario_from_dict(set_path(data, "training.refit", k), path) for k in range(n)]
    done = run_many(scns, executor, jobs, False, None, address)
    label = f"training profile refits B={n}"
    result.summary = attach_band(result.summary, [r.summary for r in done], label)
    return result
