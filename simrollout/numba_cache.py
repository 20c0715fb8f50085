"""Where numba keeps its compiled functions: the user's cache folder, never beside the installed
source (``cache=True`` would otherwise write ``__pycache__`` into site-packages, where a later
editable install finds it and hides the package). Set once, at package import, before numba is
first imported; an existing ``NUMBA_CACHE_DIR`` is kept."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/simrollout/numba``, or ``~/.cache/simrollout/numba``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "simrollout" / "numba"


def use_user_cache_dir() -> str:
    """Point numba's cache at :func:`user_cache_dir` unless ``NUMBA_CACHE_DIR`` is set already;
    the folder used."""
    folder = os.environ.setdefault("NUMBA_CACHE_DIR", str(user_cache_dir()))
    if "numba" in sys.modules:  # imported before simrollout: its config was read already
        sys.modules["numba"].config.CACHE_DIR = folder
    return folder
