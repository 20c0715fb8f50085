"""A sweep's table (the swept variables, then the headline, training and serving columns its rows
have) and its report.html."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..sim.route import fidelity_choice
from . import html_report
from .report import SERVING, TABLE, TRAINING
from .screen import Column

SPECS = {key: (head, fmt) for key, head, fmt in (*TABLE, *TRAINING, *SERVING)}
SPECS["duration_p99"] = ("dur p99 s", "{:,.1f}")
SPECS["duration_p50"] = ("dur p50 s", "{:,.1f}")

# after the swept variables, substrate and concurrency: what a sweep's table shows, when its rows
# have it (training columns with a training section, serving columns with serving engines)
SHOWN = [
    "training_steps_per_day",
    "staleness_max",
    "trajectories_per_hour",
    "makespan_hours",
    "duration_p99",
    "worker_hours",
    "cost_usd",
    "gpu_hours",
    "kv_queued_fraction",
    "prefix_hit_rate",
    "reprefill_gpu_hours",
    "llm_request_p50",
    "duration_p50",
]
SERVING_KEYS = {key for key, _, _ in SERVING}


def _value_format(values: pd.Series) -> str:
    if values.dtype.kind in "iu":
        return "{:,d}"
    return "{:,.2f}" if values.dtype.kind == "f" else "{}"


def sweep_columns(df: pd.DataFrame, swept: list[str]) -> tuple[list[Column], int]:
    """The sweep table's columns and how many of them name a row (the swept variables, substrate,
    concurrency; a variable headed by its field's name). Serving columns only where the rows have
    serving figures."""
    paths = [p for p in swept if p != "cluster.concurrency"]
    last = [p.rsplit(".", 1)[-1] for p in paths]  # the field's own name, unless two paths share it
    keys = [(p, n if last.count(n) == 1 else p, _value_format(df[p])) for p, n in zip(paths, last)]
    keys += [("substrate", "substrate", "{}"), ("concurrency", "conc.", "{:,d}")]
    cols = []
    for key in SHOWN:
        if key not in df or df[key].isna().all():
            continue
        if key in SERVING_KEYS and df[key].fillna(0).eq(0).all():
            continue  # no serving engines: the column is empty
        cols.append((key, *SPECS[key]))
    if "kv_queued_fraction" not in {c[0] for c in cols}:  # no serving engines: only a run's columns
        cols = [c for c in cols if c[0] not in ("gpu_hours", "duration_p50")]
    return keys + cols, len(keys)


def sweep_report(df: pd.DataFrame, swept: dict[str, list], scn, images: list[Path]) -> html_report.Report:
    """The sweep's report.html: the grid, the inputs, the table of every row and the plots."""
    columns, keys = sweep_columns(df, list(swept))
    sets = " ".join(f"--set {p}={','.join(map(str, v))}" for p, v in swept.items())
    facts = [
        ("command", f"simrollout sweep {scn._source} {sets}"),
        ("grid", f"{len(df):,} rows: " + "; ".join(f"{p} = {', '.join(map(str, v))}"
                                                    for p, v in swept.items())),
        ("fidelity", "{} ({}) for the scenario as given; each row's may differ"
         .format(*fidelity_choice(scn))),
        *html_report.input_facts(scn),
    ]  # fmt: skip
    section = html_report.Section("every row of the sweep", columns, df, bands_note(df), keys)
    return html_report.Report(f"simrollout sweep: {scn.name}", facts, [section], [], images)


def bands_note(df: pd.DataFrame) -> str:
    """Where a sweep's bands come from (``--uncertainty``), else nothing."""
    if "band" not in df:
        return ""
    where = "; ".join(f"{k}: {v}" for k, v in dict(zip(df.substrate, df.band)).items())
    return f"bands [90%: the profiles' refits and the model's error, in quadrature]: {where}"
