"""``training: {import: PATH, ...}`` in a scenario: a training profile's ``training`` fragment
(written by ``simrollout calibrate --training``) laid under the section's own fields, which
override it, before validation. ``refit: K`` takes the profile's K-th bootstrap refit instead of
its point fit; a field set to null takes the profile's (docs/scenario.md, "training")."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError, load_yaml
from .base import merge
from .workload_files import _find


def expand_training(tr: dict, scenario: Path) -> tuple[dict, Path]:
    """The section with the profile's fragment under it, and the profile's path."""
    path = _find(tr["import"], scenario, "import", "training").resolve()
    data, _ = load_yaml(path)
    fragment = data.get("training") if isinstance(data, dict) else None
    if not isinstance(fragment, dict) or data.get("kind") != "training":
        raise InputError(
            f"{path}: expected a training profile ('kind: training' with a 'training:' mapping) written "
            f"by 'simrollout calibrate --training'; imported by {scenario} (field 'training.import')."
        )
    base = data["training"]
    k = tr.get("refit")
    if k is not None:
        refits = (data.get("uncertainty") or {}).get("training") or []
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(refits):
            raise InputError(
                f"{scenario}: field 'training.refit': expected a refit index from 0 to {len(refits) - 1} "
                f"({path} holds {len(refits)} refits), got {k!r}."
            )
        base = merge(base, refits[k])
    return merge(base, own_fields(tr)), path


def own_fields(tr: dict) -> dict:
    """The section's fields beside ``import`` (and ``refit``)."""
    # a field set to null takes the profile's (e.g. the assumed train_time an import wrote)
    return {key: v for key, v in tr.items() if key not in ("import", "refit") and v is not None}
