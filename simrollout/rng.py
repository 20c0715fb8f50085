"""Random streams: one SeedSequence tree from the scenario seed, keyed by name.

A stream is addressed by a path of names and numbers, never by the order of creation, so the
same seed gives the same numbers in any process and whatever else ran first:

>>> a = stream(7, 0, "workload", 3).random()
>>> b = stream(7, 0, "workload", 3).random()
>>> a == b
True
"""

from __future__ import annotations

import zlib

import numpy as np


def _key(part: int | str) -> int:
    return zlib.crc32(part.encode()) if isinstance(part, str) else int(part)


def stream(seed: int, *path: int | str) -> np.random.Generator:
    """The generator at ``path`` under ``seed`` (e.g. ``stream(seed, rep, "substrate", name)``)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=tuple(map(_key, path))))
