"""The serving-engine model against a real engine: a multi-turn agent loop on an OpenAI-compatible
server vs the simulation of the same inputs with an engine profile fitted from a separate probe.

Each real trajectory sends a prompt, then for each turn streams a completion of ``output`` tokens,
appends the completion and ``appended`` new tokens to its context (a growing context: the server's
prefix cache serves what it still holds), and waits a tool call (a client-side sleep drawn from the
scenario, the same draws the simulation uses). Trajectories run at each concurrency level. The
simulation runs the same scenario on a substrate that costs nothing (the tool wait is the client's).
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from ..calibration.engine_probe import Lanes, Server, text
from ..errors import InputError
from ..scenario import Scenario, scenario_from_dict
from ..sim.workload_draws import draw_work

TARGETS = {"request_p50": 10, "request_p99": 10, "makespan": 10}


def agent_scenario(
    profile: Path,
    trajectories: int,
    steps: int,
    levels: list[int],
    prompt: int,
    appended: int,
    output: int,
    tool: dict,
    seed: int = 0,
) -> Scenario:
    data = {
        "version": 1,
        "name": "validate-engine",
        "seed": seed,
        "workload": {
            "trajectories": trajectories,
            "steps": steps,
            "tokens": {"prompt": prompt, "appended": appended, "output": output},
            "tools": {"wait": {"weight": 1, "latency": tool}},
        },
        "substrates": [{"name": "client", "cold_start": 0, "exec_overhead": 0, "teardown": 0}],
        "cluster": {"concurrency": levels, "inference": {"engines": 1, "profile": str(profile.resolve())}},
    }
    return scenario_from_dict(data, Path.cwd() / "validate-engine.yaml")


def real_agent_loop(
    server: Server, scn: Scenario, seed: int = 0, extra: dict | None = None, run: int = 0, pin: bool = False
) -> pd.DataFrame:
    """Run the scenario's trajectories against the server: one row per request; turn ``k``
    sends the prompt, the appended tokens of steps 0..k and the earlier completions. ``run``
    numbers a repetition: the same token counts and tool waits, other text (nothing cached).
    ``pin``: each of a level's ``c`` clients keeps to its own slot of ``0..c-1`` (``Lanes``)."""
    server.check()
    work = draw_work(scn, 0, detail=True)
    tok = scn.workload.tokens
    rows: list[dict] = []
    lock = threading.Lock()
    stop = threading.Event()
    for level in scn.cluster.levels:
        t_origin = time.perf_counter()
        lanes = Lanes(pin)

        def one(i: int, level=level, t_origin=t_origin, lanes=lanes) -> None:
            rng = random.Random(f"{seed}-{level}-{i}" if run == 0 else f"{seed}-{run}-{level}-{i}")
            ex = lanes.extra(extra or {})
            context = text(int(work.prompt[i]), rng)
            call = int(work.call_off[i])
            for s in range(int(work.step_off[i]), int(work.step_off[i + 1])):
                if stop.is_set():
                    return
                # every turn appends its step's tokens, the first one too (the prompt and the
                # first observation), as the model's turns do (``Cell._turn``)
                context += text(int(work.step_append[s]), rng)
                t0 = time.perf_counter() - t_origin
                res = server.complete(context, int(work.step_output[s]), ex)
                context += res.get("text", "")
                with lock:
                    rows.append({"concurrency": level, "trajectory": i, "step": s, "start": t0,
                                 "latency": res["end"], "ttft": res["ttft"],
                                 "prompt_tokens": res["prompt_tokens"], "cached_tokens": res["cached_tokens"],
                                 "output_tokens": res["output_tokens"]})  # fmt: skip
                for _ in range(int(work.step_calls[s])):
                    time.sleep(float(work.call_tool[call]))
                    call += 1
            with lock:
                rows.append({"concurrency": level, "trajectory": i, "step": -1,
                             "start": time.perf_counter() - t_origin, "latency": 0.0})  # fmt: skip

        pool = ThreadPoolExecutor(level)
        try:
            list(pool.map(one, range(work.n)))
        except BaseException:
            stop.set()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    del tok
    return pd.DataFrame(rows).assign(run=run)


SPEED_PROMPT, SPEED_OUTPUT, SPEED_REQUESTS = 128, 32, 4


def speed_check(server: Server, scn: Scenario, extra: dict | None, label: str, seed: int = 0) -> dict:
    """The engine's speed now against its profile: a few lone requests of the probe's shape
    (128-token prompt, 32 output tokens; fresh text) timed for real and on the profile's
    engine alone. A server slower or faster than when it was probed moves every comparison by
    about as much, whatever the model."""
    import simpy

    from ..sim.serving import ServingTier

    spec = scn.cluster.inference
    rng = random.Random(f"speed-{seed}-{label}-{time.time_ns()}")
    real, model = [], []
    for _ in range(SPEED_REQUESTS):
        res = server.complete(text(SPEED_PROMPT, rng), SPEED_OUTPUT, extra or {})
        env = simpy.Environment()
        tier = ServingTier(env, spec.model_copy(update={"engines": 1, "prefix_cache": False}))
        req = tier.request(
            0, int(res["prompt_tokens"] or SPEED_PROMPT), int(res["output_tokens"] or SPEED_OUTPUT)
        )
        env.run(req.done)
        real.append(res["end"])
        model.append(req.end + spec.engine.overhead)
    a, b = float(np.median(real)), float(np.median(model))
    return {"check": label, "at": time.time(), "real": a, "profile": b, "drift_pct": 100 * (a / b - 1)}


def _metrics(run: pd.DataFrame) -> dict[str, float]:
    """One real run at one level: its requests' latency percentiles, makespan, and the medians
    of time to first token and time per output token after it."""
    req = run[run.step >= 0]
    out = {
        "request_p50": float(np.percentile(req.latency, 50)),
        "request_p99": float(np.percentile(req.latency, 99)),
        "makespan": float(run[run.step < 0].start.max()),
        "ttft_p50": float(np.median(req.ttft)),
    }
    more = req[req.output_tokens > 1]
    out["tpot_p50"] = float(np.median((more.latency - more.ttft) / (more.output_tokens - 1)))
    return out


def compare_engine(real: pd.DataFrame, scn: Scenario) -> pd.DataFrame:
    """Per level: the real and simulated request latency p50/p99 and makespan (with targets),
    and the medians of time to first token and time per output token (without). With repeated
    real runs (column ``run``), the real figure is their median and ``real_min``/``real_max``
    their spread (the engine's own run-to-run noise)."""
    from ..run.executors import run_scenario

    res = run_scenario(scn)
    if "run" not in real:  # one real run
        real = real.assign(run=0)
    out = []
    for level in scn.cluster.levels:
        per_run = [_metrics(r) for _, r in real[real.concurrency == level].groupby("run")]
        row = res.summary[res.summary.concurrency == level].iloc[0]
        sim = {"request_p50": row.llm_request_p50, "request_p99": row.llm_request_p99,
               "makespan": row.makespan_hours * 3600, "ttft_p50": row.ttft_p50,
               "tpot_p50": row.tpot_p50}  # fmt: skip
        for m in per_run[0]:
            vals = [g[m] for g in per_run]
            a, b = float(np.median(vals)), float(sim[m])
            diff = 100 * (b - a) / a if a else float("nan")
            out.append({"concurrency": level, "metric": m, "real": a, "simulated": b, "diff_pct": diff,
                        "target_pct": TARGETS.get(m), "real_min": min(vals), "real_max": max(vals),
                        "runs": len(vals)})  # fmt: skip
    return pd.DataFrame(out)


REAL_COLUMNS = ("concurrency", "trajectory", "step", "start", "latency", "ttft", "output_tokens")


def recorded_agent_loop(folder: Path, profile: Path) -> tuple[Scenario, pd.DataFrame]:
    """A recorded engine validation's real agent loop (``real.csv``) and its workload
    (``scenario.yaml``), served by the engine of ``profile`` (which makes that record
    model-choice data)."""
    from .validate import read_record

    def swap(data: dict, where: Path) -> None:
        inf = (data.get("cluster") or {}).get("inference")
        if not isinstance(inf, dict) or "profile" not in inf:
            raise InputError(
                f"{where}: expected a recorded agent loop (validate --engine --record) with "
                "cluster.inference.profile; a sandbox rollout's record is read without --engine."
            )
        inf["profile"] = str(profile.resolve())
        inf.pop("engine", None)

    return read_record(folder, "an engine's agent loop", REAL_COLUMNS, swap)


def record(folder: Path, scn: Scenario, real: pd.DataFrame, table: pd.DataFrame, server: Server,
           extra: dict, profile: Path, target: Path, speed: pd.DataFrame | None = None,
           pin: bool = False) -> None:  # fmt: skip
    """Commit-ready record in ``folder`` (to become ``target``): inputs, real measurements,
    comparison, the engine's speed checks and the server."""
    import json
    import os

    import yaml

    data = scn.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["cluster"]["inference"].pop("engine", None)
    # the profile as seen from the record, not this machine's path
    data["cluster"]["inference"]["profile"] = os.path.relpath(profile.resolve(), target.resolve())
    (folder / "scenario.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    real.to_csv(folder / "real.csv", index=False)
    table.to_csv(folder / "comparison.csv", index=False)
    if speed is not None:
        speed.to_csv(folder / "speed.csv", index=False)
    info = server.info()
    kind = "llama.cpp llama-server" if "slots" in info else ""
    machine = {
        "cpus": os.cpu_count(),
        "server": kind,
        "request_extra": sorted(extra),
        "pin_slots": pin,
        **info,
    }
    (folder / "machine.json").write_text(json.dumps(machine, indent=2))
