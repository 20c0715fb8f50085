"""The trace formats simrollout reads: one list, from which the reader registry
(:func:`simrollout.traces.read_trace`), the scenario's ``workload.replay.format`` and the CLI's help
derive. Each format's reader is the module of the same name in this package (``-`` read as ``_``)."""

from __future__ import annotations

FORMATS = ("tracelab", "atif", "verifiers", "swe-agent", "mini-swe-agent")


def reader_module(fmt: str) -> str:
    """The module (in :mod:`simrollout.traces`) that reads ``fmt``."""
    return fmt.replace("-", "_")


def spoken() -> str:
    """The formats as a sentence's list: 'a, b or c'."""
    return ", ".join(FORMATS[:-1]) + " or " + FORMATS[-1]
