"""simrollout: a discrete-event simulator of coding-agent RL rollout clusters.

Pipeline: probe -> calibrate -> run -> sweep/plan -> validate (one CLI verb each).
"""

__version__ = "0.1.0"

from .numba_cache import use_user_cache_dir  # noqa: E402

use_user_cache_dir()  # before numba is first imported

__all__ = ["load", "override", "run", "sweep", "plan"]

# ``simrollout.run`` is the API's function, not the subpackage of that name: the subpackage (its
# ``__init__`` is only a docstring) is imported first, so importing it later cannot rebind the name
from . import run as _run_package  # noqa: E402, F401

del run  # noqa: F821


def __getattr__(name: str):
    """``simrollout.run`` and the rest of the API, imported on first use (the command starts fast)."""
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'simrollout' has no attribute {name!r}")
