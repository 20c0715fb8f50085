"""Speed and memory of simrollout, recorded in docs/performance.md.

    python benchmarks/run.py            # everything (about 10 minutes on 2 cores)
    python benchmarks/run.py --quick    # smaller sizes, for a smoke check
    python benchmarks/run.py --streamed 10000000 100000000   # one substrate vs the numpy floor
    python benchmarks/run.py --compiled-training --only train_tokens   # compiled vs step, training rows

Times are medians of ``--repeat`` runs; peak RSS sums the whole process tree (the parallel cells
included), sampled every 50 ms. Machines here are shared and noisy: compare ratios within one run.
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

import psutil
import simpy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.measure import measure, median_of  # noqa: E402
from simrollout.run.executors import run_scenario  # noqa: E402
from simrollout.scenario import load_scenario, scenario_from_dict  # noqa: E402
from simrollout.scenario.overrides import base_dict  # noqa: E402
from simrollout.validation.fidelity import Row, build, matrix  # noqa: E402


def headline(repeat: int) -> dict:
    out = tempfile.mkdtemp()
    cmd = [sys.executable, "-m", "simrollout.cli", "run", str(ROOT / "scenarios/1m_150step.yaml"), "-o", out]
    wall, rss = median_of(repeat, lambda c=cmd: measure(c))
    return {"wall_s": round(wall, 1), "peak_rss_mb": round(rss)}


class _Counting(simpy.Environment):
    """Counts processed events and the time spent processing them."""

    events = 0
    seconds = 0.0

    def step(self):
        _Counting.events += 1
        return super().step()

    def run(self, until=None):
        t0 = time.perf_counter()
        try:
            return super().run(until)
        finally:
            _Counting.seconds += time.perf_counter() - t0


def step_engine_rate() -> dict:
    import simrollout.sim.model as model

    # the fidelity matrix's loaded row: host contention and a saturated tier
    scn = scenario_from_dict({**build(Row("async", "both"), 2_000, 20, 256), "fidelity": "step"})
    model.simpy.Environment, orig = _Counting, simpy.Environment
    try:
        _Counting.events, _Counting.seconds = 0, 0.0
        run_scenario(scn, jobs=1, keep_records=False)
    finally:
        model.simpy.Environment = orig
    sec = _Counting.seconds
    return {
        "events": _Counting.events,
        "event_loop_s": round(sec, 2),
        "events_per_s": round(_Counting.events / sec),
    }


def serving() -> dict:
    """The serving-engine model: wall of scenarios/serving_tokens.yaml, and how many engine
    iterations each SimPy event stands for (decode runs summed in closed form)."""
    import simrollout.sim.model as model
    from simrollout.scenario import load_scenario
    from simrollout.sim.serving import ServingTier

    tiers: list = []
    orig_tier, orig_env = model.ServingTier, simpy.Environment

    def keep(*a, **k):
        tiers.append(ServingTier(*a, **k))
        return tiers[-1]

    model.ServingTier, model.simpy.Environment = keep, _Counting
    try:
        _Counting.events, _Counting.seconds = 0, 0.0
        t0 = time.perf_counter()
        run_scenario(load_scenario(ROOT / "scenarios/serving_tokens.yaml"), jobs=1, keep_records=False)
        wall = time.perf_counter() - t0
    finally:
        model.ServingTier, model.simpy.Environment = orig_tier, orig_env
    iterations = sum(e.iterations for t in tiers for e in t.engines)
    requests = sum(t.requests for t in tiers)
    events = _Counting.events
    return {"wall_s": round(wall, 1), "requests": requests, "iterations": iterations, "events": events,
            "iterations_per_event": round(iterations / events, 1)}  # fmt: skip


def fidelity_matrix(trajectories: int, steps: int, only: str = "") -> list[dict]:
    """Trajectory vs step fidelity on every row of simrollout.validation.fidelity.matrix() (whose name
    contains ``only``), with the speedup and, for the trajectory run, what ``fidelity: auto``
    would choose at full size."""
    from simrollout.validation.fidelity import compare, training_rows

    rows = []
    every = matrix() + training_rows()  # the training rows: their own size (30 steps)
    for row in (r for r in every if only in r.name):
        c = compare(row, trajectories=trajectories, steps=steps)
        rows.append({**c.as_dict(), "step_wall_s": round(c.step_seconds, 2),
                     "trajectory_wall_s": round(c.fast_seconds, 2)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def compiled_training(only: str = "") -> list[dict]:
    """The compiled engine against the step engine on the training rows it covers (whose name
    contains ``only``; each row's own size), as the table docs/fidelity.md records."""
    from simrollout.validation.fidelity import compare, compiled_rows

    rows = []
    for row in (r for r in compiled_rows() if r.regime == "training" and only in r.name):
        c = compare(row, fast="compiled")
        rows.append({**c.as_dict(), "step_wall_s": round(c.step_seconds, 2),
                     "trajectory_wall_s": round(c.fast_seconds, 2)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def matrix_markdown(rows: list[dict]) -> str:
    """The matrix as the table recorded in docs/performance.md."""
    from simrollout.validation import fidelity_training
    from simrollout.validation.fidelity import METRICS

    training = bool(rows) and rows[0]["regime"] == "training"
    metrics = fidelity_training.METRICS if training else METRICS
    head = ["row", *metrics, "step s", "traj. s", "speedup", "within", "auto runs"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["row"], *(f"{r.get(m, float('nan')):+.2f}" for m in metrics), f"{r['step_wall_s']:.1f}"]
        cells += [f"{r['trajectory_wall_s']:.2f}", f"{r['speedup']}x", "yes" if r["within"] else "**no**"]
        cells.append(r["auto"] if r["auto"] == "trajectory" else f"**{r['auto']}**")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def scaling(sizes: list[int], repeat: int = 1, pss: list | None = None) -> list[dict]:
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "s.yaml"
            data = base_dict(load_scenario(ROOT / "scenarios/1m_150step.yaml"))
            data["workload"]["trajectories"] = n
            data["substrates"] = data["substrates"][:1]
            import yaml

            p.write_text(yaml.safe_dump(data))
            cmd = [sys.executable, "-m", "simrollout.cli", "run", str(p), "--no-records", "-o", d]
            wall, rss = median_of(repeat, lambda c=cmd: measure(c, pss))
        rows.append({"trajectories": n, "wall_s": round(wall, 1), "peak_rss_mb": round(rss)})
    return rows


def floor_seconds(n: int, steps: int = 150) -> float:
    """The numpy floor of a run of ``n`` trajectories of ``steps`` turns: drawing its step
    variates (a turn's appended and output tokens, two lognormals) and summing them per
    trajectory with numpy alone, in chunks of 32,768 trajectories, on one core, in a process of
    its own. Float32 normals (numpy's fastest draw), exponentiated in place."""
    code = (
        "import time, numpy as np\n"
        "rng = np.random.default_rng(0)\n"
        "t0 = time.perf_counter()\n"
        f"n, steps, m = {n}, {steps}, 32768\n"
        "for lo in range(0, n, m):\n"
        "    x = rng.standard_normal((min(m, n - lo), steps, 2), dtype=np.float32)\n"
        "    x *= np.float32(1.4)\n"
        "    x += np.float32(6.0)\n"
        "    np.exp(x, out=x)\n"
        "    s = x.sum(axis=1)\n"
        "print(time.perf_counter() - t0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout)


FLOOR_MOST = 10_000_000


def streamed(sizes: list[int]) -> list[dict]:
    """One-substrate runs of the headline, ``--no-records``, of each size: wall, peak RSS and PSS
    of the process tree, and the numpy floor (:func:`floor_seconds`) measured right after (on
    at most :data:`FLOOR_MOST` trajectories, scaled), as a ratio."""
    rows = []
    for n in sizes:
        pss: list[float] = []
        run = scaling([n], pss=pss)[0]
        part = min(n, FLOOR_MOST)  # the floor is linear in n: measured on at most FLOOR_MOST, scaled
        floor = floor_seconds(part) * n / part
        rows.append({**run, "peak_pss_mb": round(pss[0]), "floor_s": round(floor, 1),
                     "ratio": round(run["wall_s"] / floor, 2)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


TARGETS = {
    "headline": 20.0,
    "plan of the headline": 90.0,
    "10M one substrate": 60.0,
    "grpo_async 1,000 steps": 40.0,
}
MEMORY_MB = {"headline": 2048, "grpo_async 1,000 steps": 2048}  # peak RSS bounds, where a target has one


def plan(repeat: int) -> dict:
    """The README's plan of the headline: ``plan scenarios/1m_150step.yaml --deadline 7d``."""
    out = tempfile.mkdtemp()
    cmd = [sys.executable, "-m", "simrollout.cli", "plan", str(ROOT / "scenarios/1m_150step.yaml"),
           "--deadline", "7d", "-o", str(Path(out) / "plan.csv")]  # fmt: skip
    wall, rss = median_of(repeat, lambda c=cmd: measure(c))
    return {"wall_s": round(wall, 1), "peak_rss_mb": round(rss)}


def targets(repeat: int) -> list[dict]:
    """The speed targets of docs/performance.md, each with its verdict."""
    from benchmarks.training import one, scenario_file

    walls = {"headline": headline(repeat), "plan of the headline": plan(repeat)}
    walls["10M one substrate"] = scaling([10_000_000], repeat)[0]
    with tempfile.TemporaryDirectory() as d:
        path = scenario_file(Path(d), 1000)
        runs = [one(path, "auto", 2) for _ in range(repeat)]
    walls["grpo_async 1,000 steps"] = {
        "wall_s": round(statistics.median(r["wall_s"] for r in runs), 1),
        "peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in runs)),
    }
    rows = []
    for name, limit in TARGETS.items():
        w = walls[name]
        met = w["wall_s"] <= limit and w["peak_rss_mb"] <= MEMORY_MB.get(name, float("inf"))
        rows.append({"target": name, "limit_s": limit, **w, "met": met})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--targets", action="store_true", help="only the speed targets, with verdicts")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fidelity", action="store_true", help="only the fidelity matrix, as markdown")
    ap.add_argument("--streamed", type=int, nargs="*", help="one-substrate runs, and the numpy floor")
    ap.add_argument("--compiled-training", action="store_true",
                    help="only the compiled engine's training rows, as markdown")  # fmt: skip
    ap.add_argument("--trajectories", type=int, default=6_000, help="per matrix row")
    ap.add_argument("--steps", type=int, default=30, help="per trajectory, in the matrix")
    ap.add_argument("--only", default="", help="matrix rows whose name contains this (e.g. tokens)")
    args = ap.parse_args()
    if args.targets:
        for row in targets(args.repeat):
            print(json.dumps(row), flush=True)
        return
    if args.streamed is not None:
        streamed(args.streamed or [10_000_000, 100_000_000])
        return
    if args.fidelity:
        print(matrix_markdown(fidelity_matrix(args.trajectories, args.steps, args.only)))
        return
    if args.compiled_training:
        print(matrix_markdown(compiled_training(args.only)))
        return
    n_cmp = 1_000 if args.quick else args.trajectories
    sections = {
        "machine": lambda: {
            "cpus": psutil.cpu_count(),
            "mem_gb": round(psutil.virtual_memory().total / 2**30),
        },
        "step_engine": step_engine_rate,
        "serving": serving,
        "fidelity_matrix": lambda: fidelity_matrix(n_cmp, 20 if args.quick else 30),
    }
    if not args.quick:
        sections["headline"] = lambda: headline(args.repeat)
        sections["scaling_one_substrate"] = lambda: scaling([100_000, 1_000_000, 10_000_000])
    result = {}
    for name, fn in sections.items():
        result[name] = fn()
        print(json.dumps({name: result[name]}), flush=True)  # each section as soon as it is measured
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
