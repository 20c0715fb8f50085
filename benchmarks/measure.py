"""Timing a command as a whole process: its wall seconds and the peak memory of its process tree."""

from __future__ import annotations

import statistics
import subprocess
import time

import psutil


def measure(cmd: list[str], pss: list | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB, whole process tree) of a command; ``pss``: append the peak
    of the tree's proportional set size too (shared pages counted once, split between the
    processes that share them, such as a forked pool's inherited imports)."""
    t0 = time.perf_counter()
    proc = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = peak_pss = 0
    while proc.poll() is None:
        try:
            procs = [p for p in [proc] + proc.children(recursive=True) if p.is_running()]
            peak = max(peak, sum(p.memory_info().rss for p in procs))
            if pss is not None:
                peak_pss = max(peak_pss, sum(p.memory_full_info().pss for p in procs))
        except psutil.Error:
            pass
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.read().decode()[-2000:])
    if pss is not None:
        pss.append(peak_pss / 2**20)
    return wall, peak / 2**20


def median_of(repeat: int, fn):
    runs = [fn() for _ in range(repeat)]
    return tuple(statistics.median(x) for x in zip(*runs))
