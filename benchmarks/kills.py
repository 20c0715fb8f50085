"""Probes killed hard (SIGKILL) at random moments, then one cleanup: how many sandboxes are left.

    python benchmarks/kills.py --backend process --kills 50
    python benchmarks/kills.py --backend docker --kills 50     # needs scripts/start-docker.sh

Each round starts ``simrollout probe BACKEND`` at 8 in flight, waits until it holds sandboxes,
sleeps a random 0-2 s, kills it with SIGKILL, counts the sandboxes it left (by the project's
label and the dead probe's pid), then runs ``simrollout cleanup BACKEND`` (even rounds) or the
next probe's start-up sweep (odd rounds) and counts again. Prints one JSON line per round and a
summary; recorded in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simrollout.calibration.backends import get_backend

CLI = [sys.executable, "-m", "simrollout.cli"]


def one_round(backend: str, be, k: int, work: Path, rng: random.Random) -> dict:
    argv = ["probe", backend, "--sandboxes", "64", "--commands", "20", "--concurrency", "8"]
    out = str(work / f"k{k}.jsonl")
    proc = subprocess.Popen(CLI + argv + ["-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def mine():
        return [s for s in be.owned() if s.owner.endswith(f":{proc.pid}")]

    deadline = time.monotonic() + 60
    while not mine() and time.monotonic() < deadline:
        time.sleep(0.05)
    wait = rng.uniform(0, 2)
    time.sleep(wait)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = len(mine())
    how = "cleanup" if k % 2 == 0 else "next probe"
    if how == "cleanup":
        subprocess.run(CLI + ["cleanup", backend], capture_output=True, check=True)
    else:
        subprocess.run(CLI + ["probe", backend, "--sandboxes", "1", "--commands", "1", "--concurrency", "1",
                              "-o", str(work / f"n{k}.jsonl")], capture_output=True, check=True)  # fmt: skip
    return {
        "round": k,
        "killed_after_s": round(wait, 2),
        "left": left,
        "removed_by": how,
        "after": len(mine()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="process", choices=["process", "docker"])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    be = get_backend(args.backend)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp())
    rows = []
    for k in range(args.kills):
        rows.append(one_round(args.backend, be, k, work, rng))
        print(json.dumps(rows[-1]), flush=True)
    summary = {
        "backend": args.backend,
        "kills": len(rows),
        "left_by_the_kills": sum(r["left"] for r in rows),
        "rounds_that_left_some": sum(r["left"] > 0 for r in rows),
        "left_after_cleanup": sum(r["after"] for r in rows),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
