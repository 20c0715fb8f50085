"""The model's own error as a band term: the shipped term and its arithmetic.

The term (per target kind, ``q`` in units of a metric's target) is fitted from the validation
suites' held-out residuals by ``simrollout.validation.model_error`` and shipped beside this module
as ``model_error.json``; a run's bands (:mod:`.model_band`) read it here.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

SHIPPED = "model_error.json"
SHIPPED_PATH = Path(__file__).with_name(SHIPPED)


def shipped() -> dict:
    """The term a run uses (``model_error.json`` beside this module)."""
    return json.loads(resources.files(__package__).joinpath(SHIPPED).read_text())


def read_term(path: Path) -> dict:
    """A term table written as ``model_error.json`` is (``run --model-error``), checked."""
    from ..errors import InputError

    try:
        table = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(f"--model-error {path}: cannot read it ({exc.strerror or exc}).") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"--model-error {path}: not JSON ({exc.msg}, line {exc.lineno}).") from None
    targets = table.get("targets") if isinstance(table, dict) else None
    ok = (
        isinstance(targets, dict)
        and targets
        and all(
            isinstance(t, dict)
            and isinstance(t.get("q"), int | float)
            and isinstance(t.get("targets_pct"), dict)
            for t in targets.values()
        )
    )
    if not ok or not isinstance(table.get("level"), int | float):
        raise InputError(
            f"--model-error {path}: expected the layout of simrollout/whatif/model_error.json: 'level' and "
            "'targets', each target with a number 'q' and a mapping 'targets_pct'."
        )
    return table


def combine(point: float, lo: float, hi: float, model_half: float) -> tuple[float, float]:
    """An input band ``[lo, hi]`` around ``point`` widened by the model's error (a log half-width),
    the two added in quadrature on each side (independent errors)."""
    a = math.log(point / lo) if lo > 0 and point > 0 else 0.0
    b = math.log(hi / point) if hi > 0 and point > 0 else 0.0
    return point * math.exp(-math.hypot(a, model_half)), point * math.exp(math.hypot(b, model_half))


def half_width(q: float, target_pct: float) -> float:
    """The log half-width a term ``q`` (in units of the target) gives a metric of ``target_pct``."""
    return q * target_pct / 100
