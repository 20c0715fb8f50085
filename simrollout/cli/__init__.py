"""The ``simrollout`` command: one verb per pipeline stage, one module per verb.

``entry`` holds the app and the entry point, ``options`` what the verbs share (option parsing,
the help layout); the verbs register themselves on the app in this order.
"""

from . import run, sweep, plan, probe, cleanup, calibrate, validate, validate_suite, workload, import_config  # noqa: F401, I001
from .entry import app, main

__all__ = ["app", "main"]
