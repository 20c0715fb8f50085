"""The validation suite on a sandbox backend (the local Docker engine): a probe block is a short
probe at level 1, half the cell's level and the cell's level (the recipe's paced commands; on
the synthetic substrate two levels alone left the fit 6-13% low on infrastructure time, three
within 2.5%); a real block is the
cell's rollout run for real (:func:`validate.real_rollout`, every operation timed); a cell's
profile is calibrated from its own probe blocks, with refits for the band where the fit makes
them."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..scenario import Scenario, Substrate, scenario_from_dict
from ..sim.engines import STEP
from ..sim.workload_draws import draw_work
from .suite import (
    HeldOutCell,
    HeldOutWorkload,
    SuitePlan,
    noted_drift,
    point_and_band,
    simulate_band,
    simulated_points,
)
from .validate import LOAD_BINS, METRICS, OPS_COLUMNS, TARGETS, _waved, exec_by_load, real_rollout

PROBE_COMMANDS, PROBE_THINK = 5, 1.0  # the README recipe's probe: paced commands, a fixed think
LOW_SANDBOXES = 4  # lifecycles at level 1 per probe block (3 blocks: 12 creates, 60 execs)
CLIENT = {"name": "client", "cold_start": 0, "exec_overhead": 0, "teardown": 0}  # the real side's


def cell_scenario(w: HeldOutWorkload, level: int, substrate: dict, seed: int = 0) -> Scenario:
    """The cell's rollout: ``w`` at ``level`` in flight on ``substrate`` (a profile reference or
    an inline substrate); the workload's draws do not depend on the substrate."""
    data = {
        "version": 1,
        "name": f"suite-{w.name}-{level}",
        "seed": seed,
        "fidelity": STEP.name,
        "workload": {
            "trajectories": w.trajectories(level),
            "steps": w.steps,
            "llm_time": w.llm,
            "calls_per_step": 1,
            "tools": {"sleep": {"weight": 1, "latency": w.tool}},
        },
        "substrates": [substrate],
        "cluster": {"concurrency": [level]},
    }
    if w.arrival_rate:
        data["arrivals"] = {"kind": "poisson", "rate": w.arrival_rate}
    return scenario_from_dict(data, Path.cwd() / "suite.yaml")


def real_metrics(run: pd.DataFrame, level: int) -> dict[str, float]:
    """One real run at one level (:data:`validate.REAL_COLUMNS`): every :data:`validate.METRICS`."""
    d = _waved(run.reset_index(drop=True), level)
    return {m: float(fn(d)) for m, fn in METRICS.items()}


def measured(res) -> pd.DataFrame:
    """A simulated run's :data:`validate.METRICS` per level, read off its records as off a real
    run's (the same percentile definitions)."""
    work = draw_work(res.scenario, 0)
    rows = []
    for key, rec in res.records.items():
        d = pd.DataFrame(
            {"start": rec.start, "end": rec.end, "cold": rec.cold, "llm": rec.llm, "tool": work.tool}
        )
        rows.append({"concurrency": key.concurrency, **real_metrics(d, key.concurrency)})
    return pd.DataFrame(rows)


# each target metric's summary column (banded by the refits) and its conversion to the metric
BANDED_AS = {
    "infra_per_trajectory": "worker_hours",  # wall time less LLM waits; less the tools' time
    "makespan": "makespan_hours",
    "duration_p50": "duration_p50",
    "duration_p99": "duration_p99",
    "cold_start_p50": "cold_start_p50",
}


def sim_metrics(scn: Scenario, level: int, draws: int) -> dict[str, dict]:
    """The target metrics' simulated point and 90% band at ``level`` (:func:`suite.point_and_band`)."""
    per_draw, refits, source = simulate_band(scn, measured, draws)
    n, tool = scn.trajectories, float(np.mean(draw_work(scn, 0).tool))
    convert = {"infra_per_trajectory": lambda v: v * 3600 / n - tool, "makespan": lambda v: v * 3600}
    return {
        m: point_and_band(per_draw, refits, level, m, col, convert.get(m, float), source)
        for m, col in BANDED_AS.items()
    }


def fit_profile(records: list[dict], name: str, bootstrap: int, seed: int) -> dict:
    """The profile calibrated from ``records`` (with ``bootstrap`` refits where the fit makes
    them, each scaled by the drift the sitting's probe blocks show, :func:`sitting_drift`); the
    fit's warnings are kept in ``profile["warnings"]``."""
    from ..calibration.calibrate import calibrate

    params = inspect.signature(calibrate).parameters
    kw = {"bootstrap": bootstrap, "seed": seed} if "bootstrap" in params else {}
    if "drift" in params:
        kw["drift"] = sitting_drift(records)
    from ..errors import InputError

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = calibrate(records, name, **kw)
        except InputError as exc:  # too thin to bootstrap: the point fit alone, said so
            if not kw.get("bootstrap"):
                raise
            warnings.warn(f"no refits: {exc}", stacklevel=2)
            out = calibrate(records, name, **{**kw, "bootstrap": 0})
    profile = out[0] if isinstance(out, tuple) else out
    if caught:
        profile["warnings"] = [str(w.message) for w in caught]
    return profile


def sitting_drift(records: list[dict]) -> dict | None:
    """How far create, exec and teardown latency moved over the sitting's probe blocks, per level
    (:func:`.drift.sitting_drift`)."""
    from ..calibration import drift

    phases = {p: "latency" for p in ("create", "exec", "teardown")}
    return drift.sitting_drift(records, phases, lambda ph, r: r["concurrency"] if r["phase"] == ph else None)


def create_by_load(ops: pd.DataFrame, records: list[dict]) -> pd.DataFrame:
    """Real creates against the probe's at the same count of creates in flight at their start: per
    band of that count (:data:`validate.LOAD_BINS`), the median create latency of each (``ratio``:
    real over probe). The model reads a create's slowdown from the probe's creates; a ratio far
    from 1 says the rollout's creates are not the probe's at that count."""
    from ..calibration.load_curves import in_flight

    real = ops[ops.phase == "create"]
    recs = real.assign(run_id=real.run).to_dict("records")
    real = real.assign(load=in_flight(recs, "create") if recs else [])
    probe = [r for r in records if r["phase"] == "create" and r["ok"] and not r.get("reference")]
    pl = pd.DataFrame({"load": in_flight(probe, "create"), "latency": [r["latency"] for r in probe]})
    rows = []
    for name, x in (("real", real), ("probe", pl)):
        x = x.assign(band=np.digitize(x.load, LOAD_BINS) - 1)
        for b, g in x.groupby("band"):
            rows.append(
                {"band": int(b), "side": name, "creates": len(g), "median": float(g.latency.median())}
            )
    if not rows:
        return pd.DataFrame(columns=["load", "real_creates", "real", "probe_creates", "probe", "ratio"])
    t = pd.DataFrame(rows).pivot(index="band", columns="side", values=["creates", "median"])
    out = []
    for b in t.index:
        lo = LOAD_BINS[max(b, 0)]
        hi = LOAD_BINS[b + 1] if b + 1 < len(LOAD_BINS) else None
        g = t.loc[b]
        out.append(
            {
                "load": f"{lo:g}" if hi == lo + 1 else f"{lo:g}-{hi - 1:g}" if hi else f"{lo:g}+",
                "real_creates": g.get(("creates", "real")),
                "real": g.get(("median", "real")),
                "probe_creates": g.get(("creates", "probe")),
                "probe": g.get(("median", "probe")),
            }
        )
    out = pd.DataFrame(out)
    return out.assign(ratio=(out.real / out.probe).round(3))


def fitted_cell(records: list[dict], cell: HeldOutCell, plan: SuitePlan, folder: Path, seed: int = 0):
    """The cell's simulated metrics (:func:`sim_metrics`) on the profile fitted from ``records``
    (written to ``folder/profile.yaml``), and that profile (its fit's warnings under
    ``warnings``)."""
    from ..calibration.calibrate import write_profile

    folder.mkdir(parents=True, exist_ok=True)
    profile = fit_profile(records, f"suite-{cell.label}", plan.bootstrap, plan.seed)
    warned = profile.pop("warnings", [])
    write_profile(profile, folder / "profile.yaml")
    scn = cell_scenario(cell.workload, cell.level, {"profile": str(folder / "profile.yaml")}, seed)
    return sim_metrics(scn, cell.level, plan.draws), {**profile, "warnings": warned}


def drifted_point(
    near: list[dict],
    records: list[dict],
    cell: HeldOutCell,
    plan: SuitePlan,
    seed: int = 0,
    cache: dict | None = None,
) -> dict[str, float]:
    """The cell's simulated metrics (no band) at the machine state of the probe records ``near``:
    the point profile fitted from all the cell's ``records`` (kept in ``cache``), each phase
    scaled by how much slower ``near`` ran than all of them (:func:`suite.drift_factors`). Two
    probe blocks alone hold too few creates at one in flight to fit a profile of their own."""
    from ..calibration.bootstrap import with_drift
    from .suite import drift_factors

    cache = {} if cache is None else cache
    key = (cell.label, len(records))
    if key not in cache:
        profile = fit_profile(records, f"suite-{cell.label}", 0, plan.seed)
        cache[key] = profile["substrate"]
    sub = with_drift(cache[key], drift_factors(near, records))
    scn = cell_scenario(cell.workload, cell.level, {"name": "fitted", **sub}, seed)
    return simulated_points(scn, measured, cell.level, plan.draws)


def read_gzipped_records(path: Path) -> list[dict]:
    """Probe records kept compressed (``probes.jsonl.gz``), read and checked as ``probe`` writes
    them (:func:`probe.read_records`)."""
    import gzip
    import tempfile

    from ..calibration.probe import read_records
    from ..errors import InputError

    if not path.is_file():
        raise InputError(f"{path}: not found; expected a cell recorded by 'simrollout validate suite'.")
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / path.stem
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        recs = read_records([plain])
    for r in recs:
        r["_file"] = str(path)
    return recs


def fresh(folder: Path) -> None:
    """``folder`` (a cell's) without an earlier sitting's probe records: a live sitting appends its
    blocks' records to ``probes.jsonl`` and then to ``probes.jsonl.gz``, which must hold them alone."""
    for name in ("probes.jsonl", "probes.jsonl.gz"):
        (folder / name).unlink(missing_ok=True)


def _gzip(path: Path) -> None:
    """``path`` compressed to ``path.gz`` (appended to when there), then removed."""
    import gzip

    if path.exists():
        with gzip.open(path.with_suffix(path.suffix + ".gz"), "ab") as out:
            out.write(path.read_bytes())
        path.unlink()


class DockerTarget:
    """The suite on a sandbox backend (``backend``: a :mod:`.backends` backend); every probe
    record, real run and fitted profile goes under ``folder/<cell>/``."""

    name = "docker"
    targets = TARGETS

    def __init__(
        self,
        backend,
        folder: Path,
        image: str = "simrollout-busybox:local",
        seed: int = 0,
        commands: int = PROBE_COMMANDS,
        think: float = PROBE_THINK,
        low: int = LOW_SANDBOXES,
    ):
        self.backend, self.folder, self.image, self.seed = backend, folder, image, seed
        self.commands, self.think, self.low = commands, think, low  # the probe blocks' plan
        self.ops: dict[str, list] = {}
        self.runs: dict[str, list[pd.DataFrame]] = {}
        self.fits: dict = {}  # point fits of the paired simulations, by cell and records

    def _dir(self, cell: HeldOutCell) -> Path:
        d = self.folder / cell.label.replace("@", "-")
        d.mkdir(parents=True, exist_ok=True)
        return d

    def probe(self, cell: HeldOutCell, block: int) -> list[dict]:
        from ..calibration.probe import ProbePlan, probe, read_records

        out = self._dir(cell) / "probes.jsonl"
        if block == 0:  # a new sitting of the cell: an earlier sitting's records are not its own
            fresh(self._dir(cell))
        start = sum(1 for _ in out.open()) if out.exists() else 0
        half = max(2, cell.level // 2)
        for level, boxes in ((1, self.low), (half, 2 * half), (cell.level, 2 * cell.level)):
            plan = ProbePlan(
                sandboxes=boxes,
                commands=self.commands,
                levels=(level,),
                image=self.image,
                files=False,
                think=self.think,
                pulls=0,
            )
            probe(self.backend, plan, out)
        return read_records([out])[start:]

    def recorded(self, cell: HeldOutCell) -> tuple[list[dict], dict[str, list[float]]]:
        """A recorded cell's probe records and real metrics per repeat (its folder's
        ``probes.jsonl.gz``, ``real.csv`` and ``ops.csv.gz``), kept for :meth:`simulate`."""
        d = self._dir(cell)
        records = read_gzipped_records(d / "probes.jsonl.gz")
        runs = pd.read_csv(d / "real.csv")
        ops = pd.read_csv(d / "ops.csv.gz")
        self.runs[cell.label] = [g for _, g in runs.groupby("run")]
        self.ops[cell.label] = list(ops[OPS_COLUMNS].itertuples(index=False, name=None))
        real: dict[str, list[float]] = {}
        for g in self.runs[cell.label]:
            for m, v in real_metrics(g, cell.level).items():
                real.setdefault(m, []).append(v)
        return records, real

    def real(self, cell: HeldOutCell, repeat: int) -> dict[str, float]:
        scn = cell_scenario(cell.workload, cell.level, CLIENT, self.seed)
        ops = self.ops.setdefault(cell.label, [])
        run = real_rollout(self.backend, scn, self.image, run=repeat, ops=ops)
        self.runs.setdefault(cell.label, []).append(run)
        return real_metrics(run, cell.level)

    def simulate(self, cell: HeldOutCell, records: list[dict], plan: SuitePlan) -> dict[str, dict]:
        d = self._dir(cell)
        out, profile = fitted_cell(records, cell, plan, d, self.seed)
        noted_drift(out, profile.get("uncertainty"))
        warned = profile.get("warnings", [])
        ops = pd.DataFrame(self.ops.get(cell.label, []), columns=OPS_COLUMNS)
        pd.concat(self.runs.get(cell.label, [])).to_csv(d / "real.csv", index=False)
        ops.to_csv(d / "ops.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
        sub = Substrate.model_validate({"name": "fitted", **profile["substrate"]})
        by_load, creates = exec_by_load(ops, sub), create_by_load(ops, records)
        by_load.to_csv(d / "exec_by_load.csv", index=False)
        creates.to_csv(d / "create_by_load.csv", index=False)
        _gzip(d / "probes.jsonl")
        out["_extra"] = {
            "exec_by_load": by_load.to_dict("records"),
            "create_by_load": creates.to_dict("records"),
            "warnings": warned,
        }
        return out

    def point(
        self, cell: HeldOutCell, near: list[dict], records: list[dict], plan: SuitePlan
    ) -> dict[str, float]:
        return drifted_point(near, records, cell, plan, self.seed, self.fits)

    def machine(self) -> dict:
        import os
        import platform

        return {"cpus": os.cpu_count(), "platform": platform.platform(), **self.backend.info()}


def docker_notes(results) -> list[str]:
    """What the per-operation readings show, cell by cell (misses first said): the real execs'
    overhead against the profile's curve at their loads (``exec_by_load``), and the real creates
    against the probe's at the same count of creates in flight (``create_by_load``: the median
    ratio over the bands with both, and at one create in flight)."""
    lines = []
    for res in results:
        missed = [r["metric"] for r in res.rows if r["verdict"] == "miss"]
        ex = res.extra.get("exec_by_load") or []
        e = next((r for r in ex if r["load"] == "all (mean)"), None)
        parts = []
        if e:
            parts.append(
                f"exec overhead, the profile's curve at the real execs' loads {e['profile'] * 1e3:.0f} ms "
                f"against {e['real'] * 1e3:.0f} ms real ({e['diff_pct']:+.0f}%, {e['execs']} execs)"
            )
        cr = [
            r
            for r in res.extra.get("create_by_load") or []
            if r.get("ratio") is not None and r["ratio"] == r["ratio"]
        ]
        if cr:
            ratios = np.array([r["ratio"] for r in cr])
            lone = next((r for r in cr if r["load"] == "1"), None)
            text = f"creates, real over probe at the same creates in flight: median {np.median(ratios):.2f}"
            text += f" (range {ratios.min():.2f}-{ratios.max():.2f})"
            if lone:
                text += f", at one in flight {lone['real']:.2f} s against {lone['probe']:.2f} s"
            parts.append(text)
        head = f"{res.cell.label}" + (f" missed {', '.join(missed)}" if missed else "")
        lines.append(f"- {head}: " + "; ".join(parts) + ".")
    if lines:
        lines[:0] = [
            "What the per-operation readings show (each cell's ops.csv.gz, exec_by_load.csv, "
            "create_by_load.csv):",
            "",
        ]
    return lines
