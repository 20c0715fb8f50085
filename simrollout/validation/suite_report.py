"""A validation suite written down: ``suite.json`` (per target: the commit, a hash of the model
and fitting code, the machine, the date and every cell's figures), ``REPORT.md`` (one table per
target, regenerated from ``suite.json`` whole) and a row appended to ``history.csv``."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import subprocess
from pathlib import Path

import pandas as pd

from . import model_error
from .suite_stats import overall, summarize

ROOT = Path(__file__).resolve().parents[2]
# the model and the fitting code: a change to any of them changes the hash
CODE = (
    "simrollout/sim",
    "simrollout/scenario",
    "simrollout/distributions",
    "simrollout/whatif/uncertainty.py",
    "simrollout/calibration/load_curves.py",
    "simrollout/calibration/fit.py",
    "simrollout/calibration/calibrate.py",
    "simrollout/calibration/engine_fit.py",
)
HISTORY_COLUMNS = ["date", "target", "record", "workload", "levels", "key_errors", "verdict"]
TITLES = {
    "docker": "Docker (local engine)",
    "engine": "llama.cpp engine (agent loop)",
    "synthetic": "synthetic substrate",
}


def code_hash(root: Path = ROOT) -> str:
    """SHA-256 (first 16 hex digits) over the model's and the fit's source files."""
    h = hashlib.sha256()
    for entry in CODE:
        p = root / entry
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p] if p.is_file() else []:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def commit(root: Path = ROOT) -> str:
    """The checkout's commit, ``+dirty`` when the model or fitting code has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", *CODE], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def suite_entry(
    target: str,
    rows: pd.DataFrame,
    command: str,
    machine: dict,
    plan: dict,
    workloads: list[dict],
    schedule: dict,
    diagnostics: dict,
) -> dict:
    """One target's suite as ``suite.json`` keeps it."""
    return {
        "target": target,
        "command": command,
        "commit": commit(),
        "code_hash": code_hash(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine,
        "plan": plan,
        "workloads": workloads,
        "overall": overall(rows),
        "summary": summarize(rows).to_dict("records"),
        "cells": rows.to_dict("records"),
        "schedule": schedule,
        "diagnostics": diagnostics,
    }


def _clean(x):
    """JSON without NaN (null instead) and without numpy scalars."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def read_suite(path: Path) -> dict:
    """``suite.json``: ``{"targets": {name: entry}}`` (empty when the file is not there)."""
    if not path.is_file():
        return {"targets": {}}
    from ..errors import InputError

    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}: not valid JSON ({exc.msg}); expected a suite written by 'simrollout validate suite'."
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("targets"), dict):
        raise InputError(
            f"{path}: expected a mapping with 'targets' (written by 'simrollout validate suite')."
        )
    return data


def history_row(entry: dict) -> dict:
    """The history's row of a suite: per metric its MAPE, and the cells per verdict."""
    s = pd.DataFrame(entry["summary"])
    o = entry["overall"]
    cells = pd.DataFrame(entry["cells"])
    levels = sorted({int(v) for v in cells.level})
    errors = "; ".join(f"{r.metric} MAPE {r.mape_pct:.1f}%" for r in s.itertuples())
    return {
        "date": entry["date"][:10],
        "target": entry["target"],
        "record": "suite.json",
        "workload": "+".join(dict.fromkeys(cells.workload)),
        "levels": " ".join(map(str, levels)),
        "key_errors": errors,
        "verdict": f"{o['pass']} pass / {o['miss']} miss / {o['indeterminate']} indeterminate "
        f"(cell-metrics); band coverage {coverage(o)}",
    }


def coverage(o: dict) -> str:
    """A suite's (or metric's) band coverage, and with the real mean's noise where recorded."""
    text, noisy = _share(o.get("coverage"), "n/a"), o.get("coverage_with_noise")
    if noisy is not None and noisy == noisy:
        text += f" ({noisy:.0%} with the real mean's noise)"
    return text


def _share(x: float | None, missing: str = "-") -> str:
    """A share in %, ``missing`` for none or nan."""
    return missing if x is None or x != x else f"{x:.0%}"


def write(folder: Path, entry: dict) -> None:
    """``entry`` into ``folder/suite.json`` (replacing its target's), ``REPORT.md`` regenerated
    from every target there, and its row appended to ``history.csv`` (unless it repeats the last
    row: a refit that changed nothing)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = read_suite(folder / "suite.json")
    data["targets"][entry["target"]] = _clean(entry)
    (folder / "suite.json").write_text(json.dumps(data, indent=1) + "\n")
    residuals = model_error.first_seen(folder / "residuals.csv", data["targets"][entry["target"]])
    (folder / "REPORT.md").write_text(report(data, residuals))
    hist = folder / "history.csv"
    row = pd.DataFrame([history_row(data["targets"][entry["target"]])], columns=HISTORY_COLUMNS)
    if hist.is_file():
        last = pd.read_csv(hist, dtype=str, keep_default_na=False).tail(1)
        if len(last) and last.iloc[0].tolist() == row.astype(str).iloc[0].tolist():
            return
    row.to_csv(hist, mode="a", header=not hist.is_file(), index=False)


def _f(x, digits: int = 3) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{x:+.1f}%"


def _short(command: str) -> str:
    """The command with a long ``--request-extra`` JSON (llama.cpp's logit bias) shown as
    ``"$EXTRA"`` (validation/README.md says how it is made)."""
    import re

    return re.sub(r"--request-extra (\S{80,}|'[^']{80,}')", '--request-extra "$EXTRA"', command)


def _paired(row: dict) -> str:
    """The paired errors' mean ± 95% half-width (pairs), or ``-`` when fewer than 3 pairs stand
    (the real mean's own interval decides the verdict then)."""
    n = row.get("pairs") or 0
    if n < 3:
        return f"- ({n})"
    return f"{_pct(row['paired_error_pct'])} ± {row['paired_half_pct']:.1f} ({n})"


VERDICT_RULE = (
    "A verdict is *indeterminate* when the error is not known to within the target: the 95% "
    "half-width of the paired errors (each real repeat against the cell simulated from the two probe "
    "blocks run right before and after it, so a drift of the machine that moves both cancels; with 3 "
    "pairs or more) or else of the real mean is above the target. Otherwise *pass* when the "
    "simulated point (fitted from every probe block) is within the target of the real mean, else "
    "**miss**. Band coverage: the share of cells whose 90% band (the probe's input uncertainty and "
    "the sitting's drift; not the model's own error) holds the real mean; with the real mean's noise, "
    "once the band is widened in quadrature by the 90% range of a mean of that many repeats (the "
    "real mean is itself an estimate)."
)


def table(entry: dict) -> list[str]:
    """One target's tables: the summary per metric, then every cell and metric."""
    o = entry["overall"]
    ran = entry.get("real_runs")
    refit = (
        f" Real runs {ran['date']} (commit `{ran['commit'][:12]}`); the simulated side fitted again from "
        "the recorded blocks (`--refit`)."
        if ran
        else ""
    )
    lines = [
        f"Regenerate: `{_short(entry['command'])}`{refit}",
        "",
        f"{entry['date']}, commit `{entry['commit'][:12]}`, model and fit code `{entry['code_hash']}`; "
        f"{o['cells']} cells; band coverage {coverage(o)}; cell-metrics: "
        f"{o['pass']} pass, {o['miss']} miss, {o['indeterminate']} indeterminate.",
        "",
        VERDICT_RULE,
        "",
        "| metric | target | MAPE | band coverage | with the real mean's noise | pass | miss "
        "| indeterminate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in entry["summary"]:
        ok = "" if s["mape_pct"] <= s["target_pct"] else " **(missed)**"
        lines.append(
            f"| {s['metric']} | {s['target_pct']:g}% | {s['mape_pct']:.1f}%{ok} | "
            f"{_share(s['coverage'])} | {_share(s.get('coverage_with_noise'))} | "
            f"{s['pass']} | {s['miss']} | {s['indeterminate']} |"
        )
    lines += [
        "",
        "| workload | in flight | metric | real mean ± 95% CI (repeats) | simulated [90% band] | error "
        "| paired error ± 95% CI (pairs) | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in entry["cells"]:
        mark = {"miss": "**miss**", "indeterminate": "*indeterminate*"}.get(r["verdict"], r["verdict"])
        lines.append(
            f"| {r['workload']} | {r['level']} | {r['metric']} | "
            f"{_f(r['real_mean'])} ± {_f(r['real_half'], 2)} "
            f"({r['repeats']}) | {_f(r['simulated'])} [{_f(r['sim_lo'])}, {_f(r['sim_hi'])}] | "
            f"{_pct(r['error_pct'])} | {_paired(r)} | {mark} |"
        )
    sources = sorted({r.get("band_source", "") for r in entry["cells"]} - {""})
    if sources:
        lines += ["", f"Band: {'; '.join(sources)}."]
    for w in entry["workloads"]:
        lines.append(f"- `{w['name']}`: {w['description']}")
    lines += ["", *entry.get("diagnostics", {}).get("notes", [])]
    return lines


def report(data: dict, residuals: pd.DataFrame | None = None) -> str:
    """REPORT.md: the suite of every target in ``data`` (``read_suite``), and the held-out coverage
    of the bands with the model's error over ``residuals`` (:mod:`.model_error`)."""
    out = [
        "# Validation report",
        "",
        "Generated by `simrollout validate suite`; do not edit by hand (validation/README.md says how "
        "to read it). Errors are simulated minus real, in % of the real mean.",
        "",
    ]
    for name in ("docker", "engine", *sorted(set(data["targets"]) - {"docker", "engine"})):
        if name in data["targets"]:
            out += [f"## {TITLES.get(name, name)}", "", *table(data["targets"][name]), ""]
    if residuals is not None and len(residuals):
        out += [*model_error.report_lines(residuals), ""]
    return "\n".join(out).rstrip() + "\n"
