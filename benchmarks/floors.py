"""The README's headline run and plan against their numpy floor, timed alternately.

    python benchmarks/floors.py                  # every case, 5 pairs each
    python benchmarks/floors.py --only plan -n 3

The floor is what numpy alone takes to draw the headline's step variates: its 4 substrates x 1M
trajectories x 150 steps, two float32 lognormals a turn, drawn and summed on 2 processes (one per
core). simrollout draws its normals compiled, faster than numpy, so a case can come in under it.
Each case runs alternately with the floor, ``-n`` pairs; the ratio is the median of the pairs'
ratios (the machine's speed moves with its load, a pair's much less). A warm case runs once first,
unmeasured, so its serving pilots are in the disk cache; a ``--no-cache`` case runs them all (a
first run or plan; numba's cache warm in both).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADLINE = ROOT / "scenarios/1m_150step.yaml"
FLOOR = """
import sys, numpy as np
rng = np.random.default_rng(int(sys.argv[2]))
n, steps, m = int(sys.argv[1]), 150, 32768
for lo in range(0, n, m):
    x = rng.standard_normal((min(m, n - lo), steps, 2), dtype=np.float32)
    x *= np.float32(1.4)
    x += np.float32(6.0)
    np.exp(x, out=x)
    s = x.sum(axis=1)
"""


def floor_wall(trajectories: int = 4_000_000, processes: int = 2) -> float:
    """Wall seconds of the floor: ``trajectories`` split over ``processes`` at once."""
    t0 = time.perf_counter()
    part = trajectories // processes
    procs = [subprocess.Popen([sys.executable, "-c", FLOOR, str(part), str(k)]) for k in range(processes)]
    if any(p.wait() for p in procs):
        raise RuntimeError("the floor's numpy draw failed")
    return time.perf_counter() - t0


def case_cmd(case: str, out: Path) -> list[str]:
    run = [sys.executable, "-m", "simrollout.cli"]
    if case.startswith("headline"):
        cmd = [*run, "run", str(HEADLINE), "--out", str(out / "run"), "-q"]
    else:
        cmd = [*run, "plan", str(HEADLINE), "--deadline", "7d", "-o", str(out / "plan.csv"), "-q"]
    return cmd + (["--no-cache"] if case.endswith("--no-cache") else [])


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


CASES = ("headline", "headline --no-cache", "plan", "plan --no-cache")


def pairs(case: str, n: int) -> dict:
    """``n`` alternating pairs of ``case`` and the floor: medians and the ratio."""
    with tempfile.TemporaryDirectory() as d:
        cmd = case_cmd(case, Path(d))
        if not case.endswith("--no-cache"):
            timed(cmd)  # pilots into the disk cache
        walls, floors = [], []
        for _ in range(n):
            walls.append(timed(cmd))
            floors.append(floor_wall())
    ratios = [w / f for w, f in zip(walls, floors)]
    return {"case": case, "pairs": n, "wall_s": round(statistics.median(walls), 2),
            "floor_s": round(statistics.median(floors), 2), "ratio": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5, help="pairs per case")
    ap.add_argument("--only", default="", help="the cases whose name contains this")
    args = ap.parse_args()
    for case in CASES:
        if args.only in case:
            print(json.dumps(pairs(case, args.n)), flush=True)


if __name__ == "__main__":
    main()
