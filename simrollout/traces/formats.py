"""The trace formats: one tuple the reader registry, the scenario schema and the CLI help derive
from (a format ``x-y`` is read by the module ``simrollout.traces.x_y``)."""

from __future__ import annotations

FORMATS = ("tracelab", "atif", "verifiers", "swe-agent", "mini-swe-agent")


def module_name(fmt: str) -> str:
    return fmt.replace("-", "_")


def listed() -> str:
    """``a, b or c``: the formats as the help and the errors name them."""
    return ", ".join(FORMATS[:-1]) + " or " + FORMATS[-1]
