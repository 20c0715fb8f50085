"""Per-trajectory results of one simulated cell, as numpy arrays (never one object per step)."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

OK, FAILED, TIMEOUT, CANCELLED = 0, 1, 2, 4
STATUS = {OK: "ok", FAILED: "failed", TIMEOUT: "timeout", CANCELLED: "cancelled"}
LOST = 3  # an attempt lost its sandbox mid-trajectory (exec failure): retried, or then FAILED
# a trajectory's pre-drawn inputs in a simulated cell, one row per trajectory in this column order
INPUTS = ("cold", "warm", "teardown", "u_create", "u_exec", "u_teardown", "calls", "llm", "overhead", "tool",
          "setup", "reward", "steps")  # fmt: skip


# a trajectory's output row while its chunk is in flight: the fields of Records but ``arrival``.
# An engine ends a trajectory with a :class:`Row`, and a chunk keeps its rows by name
# (``ROW_DTYPE``, a structured array); the compiled loop writes the same memory as a float
# matrix (:func:`row_table`), column ``R_<name>``
ROW = ("start", "end", "cold", "acquire_wait", "worker", "sandbox", "llm", "attempts", "status", "warm",
       "steps_done", "overhead", "teardown", "lost")  # fmt: skip
(R_START, R_END, R_COLD, R_WAIT, R_WORKER, R_SANDBOX, R_LLM, R_ATTEMPTS, R_STATUS, R_WARM, R_STEPS,
 R_OVERHEAD, R_TEARDOWN, R_LOST) = range(len(ROW))  # fmt: skip
Row = namedtuple("Row", ROW)  # one trajectory's row, as an engine ends it
ROW_DTYPE = np.dtype([(name, np.float64) for name in ROW])
RECORD_TYPES = {"attempts": np.int8, "status": np.int8, "warm": bool, "steps_done": np.int32}


class BodyResult(NamedTuple):
    """How a trajectory's body ended, as every SimPy engine's body returns it (the sandbox's
    attempt takes its row's ``status``, ``llm``, ``steps_done`` and ``overhead`` from it)."""

    status: int  # OK, TIMEOUT, LOST (the sandbox was lost at a failing call) or CANCELLED
    llm: float  # seconds generating
    steps: int  # steps done
    seconds: float  # the body's time (its slot's, from the body's start)
    overhead: float  # exec overhead, s


@dataclass
class Records:
    arrival: np.ndarray  # became ready to run, s
    start: np.ndarray  # got a slot (a rollout worker), s
    end: np.ndarray  # released its slot after teardown, s
    cold: np.ndarray  # sandbox acquisition latency of the last attempt (cold or warm start), s
    acquire_wait: np.ndarray  # waited for quota and create-rate tokens, all attempts, s
    worker: np.ndarray  # wall time on the substrate excluding model inference, s
    sandbox: np.ndarray  # billed sandbox lifetime, all attempts, s
    llm: np.ndarray  # time in model generation, s
    attempts: np.ndarray  # int8
    status: np.ndarray  # int8: 0 ok, 1 failed, 2 timeout, 4 cancelled (the training loop)
    warm: np.ndarray  # bool: last attempt was a warm-pool hit
    steps_done: np.ndarray  # int32: steps completed in the last attempt
    # the phases of ``worker`` (docs/model.md, "Where the infrastructure time goes"): exec overhead
    # and teardown of the last attempt, and every failed attempt's worker time (a failed
    # trajectory's every attempt); the rest of ``worker`` is the cold start (``cold``, unless
    # failed) and the task's setup, tool time and reward
    overhead: np.ndarray  # exec overhead, s
    teardown: np.ndarray  # teardown, s
    lost: np.ndarray  # failed attempts, s

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    @property
    def queue_wait(self) -> np.ndarray:
        return self.start - self.arrival

    @classmethod
    def fields(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def as_dict(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def row_table(n: int, zeros=np.zeros) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows: by name (a structured array) and, the same memory, as a float matrix
    (``zeros(n, dtype)`` allocates them)."""
    rows = zeros(n, ROW_DTYPE)
    return rows, rows.view(np.float64).reshape(n, len(ROW))


def records_of(rows: np.ndarray, arrival: np.ndarray) -> Records:
    """Finished rows as :class:`Records`, each field in its type."""
    return Records(arrival=arrival, **{k: rows[k].astype(RECORD_TYPES.get(k, np.float64)) for k in ROW})
