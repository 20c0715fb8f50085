"""The simulator against reality: a real mini-rollout on a backend vs the simulation of the same.

Each real trajectory waits for its arrival (when arrivals are staggered), creates a sandbox, and
for each of its ``steps`` waits an LLM turn (a client-side sleep, when the workload has one) and
runs ``sleep X`` in the sandbox (X drawn from the scenario's tool-latency distribution: the same
draws the simulation uses), then removes the sandbox; trajectories run at each concurrency
level. The simulation runs the same scenario with the substrate profile calibrated from a probe
of the same engine.

``HELD_OUT`` is a workload that played no part in fitting or choosing the model: another tool
mix, an LLM wait, staggered arrivals and concurrency levels between the probe's.
"""

from __future__ import annotations

import json
import platform
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ..calibration.backends import Backend
from ..errors import InputError
from ..scenario import Scenario, Substrate, scenario_from_dict
from ..sim.engines import STEP
from ..sim.workload_draws import draw_work

METRICS = {
    "infra_per_trajectory": lambda d: float(np.mean(d.end - d.start - d.llm - d.tool)),
    "makespan": lambda d: d.end.max() - d.start.min(),
    "duration_p50": lambda d: np.percentile(d.end - d.start, 50),
    "duration_p90": lambda d: np.percentile(d.end - d.start, 90),
    "duration_p99": lambda d: np.percentile(d.end - d.start, 99),
    "cold_start_p50": lambda d: np.percentile(d.cold, 50),
    "cold_start_p99": lambda d: np.percentile(d.cold, 99),
    # where infrastructure time goes (no targets): the first wave's cold starts (the first
    # trajectories to start, as many as the level), the later ones', and the rest of it per
    # trajectory (exec overhead and teardown)
    "cold_start_first_wave": lambda d: float(np.mean(d.cold[d.wave])),
    "cold_start_later": lambda d: float(np.mean(d.cold[~d.wave])) if (~d.wave).any() else float("nan"),
    "exec_and_teardown": lambda d: float(np.mean(d.end - d.start - d.llm - d.tool - d.cold)),
}


def _waved(d: pd.DataFrame, level: int) -> pd.DataFrame:
    """``d`` with column ``wave``: among the first ``level`` trajectories to start."""
    first = np.zeros(len(d), dtype=bool)
    first[np.argsort(d.start.to_numpy(), kind="stable")[:level]] = True
    return d.assign(wave=first)


# targets (|simulated - real| in % of real) and the held-out workload
TARGETS = {"infra_per_trajectory": 10, "makespan": 10, "duration_p50": 10, "duration_p99": 20,
           "cold_start_p50": 20}  # fmt: skip
# (the workloads held out before it, since used to choose between models: validation/README.md)
HELD_OUT = {
    "levels": [24, 48],
    "tool": {"kind": "lognormal", "median": 0.6, "p99": 4.0},
    "llm": {"kind": "lognormal", "median": 1.0, "p99": 3.0},
    "arrival_rate": 2.0,
}


def mini_rollout_scenario(
    profile: Path,
    trajectories: int,
    steps: int,
    levels: list[int],
    tool: dict,
    seed: int,
    llm: dict | float = 0,
    arrival_rate: float | None = None,
) -> Scenario:
    data = {
        "version": 1,
        "name": "validate",
        "seed": seed,
        "fidelity": STEP.name,
        "workload": {
            "trajectories": trajectories,
            "steps": steps,
            "llm_time": llm,
            "calls_per_step": 1,
            "tools": {"sleep": {"weight": 1, "latency": tool}},
        },
        "substrates": [{"profile": str(profile)}],
        "cluster": {"concurrency": levels},
    }
    if arrival_rate:
        data["arrivals"] = {"kind": "poisson", "rate": arrival_rate}
    return scenario_from_dict(data, Path.cwd() / "validate.yaml")


def arrivals(scn: Scenario) -> np.ndarray:
    """Arrival times of the scenario's trajectories: the simulation's own draws (zero for a batch)."""
    n = scn.trajectories
    if scn.arrivals.kind != "poisson":
        return np.zeros(n)
    from ..sim.substrate_draws import arrival_gaps
    from ..sim.workload_draws import CHUNK

    gaps = [arrival_gaps(scn, 0, c, min(CHUNK, n - c * CHUNK)) for c in range(-(-n // CHUNK))]
    return np.cumsum(np.concatenate(gaps))


def real_rollout(
    backend: Backend, scn: Scenario, image: str, run: int = 0, ops: list | None = None
) -> pd.DataFrame:
    """Run the scenario's trajectories for real at every concurrency level; ``run`` numbers a
    repetition (the same draws). ``ops``, when given, receives one row per timed operation
    (:data:`OPS_COLUMNS`: its start from the level's origin, its latency, an exec's command
    seconds)."""
    keep = ops.append if ops is not None else (lambda row: None)
    work = draw_work(scn, 0, detail=True)
    arrive = arrivals(scn)
    rows = []
    stop = threading.Event()  # set on Ctrl-C or SIGTERM: trajectories end at their next step
    for level in scn.cluster.levels:
        t_origin = time.perf_counter()
        tag = f"validate-{uuid.uuid4().hex[:8]}-{level}"

        def one(i: int, tag=tag, level=level, t_origin=t_origin):
            wait = arrive[i] - (time.perf_counter() - t_origin)
            if wait > 0:
                stop.wait(wait)
            if stop.is_set():
                return None
            start = time.perf_counter() - t_origin
            box = backend.create(image, tag)
            cold = time.perf_counter() - t_origin - start
            keep((run, level, i, "create", start, cold, 0.0))
            llm = execs = 0.0
            try:
                call = int(work.call_off[i])
                for s in range(int(work.step_off[i]), int(work.step_off[i + 1])):
                    if stop.is_set():
                        return None
                    if work.step_llm[s] > 0:  # the LLM turn: the client waits, the sandbox idles
                        t0 = time.perf_counter()
                        time.sleep(float(work.step_llm[s]))
                        llm += time.perf_counter() - t0
                    for _ in range(int(work.step_calls[s])):
                        t0 = time.perf_counter()
                        backend.exec(box, f"sleep {work.call_tool[call]:.4f}")
                        took = time.perf_counter() - t0
                        execs += took
                        keep(
                            (run, level, i, "exec", t0 - t_origin, took, float(f"{work.call_tool[call]:.4f}"))
                        )
                        call += 1
            finally:
                t0 = time.perf_counter()
                backend.remove(box)
                teardown = time.perf_counter() - t0
                keep((run, level, i, "teardown", t0 - t_origin, teardown, 0.0))
            return {
                "concurrency": level,
                "trajectory": i,
                "start": start,
                "cold": cold,
                "end": time.perf_counter() - t_origin,
                "llm": llm,
                "tool": float(work.tool[i]),
                "execs": execs,  # the exec calls' own time, their commands included
                "teardown": teardown,
            }

        pool = ThreadPoolExecutor(level)
        try:
            rows += list(pool.map(one, range(work.n)))
        except BaseException:
            stop.set()  # running trajectories stop at their next step and remove their sandbox
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            backend.sweep(tag)  # a create cut short by an error is removed too
    return pd.DataFrame(rows).assign(run=run)


OPS_COLUMNS = ["run", "concurrency", "trajectory", "phase", "start", "latency", "command"]
LOAD_BINS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # lower edges of the exec-by-load rows


def read_table(path: Path, columns, expected: str, hint: str) -> pd.DataFrame:
    """A CSV table at ``path`` with ``columns``, or a clear error: ``expected`` says what it
    should hold, ``hint`` where it comes from."""
    try:
        table = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a CSV table ({exc}).") from None
    missing = [c for c in columns if c not in table]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)}; expected {expected} with "
            f"{', '.join(columns)} ({hint})."
        )
    return table


def read_ops(path: Path) -> pd.DataFrame:
    """A record's ``ops.csv`` (:data:`OPS_COLUMNS`), checked."""
    return read_table(path, OPS_COLUMNS, "every timed operation of a real rollout",
                      "written by 'simrollout validate --record'")  # fmt: skip


def loads_at_start(ops: pd.DataFrame, sub: Substrate) -> pd.DataFrame:
    """The real execs (``ops`` rows, :data:`OPS_COLUMNS`) with ``overhead`` (latency less the
    command) and ``load``: operations in flight at the exec's start as the model counts them
    (creates, teardowns and execs' overheads of the same run and level, itself included; weighed
    when the profile weighs operations), by the probe's own count (:func:`.load_curves.in_flight`)."""
    from ..calibration.load_curves import in_flight

    rows = sub.contention.weight_rows()
    w = dict(zip(("create", "exec", "teardown"), rows["exec"] if rows else (1.0, 1.0, 1.0)))
    overhead = ops.latency - ops.command  # an exec loads the engine for its overhead
    recs = ops.assign(run_id=ops.run, latency=overhead).to_dict("records")
    load = sum(wq * in_flight(recs, ph) for ph, wq in w.items())
    execs = (ops.phase == "exec").to_numpy()
    return ops[execs].assign(overhead=overhead[execs], load=load[execs]).reset_index(drop=True)


def exec_by_load(ops: pd.DataFrame, sub: Substrate) -> pd.DataFrame:
    """Real exec overhead against the profile's at the loads the real execs started under: per
    band of load (:data:`LOAD_BINS`), the real median overhead and the profile's (its median
    overhead times the contention multiplier at each exec's load, the median of those), then
    every exec's mean. This reads the contention curve alone, apart from how the simulation's own
    loads come out."""
    x = loads_at_start(ops, sub)
    f, m0 = sub.contention.factor("exec"), float(sub.exec_overhead.ppf(0.5))
    x = x.assign(profile=m0 * np.array([f(n) for n in x.load]), band=np.digitize(x.load, LOAD_BINS) - 1)
    rows = []
    for b, g in x.groupby("band"):
        lo = LOAD_BINS[max(b, 0)]
        hi = LOAD_BINS[b + 1] if b + 1 < len(LOAD_BINS) else None
        rows.append({"load": f"{lo:g}" if hi == lo + 1 else f"{lo:g}-{hi - 1:g}" if hi else f"{lo:g}+",
                     "execs": len(g), "real": float(g.overhead.median()),
                     "profile": float(g.profile.median())})  # fmt: skip
    mean = sub.exec_overhead.mean() / m0  # the multiplier scales the whole distribution
    rows.append({"load": "all (mean)", "execs": len(x), "real": float(x.overhead.mean()),
                 "profile": float((x.profile * mean).mean())})  # fmt: skip
    t = pd.DataFrame(rows)
    return t.assign(diff_pct=100 * (t.profile / t.real - 1)).round(4)


def compare(real: pd.DataFrame, scn: Scenario, draws: int = 30) -> pd.DataFrame:
    """Real vs simulated per level and metric. The simulation keeps the real run's workload (its
    command and LLM draws) and repeats the substrate's own draws ``draws`` times (cold starts,
    exec overheads, teardowns: with 64 trajectories a single draw moves cold start p50 by tens of
    percent), reporting their mean and 95% range; ``within_range`` says whether the real value
    falls inside it. With repeated real runs (column ``run``) the real figure is their median,
    ``real_min``/``real_max`` their spread."""
    from ..run.executors import run_many

    runs = []
    for k in range(draws):  # a substrate's streams are keyed by its name; the workload's are not
        subs = [s.model_copy(update={"name": f"{s.name}~{k}"}) for s in scn.substrates]
        runs.append(scn.model_copy(update={"substrates": subs}))
    work = draw_work(scn, 0)
    per: dict[tuple, list[float]] = {}
    for res in run_many(runs, "serial", keep_records=True):
        for key, rec in res.records.items():
            sim = _waved(pd.DataFrame(
                {"start": rec.start, "end": rec.end, "cold": rec.cold, "llm": rec.llm, "tool": work.tool}
            ), key.concurrency)  # fmt: skip
            for m, fn in METRICS.items():
                per.setdefault((key.concurrency, m), []).append(float(fn(sim)))
    out = []
    if "run" not in real:  # one real run
        real = real.assign(run=0)
    # each level's real runs, their first wave marked once for every metric
    real_runs = {level: [_waved(r, level) for _, r in real[real.concurrency == level].groupby("run")]
                 for level in {lv for lv, _ in per}}  # fmt: skip
    for (level, m), values in per.items():
        by_run = [float(METRICS[m](r)) for r in real_runs[level]]
        a = float(np.median(by_run))
        b = float(np.mean(values))
        lo, hi = (float(x) for x in np.percentile(values, [2.5, 97.5]))
        out.append(
            {
                "concurrency": level,
                "metric": m,
                "real": a,
                "simulated": b,
                "sim_lo": lo,
                "sim_hi": hi,
                "within_range": lo <= a <= hi,
                "diff_pct": 100 * (b - a) / a if a else float("nan"),
                "target_pct": TARGETS.get(m),
                "real_min": min(by_run),
                "real_max": max(by_run),
                "runs": len(by_run),
            }
        )
    return pd.DataFrame(out)


def speed_check(backend: Backend, profile: Path, image: str, label: str, seed: int = 0) -> dict:
    """The engine's speed now against the profile: a small burst (8 sandboxes at once, five
    ``sleep 0`` each) run for real and simulated, compared by infrastructure time per
    trajectory. An engine that has sped up or slowed down since it was probed moves the
    validation's comparisons by about as much, whatever the model."""
    scn = mini_rollout_scenario(profile, 8, 5, [8], {"kind": "constant", "value": 0.0}, seed)
    real = real_rollout(backend, scn, image)
    row = compare(real, scn, draws=10).set_index("metric").loc["infra_per_trajectory"]
    a, b = float(row.real), float(row.simulated)
    return {"check": label, "at": time.time(), "real": a, "profile": b, "drift_pct": 100 * (a / b - 1)}


# a recorded real rollout: one row per real trajectory
REAL_COLUMNS = ("concurrency", "trajectory", "start", "cold", "end", "llm", "tool")


def recorded_rollout(folder: Path, profile: Path) -> tuple[Scenario, pd.DataFrame]:
    """A recorded validation's real rollout (``real.csv``) and its workload (``scenario.yaml``),
    the substrate taken from ``profile``: another profile, or another version of the model,
    against a real run kept in validation/ (which makes that record model-choice data)."""

    def swap(data: dict, where: Path) -> None:
        if not isinstance(data.get("substrates"), list):
            raise InputError(f"{where}: expected a recorded scenario with a 'substrates' list.")
        data["substrates"] = [{"profile": str(profile.resolve())}]

    return read_record(folder, "a sandbox rollout", REAL_COLUMNS, swap)


def read_record(folder: Path, what: str, columns, swap) -> tuple[Scenario, pd.DataFrame]:
    """``scenario.yaml`` and ``real.csv`` of a folder written by ``validate --record`` (``what``
    it recorded): the scenario after ``swap(data, path)`` puts the profile to compare in it, and
    the real measurements, checked for ``columns`` and the scenario's levels."""
    from ..errors import load_yaml

    paths = {name: folder / name for name in ("scenario.yaml", "real.csv")}
    for name, path in paths.items():
        if not path.is_file():
            raise InputError(
                f"--against {folder}: no {name} there; expected a folder written by "
                f"'simrollout validate --record' (scenario.yaml and real.csv of {what})."
            )
    data, _ = load_yaml(paths["scenario.yaml"])
    if not isinstance(data, dict):
        raise InputError(f"{paths['scenario.yaml']}: expected a recorded scenario (a mapping).")
    swap(data, paths["scenario.yaml"])
    scn = scenario_from_dict(data, paths["scenario.yaml"])
    real = read_table(paths["real.csv"], columns, f"the real measurements of {what}",
                      "an engine's agent loop is read with --engine, a sandbox rollout without")  # fmt: skip
    levels, want = sorted(set(real.concurrency.tolist())), sorted(scn.cluster.levels)
    if levels != want:
        raise InputError(
            f"{paths['real.csv']}: concurrency levels {levels} do not match the recorded scenario's "
            f"cluster.concurrency {want}."
        )
    return scn, real


def record(folder: Path, scn: Scenario, real: pd.DataFrame, table: pd.DataFrame, backend: Backend,
           speed: pd.DataFrame | None = None, ops: pd.DataFrame | None = None,
           by_load: pd.DataFrame | None = None) -> None:  # fmt: skip
    """Commit-ready record: inputs, real measurements (``ops``: each operation; ``by_load``: the
    execs' overhead by load, :func:`exec_by_load`), comparison, the engine's speed checks and the
    machine."""
    import os

    folder.mkdir(parents=True, exist_ok=True)
    data = scn.model_dump(mode="json", by_alias=True, exclude_none=True)
    for sub in data["substrates"]:  # the profile as seen from the record, not this machine's path
        if sub.get("profile"):
            sub["profile"] = os.path.relpath(Path(sub["profile"]).resolve(), folder.resolve())
    (folder / "scenario.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    real.to_csv(folder / "real.csv", index=False)
    table.to_csv(folder / "comparison.csv", index=False)
    if speed is not None:
        speed.to_csv(folder / "speed.csv", index=False)
    if ops is not None:
        ops.to_csv(folder / "ops.csv", index=False)
    if by_load is not None:
        by_load.to_csv(folder / "exec_by_load.csv", index=False)

    machine = {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        **backend.info(),
    }
    (folder / "machine.json").write_text(json.dumps(machine, indent=2))
