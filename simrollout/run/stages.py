"""The stage a run is in, for a progress line to name: ``pilots`` (serving pilots, the workload
drawn beside them), ``draws`` (the workload), ``cells`` (the simulation) and ``outputs`` (the
results written). Listeners hear each stage as it begins and each step of it that is counted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

STAGES = ("pilots", "draws", "cells", "outputs")
# listener(stage, done, total): a stage began (done 0) or counted a step; total None: not counted
Listener = Callable[[str, int, "int | None"], None]
_LISTENERS: list[Listener] = []
_NOW: list = [None, None]  # the current stage and its total


def enter(stage: str, total: int | None = None) -> None:
    """Stage ``stage`` begins; ``total``: the steps it counts (None: not counted)."""
    assert stage in STAGES, stage
    _NOW[:] = [stage, total]
    for f in list(_LISTENERS):
        f(stage, 0, total)


def done(n: int) -> None:
    """``n`` steps of the current stage are done."""
    if _NOW[0] is not None:
        for f in list(_LISTENERS):
            f(_NOW[0], n, _NOW[1])


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Call ``listener`` for every stage and step while inside."""
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)
        if not _LISTENERS:
            _NOW[:] = [None, None]
