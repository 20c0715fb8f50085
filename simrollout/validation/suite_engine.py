"""The validation suite on a serving engine (an OpenAI-compatible server; llama.cpp's): a probe
block is a short ``probe openai`` (every level of the engine probe, fewer requests); a real block
is the cell's agent loop run for real (:func:`validate_engine.real_agent_loop`, each client
pinned to its own slot); a cell's engine profile is fitted from its own probe blocks."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .suite import HeldOutCell, SuitePlan, noted_drift, point_and_band, simulate_band, simulated_points
from .suite_docker import _gzip, fresh
from .validate_engine import TARGETS as REQUEST_TARGETS
from .validate_engine import _metrics, agent_scenario, real_agent_loop


@dataclass(frozen=True)
class EngineWorkload:
    """A held-out agent loop: ``steps`` turns per trajectory, a context starting at ``prompt``
    tokens and growing by each completion (``output`` tokens) and ``appended`` new tokens a turn,
    a tool wait drawn from ``tool`` between turns; ``2 x level`` trajectories (at least
    ``min_trajectories``)."""

    name: str
    steps: int
    prompt: int
    appended: int
    output: int
    tool: dict
    min_trajectories: int = 8

    def trajectories(self, level: int) -> int:
        return max(self.min_trajectories, 2 * level)

    def describe(self) -> str:
        return (
            f"{self.steps} turns, prompt {self.prompt} tokens, +{self.appended} a turn, {self.output} "
            f"output tokens, tool wait lognormal {self.tool['median']:g} / {self.tool['p99']:g} s"
        )


# each committed before its first real run. The agent loops before them (prompt 256, +64, 32
# output, 6 turns) were used to choose the engine model; long-prompt's first sitting (2026-12-03)
# chose ``per_cached_attention``, many-turns' (2026-12-04) its being left unset by default, and
# long-output's (2026-12-05) with the probe's pairs of four append sizes its applying below the
# size the probe finds (``cached_attention_below``), and short-appends' (2026-12-05) that size
# bounding each request's chunk rather than the batch: all four are model-choice data now.
# tiny-appends (20 new tokens a turn, more turns) was added after that choice, before its first
# run, and near-switch (56 new tokens a turn: chunks just under the switch llama.cpp's CPU
# flash attention makes at 64) after tiny-appends' sitting, with no model change between; the
# next change of the engine model needs a new workload here again
ENGINE_WORKLOADS = (
    EngineWorkload("long-prompt", 5, 512, 32, 24, {"kind": "lognormal", "median": 0.2, "p99": 1.0}),
    EngineWorkload("many-turns", 8, 256, 96, 16, {"kind": "lognormal", "median": 0.5, "p99": 2.0}),
    EngineWorkload("long-output", 4, 384, 48, 48, {"kind": "lognormal", "median": 0.3, "p99": 1.5}),
    EngineWorkload("short-appends", 6, 640, 40, 24, {"kind": "lognormal", "median": 0.4, "p99": 1.6}),
    EngineWorkload("tiny-appends", 8, 512, 20, 16, {"kind": "lognormal", "median": 0.2, "p99": 1.0}),
    EngineWorkload("near-switch", 6, 768, 56, 20, {"kind": "lognormal", "median": 0.3, "p99": 1.2}),
)
HELD_OUT = ("tiny-appends", "near-switch")  # the workloads no model choice has seen yet
ENGINE_LEVELS = (1, 4, 8)
# the engine's targets: request latency as `validate --engine`, trajectory durations and makespan
# as the sandbox suite's
TARGETS = {**REQUEST_TARGETS, "duration_p50": 10, "duration_p99": 20}
# a probe block: per level (1, 4, 8) and prompt length (128, 512, 1,024: three lengths fit the
# prefill's fixed part too) 2 requests (the full probe: max(8, 2 x level) at 1, 2, 4, 8), one
# round of decode runs of 48 tokens, one shared-prefix pair per append size (the probe's four)
PROBE_LEVELS, PROBE_PROMPTS, PROBE_REQUESTS, PROBE_DECODE = (1, 4, 8), (128, 512, 1024), 2, 48


def engine_real_metrics(run: pd.DataFrame) -> dict[str, float]:
    """One real agent loop at one level: :func:`validate_engine._metrics` and the trajectories'
    duration percentiles (first request's start to the end of the last tool wait)."""
    out = _metrics(run)
    ends = run[run.step < 0].set_index("trajectory").start
    starts = run[run.step >= 0].groupby("trajectory").start.min()
    dur = (ends - starts.reindex(ends.index)).to_numpy()
    out.update(duration_p50=float(np.percentile(dur, 50)), duration_p99=float(np.percentile(dur, 99)))
    return out


def engine_measured(res) -> pd.DataFrame:
    """A simulated agent loop's figures per level: request latency percentiles and makespan off its
    summary; the trajectories' duration percentiles from its records (a run kept with them), taken
    as the real side takes them (:func:`engine_real_metrics`: numpy's interpolated percentiles).
    The summary's are its sketch's lower-rank ones: over a cell's 8-16 trajectories they read
    p50 3-5% and p99 up to 9% below the interpolated ones on the same durations."""
    s = res.summary
    out = pd.DataFrame(
        {
            "concurrency": s.concurrency,
            "request_p50": s.llm_request_p50,
            "request_p99": s.llm_request_p99,
            "makespan": s.makespan_hours * 3600,
            "duration_p50": s.duration_p50,
            "duration_p99": s.duration_p99,
            "ttft_p50": s.ttft_p50,
            "tpot_p50": s.tpot_p50,
        }
    )
    for key, rec in (res.records or {}).items():
        dur = np.asarray(rec.end) - np.asarray(rec.start)
        at = out.concurrency == key.concurrency
        out.loc[at, "duration_p50"], out.loc[at, "duration_p99"] = np.percentile(dur, [50, 99])
    return out


BANDED_AS = {"request_p50": "llm_request_p50", "request_p99": "llm_request_p99", "makespan": "makespan_hours",
             "duration_p50": "duration_p50", "duration_p99": "duration_p99"}  # fmt: skip


class EngineTarget:
    """The suite against a real server at ``base_url``; probe records, real loops and each cell's
    engine profile go under ``folder/<cell>/``."""

    name = "engine"
    targets = TARGETS

    def __init__(self, base_url: str, model: str, extra: dict, folder: Path, seed: int = 0, pin: bool = True):
        from ..calibration.engine_probe import Server

        self.server, self.extra, self.folder, self.seed, self.pin = (
            Server(base_url, model),
            extra,
            folder,
            seed,
            pin,
        )
        self.runs: dict[str, list[pd.DataFrame]] = {}

    def _dir(self, cell: HeldOutCell) -> Path:
        d = self.folder / cell.label.replace("@", "-")
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _scenario(self, cell: HeldOutCell, profile: Path):
        w = cell.workload
        return agent_scenario(
            profile,
            w.trajectories(cell.level),
            w.steps,
            [cell.level],
            w.prompt,
            w.appended,
            w.output,
            w.tool,
            self.seed,
        )

    def probe(self, cell: HeldOutCell, block: int) -> list[dict]:
        from ..calibration.engine_probe import EnginePlan, probe_engine
        from ..calibration.probe import read_records

        out = self._dir(cell) / "probes.jsonl"
        if block == 0:  # a new sitting of the cell: an earlier sitting's records are not its own
            fresh(self._dir(cell))
        start = sum(1 for _ in out.open()) if out.exists() else 0
        plan = EnginePlan(
            levels=PROBE_LEVELS,
            prompts=PROBE_PROMPTS,
            requests=PROBE_REQUESTS,
            decode_output=PROBE_DECODE,
            decode_rounds=1,
            pairs=1,
            pin_slots=self.pin,
            extra=self.extra,
        )
        probe_engine(self.server, plan, out)
        return read_records([out])[start:]

    def recorded(self, cell: HeldOutCell) -> tuple[list[dict], dict[str, list[float]]]:
        """A recorded cell's probe records and real metrics per repeat (``probes.jsonl.gz``,
        ``real.csv``)."""
        from .suite_docker import read_gzipped_records

        d = self._dir(cell)
        records = read_gzipped_records(d / "probes.jsonl.gz")
        self.runs[cell.label] = [g for _, g in pd.read_csv(d / "real.csv").groupby("run")]
        real: dict[str, list[float]] = {}
        for g in self.runs[cell.label]:
            for m, v in engine_real_metrics(g).items():
                real.setdefault(m, []).append(v)
        return records, real

    def real(self, cell: HeldOutCell, repeat: int) -> dict[str, float]:
        scn = self._placeholder(cell)  # the real loop reads the workload's draws, not the engine
        run = real_agent_loop(self.server, scn, self.seed, self.extra, run=repeat, pin=self.pin)
        self.runs.setdefault(cell.label, []).append(run)
        return engine_real_metrics(run)

    def _placeholder(self, cell: HeldOutCell):
        from ..calibration.calibrate import write_profile

        path = self.folder / "placeholder-engine.yaml"
        if not path.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            write_profile(
                {
                    "version": 1,
                    "name": "placeholder",
                    "engine": {
                        "iteration": {"base": 0.01, "per_prefill_token": 1e-4, "per_decode": 0.001},
                        "kv_capacity_tokens": 16384,
                        "max_running": 8,
                    },
                },
                path,
            )
        return self._scenario(cell, path)

    def simulate(self, cell: HeldOutCell, records: list[dict], plan: SuitePlan) -> dict[str, dict]:
        from ..calibration.calibrate import write_profile
        from ..calibration.engine_fit import engine_profile
        from ..sim.engine_replay import replay

        d = self._dir(cell)
        profile = engine_profile(records, f"suite-{cell.label}", drift=sitting_drift(records), replay=replay)
        write_profile(profile, d / "profile.yaml")
        scn = self._scenario(cell, d / "profile.yaml")
        per_draw, refits, source = simulate_band(scn, engine_measured, 1)
        if refits is None:  # one deterministic engine, tool waits the real's: no band to read
            source = "none: the engine profile has no refits"
        else:  # the client stands in for a substrate (no cost, no band): the engine's part alone
            source = next((p for p in source.split("; ") if p.startswith("engine")), source)
        out = {}
        for m in TARGETS:
            pb = point_and_band(per_draw, refits, cell.level, m, BANDED_AS.get(m), _convert(m), source)
            if refits is None or m not in BANDED_AS:
                pb.update(lo=float("nan"), hi=float("nan"))
            out[m] = pb
        noted_drift(out, profile.get("uncertainty"))
        if self.runs.get(cell.label):
            pd.concat(self.runs[cell.label]).to_csv(d / "real.csv", index=False)
        _gzip(d / "probes.jsonl")
        out["_extra"] = {
            "iteration": profile["engine"]["iteration"],
            "fit": profile.get("fit", {}),
            "readings": readings(self.runs.get(cell.label, []), per_draw[per_draw.concurrency == cell.level]),
        }
        return out

    def point(
        self, cell: HeldOutCell, near: list[dict], records: list[dict], plan: SuitePlan
    ) -> dict[str, float]:
        """The cell's metrics on an engine fitted from the probe records ``near`` alone (one run:
        the engine is deterministic, the tool waits are the real's)."""
        import tempfile

        from ..calibration.calibrate import write_profile
        from ..calibration.engine_fit import engine_profile
        from ..sim.engine_replay import replay

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "profile.yaml"
            write_profile(engine_profile(near, f"suite-{cell.label}", bootstrap=0, replay=replay), path)
            return simulated_points(self._scenario(cell, path), engine_measured, cell.level, 1)

    def machine(self) -> dict:
        return {
            "cpus": os.cpu_count(),
            "server": "llama.cpp llama-server" if "slots" in self.server.info() else "",
            "pin_slots": self.pin,
            "request_extra": sorted(self.extra),
            **self.server.info(),
        }


def readings(runs: list[pd.DataFrame], sim: pd.DataFrame) -> dict[str, dict[str, float]]:
    """The cell's per-request readings, real (the mean over its runs of each run's median) and
    simulated (the mean over the draws): time to first token of a trajectory's first turn (its
    prompt cold) and of its later turns (resumed on a cached prefix; the real side alone tells
    them apart), and time per output token."""
    out: dict[str, dict[str, float]] = {}
    if not runs:
        return out
    firsts, resumed = [], []
    for run in runs:
        req = run[run.step >= 0]
        first = req.groupby("trajectory").step.transform("min") == req.step
        firsts.append(req[first].ttft.median())
        resumed.append(req[~first].ttft.median())
    real = [_metrics(r) for r in runs]  # each run's ttft_p50 and tpot_p50, as validate --engine reads them

    def mean(x) -> float:
        x = np.asarray(x, float)
        return float(x[np.isfinite(x)].mean()) if np.isfinite(x).any() else float("nan")

    out["ttft_first"] = {"real": mean(firsts)}
    out["ttft_resumed"] = {"real": mean(resumed)}  # nan for one-turn trajectories
    out["ttft"] = {"real": mean([m["ttft_p50"] for m in real]), "sim": mean(sim.ttft_p50)}
    out["tpot"] = {"real": mean([m["tpot_p50"] for m in real]), "sim": mean(sim.tpot_p50)}
    return out


def _convert(metric: str):
    return (lambda v: v * 3600) if metric == "makespan" else float


def _drift_group(phase: str, r: dict):
    """A request's group for the sitting's drift: time to first token by prompt length (plain
    requests alone in flight: at a loaded level it is mostly where a request fell in the batch),
    time per output token by level (decode runs)."""
    if phase == "ttft" and r.get("mode") == "plain" and r["concurrency"] == 1:
        return (1, r.get("prompt_length") or r["prompt_tokens"])
    if phase == "tpot" and r.get("mode") == "decode":
        return r["concurrency"]
    return None


def sitting_drift(records: list[dict]) -> dict | None:
    """How far time to first token and time per output token moved over the sitting's probe
    blocks (:func:`.drift.sitting_drift`)."""
    from ..calibration import drift

    return drift.sitting_drift(records, {"ttft": "ttft", "tpot": "tpot"}, _drift_group)


def engine_notes(results) -> list[str]:
    """What the per-request readings show, cell by cell (misses first said): time to first token
    and per output token, real against simulated (:func:`readings`), the first turns' and the
    resumed turns' time to first token apart, the probe's own resumed pairs against the fit, and
    the fitted iteration costs."""
    lines = []
    for res in results:
        missed = [r["metric"] for r in res.rows if r["verdict"] == "miss"]
        rd, parts = res.extra.get("readings") or {}, []
        for key, what, unit in (("ttft", "time to first token p50", 1), ("tpot", "per output token", 1e3)):
            real, sim = rd.get(key, {}).get("real", np.nan), rd.get(key, {}).get("sim", np.nan)
            if np.isfinite(real) and np.isfinite(sim) and real > 0:
                u = "ms" if unit > 1 else "s"
                parts.append(f"{what} {sim * unit:.3g} {u} simulated against {real * unit:.3g} {u} real "
                             f"({sim / real - 1:+.0%})")  # fmt: skip
        first, again = (rd.get(k, {}).get("real", np.nan) for k in ("ttft_first", "ttft_resumed"))
        if np.isfinite(first):
            text = f"real time to first token of first turns {first:.3g} s"
            parts.append(text + (f", of resumed turns {again:.3g} s" if np.isfinite(again) else ""))
        resumed = (res.extra.get("fit") or {}).get("resumed_c1") or {}
        if resumed.get("ttft_rel_error") is not None:
            err = resumed["ttft_rel_error"]
            parts.append(f"the fit reads the probe's own resumed pairs at 1 in flight {err:+.0%}")
        if it := res.extra.get("iteration"):
            parts.append("fitted iteration (s): " + ", ".join(f"{k} {v:.3g}" for k, v in it.items()))
        head = res.cell.label + (f" missed {', '.join(missed)}" if missed else "")
        lines.append(f"- {head}: " + "; ".join(parts) + ".")
    return (["What the per-request readings show (each cell's real.csv and profile.yaml):", "", *lines]
            if lines else [])  # fmt: skip
