"""Where numba keeps its compiled functions: the user's cache folder, never beside the installed
source (``cache=True`` would otherwise write ``__pycache__`` into site-packages, where a later
editable install finds it and hides the package). Set once, at package import, before numba is
first imported; an existing ``NUMBA_CACHE_DIR`` is kept.

numba checks a cached function against its own file's time stamp only, not against the modules
whose functions and constants it inlined (the compiled engine is several modules): so the folder
is named by a digest of every compiled module's source, and an edit to any of them (or another
version installed) compiles afresh rather than loading a stale loop."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
COMPILED = {"seconds": 0.0}  # the compile a run's pool made for its cells (simrollout.run.executors)
COMPILED_IN = ("sim", "distributions")  # the sub-packages whose modules numba compiles


def source_digest() -> str:
    """A short digest of the source of every module numba compiles (those importing numba)."""
    h = hashlib.sha1()
    for sub in COMPILED_IN:
        for path in sorted((PACKAGE / sub).glob("*.py")):
            text = path.read_bytes()
            if b"numba" in text:
                h.update(path.name.encode())
                h.update(text)
    return h.hexdigest()[:12]


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/simrollout/numba/<digest>``, or ``~/.cache/simrollout/numba/<digest>``
    (:func:`source_digest`)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "simrollout" / "numba" / source_digest()


def use_user_cache_dir() -> str:
    """Point numba's cache at :func:`user_cache_dir` unless ``NUMBA_CACHE_DIR`` is set already;
    the folder used."""
    folder = os.environ.setdefault("NUMBA_CACHE_DIR", str(user_cache_dir()))
    if "numba" in sys.modules:  # imported before simrollout: its config was read already
        sys.modules["numba"].config.CACHE_DIR = folder
    return folder


def loop_cached(tokens: bool = False) -> bool:
    """Whether numba's cache holds the compiled engine's loop (``tokens``: and a training loop's
    on serving engines), without importing numba."""
    folder = os.environ.get("NUMBA_CACHE_DIR")
    names = ["compiled_loop.run"] + ["compiled_tokens.run_training"] * tokens
    return folder is not None and all(any(Path(folder).glob(f"sim_*/{f}-*.nbi")) for f in names)
