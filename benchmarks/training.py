"""The training loop's speed target: ``scenarios/grpo_async.yaml`` at ``training.steps=1000`` on its
four substrates in 40 s or less on 2 cores, within 2 GB (docs/performance.md).

    python benchmarks/training.py                 # 1,000 steps, 3 alternating runs of each engine
    python benchmarks/training.py --steps 50 --repeat 1
    python benchmarks/training.py --scenario scenarios/grpo_sync.yaml --steps 100   # another loop

Runs the CLI (``simrollout run --no-records``) on the scenario with ``training.steps`` set, once at
``--fidelity step`` (the reference: the step engine) and once at ``auto`` (the trajectory or
compiled engine wherever the fidelity matrix's training rows back it), alternating, and reports
the median wall time and peak RSS of each, the trajectories run and their rate, and the headline
training metrics of both (which must agree within the matrix's tolerances).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.measure import measure  # noqa: E402
from simrollout.scenario import load_scenario  # noqa: E402
from simrollout.scenario.overrides import base_dict  # noqa: E402
from simrollout.validation.fidelity_training import METRICS  # noqa: E402


def scenario_file(folder: Path, steps: int, scenario: Path = ROOT / "scenarios/grpo_async.yaml") -> Path:
    data = base_dict(load_scenario(scenario))
    data["training"]["steps"] = steps
    path = folder / scenario.name
    path.write_text(yaml.safe_dump(data))
    return path


def one(path: Path, fidelity: str, jobs: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "simrollout.cli", "run", str(path), "--no-records",
               "--fidelity", fidelity, "-j", str(jobs), "-o", out]  # fmt: skip
        wall, rss = measure(cmd)
        summary = pd.read_csv(Path(out) / "summary.csv")
    ran = int(summary["completed"].sum() + summary.get("cancelled", pd.Series([0])).sum())
    return {"wall_s": wall, "peak_rss_mb": rss, "trajectories": ran, "summary": summary}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000, help="training.steps")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each engine, alternating")
    ap.add_argument("--jobs", type=int, default=2, help="processes (2 cores: the target's machine)")
    ap.add_argument(
        "--scenario", type=Path, default=ROOT / "scenarios/grpo_async.yaml", help="the loop's scenario"
    )
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"step": [], "auto": []}
    with tempfile.TemporaryDirectory() as d:
        path = scenario_file(Path(d), args.steps, args.scenario.resolve())
        for _ in range(args.repeat):
            for fid in runs:  # alternating: the machine's drift falls on both alike
                runs[fid].append(one(path, fid, args.jobs))
    result = {"scenario": args.scenario.name, "steps": args.steps, "jobs": args.jobs, "repeat": args.repeat}
    for fid, rs in runs.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        result[fid] = {
            "wall_s": round(wall, 1),
            "peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in rs)),
            "trajectories": rs[0]["trajectories"],
            "trajectories_per_s": round(rs[0]["trajectories"] / wall),
        }
    s, a = runs["step"][0]["summary"], runs["auto"][0]["summary"]
    result["auto_minus_step_pct"] = {
        m: [round(100 * (x - y) / y, 2) if y else 0.0 for x, y in zip(a[m], s[m])] for m in METRICS
    }
    if args.scenario.name == "grpo_async.yaml":  # the target is grpo_async's
        result["target_met"] = result["auto"]["wall_s"] <= 40 and result["auto"]["peak_rss_mb"] <= 2048
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
