"""How fast a substrate runs an agent's commands: a small CPU-bound and I/O-bound command set
timed inside one sandbox of a probe (phase ``tool``) and, as the reference, as subprocesses of
the probing host (``host:`` commands). A command's time is its round trip less that of ``true``
at the same place. ``calibrate`` turns the records into ``substrate.tool_speed``: per class the
geometric mean over its commands of the sandbox's time over the host's, applied to the tool
categories of :data:`CLASSES` (``web`` is not measured)."""

from __future__ import annotations

import math
import subprocess
import tempfile
from collections.abc import Callable

import numpy as np

REPEATS = 5
COMMANDS = {
    "base": "true",
    "cpu:loop": "i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done",
    "cpu:hash": "seq 1 1500000 | md5sum > /dev/null",
    "io:write-read": "dd if=/dev/zero of=.sr_io bs=1048576 count=96 2>/dev/null && cat .sr_io > /dev/null "
    "&& rm -f .sr_io",
    "io:files": "mkdir -p .sr_m && for i in $(seq 400); do echo $i > .sr_m/f$i; done && ls -l .sr_m > "
    "/dev/null && rm -rf .sr_m",
}
CLASSES = {"cpu": ("shell", "test"), "io": ("read", "edit", "search")}


def run_set(timed: Callable[[str, Callable[[], object]], object], in_box: Callable[[str], object]) -> None:
    """Time every command ``REPEATS`` times in the sandbox (``in_box(command)``) and as a
    subprocess of this host (label ``host:...``), alternately, so a change in the machine's load
    meets both; ``timed(label, fn)`` times and records ``fn``."""
    with tempfile.TemporaryDirectory(prefix="simrollout-toolspeed-") as work:
        for _ in range(REPEATS):
            for label, cmd in COMMANDS.items():
                timed(label, lambda c=cmd: in_box(c))
                timed(f"host:{label}", lambda c=cmd: subprocess.run(["sh", "-c", c], cwd=work, check=True))


def factors(records: list[dict]) -> dict[str, float] | None:
    """``tool_speed`` per category from phase ``tool`` records; None without them."""
    ok = [r for r in records if r["phase"] == "tool" and r["ok"] and r.get("command")]
    if not ok:
        return None
    med: dict[str, float] = {}
    for label in {r["command"] for r in ok}:
        med[label] = float(np.median([r["latency"] for r in ok if r["command"] == label]))
    out: dict[str, float] = {}
    for cls, cats in CLASSES.items():
        ratios = []
        for label in COMMANDS:
            if not label.startswith(cls + ":") or label not in med or f"host:{label}" not in med:
                continue
            box = med[label] - med.get("base", 0.0)
            host = med[f"host:{label}"] - med.get("host:base", 0.0)
            if box > 0 and host > 0:
                ratios.append(box / host)
        if ratios:
            f = round(float(math.exp(np.mean(np.log(ratios)))), 3)
            out.update({c: f for c in cats})
    return out or None
