"""Serving pilots kept on disk between runs (:mod:`simrollout.sim.serving_pilot`): a run, a sweep
and a plan of the same scenario reuse the pilots any of them ran.

A pilot is keyed by a SHA-256 hash of everything that determines it: the sliced scenario it runs
(:func:`simrollout.sim.pilot_run.slice_scenario`, with the profiles' contents merged in and the
seed), the bytes of a replayed trace, the replication, the cluster's engine count (its
description names it), the package version and the source of the package (the pilot runs the
step engine, so any change of the code misses the cache). The folder: ``$SIMROLLOUT_CACHE`` if
set, else the user's cache folder (``$XDG_CACHE_HOME/simrollout/pilots``, by default
``~/.cache/simrollout/pilots``). ``SIMROLLOUT_NO_CACHE=1`` (or ``--no-cache``) turns it off.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import tempfile
from pathlib import Path

from .. import __version__
from ..scenario import Scenario
from ..sim.serving_pilot import Pilot

OFF = "SIMROLLOUT_NO_CACHE"
FOLDER = "SIMROLLOUT_CACHE"


def enabled() -> bool:
    return os.environ.get(OFF, "").strip().lower() in ("", "0", "false", "no")


def disable() -> None:
    """Turn the cache off for this process and the workers it starts."""
    os.environ[OFF] = "1"


def folder() -> Path:
    if os.environ.get(FOLDER):
        return Path(os.environ[FOLDER])
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("simrollout", appauthor=False)) / "pilots"


@functools.cache
def code_version() -> str:
    """A hash of the package's Python source: the code that runs a pilot, and all it calls."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def key_of(pilot_scenario: Scenario, engines: int, rep: int) -> str:
    """The hash of what determines the pilot of ``pilot_scenario`` (a sliced scenario), in the
    scenario's own order: the order of its tools is the order the mixture draws them in."""
    data = pilot_scenario.model_dump(mode="json", by_alias=True)
    replay = pilot_scenario.workload.replay
    trace = hashlib.sha256(Path(replay.path).read_bytes()).hexdigest() if replay is not None else None
    text = json.dumps({"scenario": data, "trace": trace, "engines": engines, "replication": rep,
                       "version": __version__, "code": code_version()})  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()


def load(key: str) -> Pilot | None:
    """The pilot stored under ``key``, or None (none, the cache off, or a file unreadable)."""
    if not enabled():
        return None
    try:
        with open(folder() / f"{key}.pkl", "rb") as f:
            pilot = pickle.load(f)
    except Exception:  # missing, or not a pilot this code can read: run it again
        return None
    return pilot if isinstance(pilot, Pilot) else None


def store(key: str, pilot: Pilot) -> None:
    """Keep ``pilot`` under ``key`` (written whole or not at all; a folder not writable skips it)."""
    if not enabled():
        return
    try:
        where = folder()
        where.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(pilot, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, where / f"{key}.pkl")
    except OSError:
        Path(tmp).unlink(missing_ok=True)
