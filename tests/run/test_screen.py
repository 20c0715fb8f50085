"""Tables fitted to the screen: split into tables no wider than the console, the key columns in
each, every cell whole, bands on a second line, and piped output as wide as COLUMNS says."""

import io
import re

import numpy as np
import pandas as pd
from rich.console import Console

from simrollout.run.report import TABLE
from simrollout.run.screen import (
    PIPED_WIDTH,
    cell_text,
    fitted_tables,
    frame_columns,
    print_fitted,
    screen_console,
    split_columns,
)

ROWS = pd.DataFrame(
    {
        "substrate": ["docker", "kubernetes"],
        "concurrency": [4096, 16384],
        "worker_hours": [45_959.91, 72_858.47],
        "cost_usd": [169_355.1, 128_318.2],
        "makespan_hours": [161.94, 118.53],
        "trajectories_per_hour": [6_172.0, 8_437.0],
        "completed": [999_609, 800_665],
        "timeouts": [391, 199_335],
        "failed": [0, 0],
        "sandbox_hours": [91_000.2, 95_000.9],
        "gpu_hours": [82_900.1, 60_681.4],
        "gpu_idle_fraction": [0.12, 0.31],
        "completed_duration_p50": [1_458.3, 1_502.2],
        "completed_duration_p99": [6_400.0, 7_199.9],
        "cold_start_p50": [0.154, 2.1],
        "cold_start_p99": [0.604, 31.2],
        "sandbox_cost_usd": [0.0, 2_000.0],
        "gpu_cost_usd": [169_355.1, 126_318.2],
    }
)
COLUMNS = [c for c in TABLE if c[0] in ROWS]


def render(width: int, rows: pd.DataFrame = ROWS, columns=COLUMNS) -> str:
    buf = io.StringIO()
    print_fitted(Console(file=buf, width=width), "a long title " * 20, columns, rows)
    return buf.getvalue()


def parse(text: str) -> list[dict[str, str]]:
    """Every row of every table in ``text`` as {header: cell} (a banded cell's two lines joined)."""
    out, heads = [], None
    for line in text.splitlines():
        if line.startswith("┃"):
            heads = [h.strip() for h in line.strip("┃").split("┃")]
        elif line.startswith("│") and heads:
            cells = [c.strip() for c in line.strip("│").split("│")]
            if cells[0]:
                out.append(dict(zip(heads, cells)))
            else:  # a band's line under its value
                for h, c in zip(heads, cells):
                    if c:
                        out[-1][h] += " " + c
    return out


def merged(cells: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """The cells of each substrate's row across the tables it was split into."""
    out: dict[str, dict[str, str]] = {}
    for c in cells:
        out.setdefault(c["substrate"], {}).update(c)
    return out


def test_split_keeps_the_keys_and_fits_each_table():
    widths = [10, 5, 30, 30, 30, 8]
    groups = split_columns(widths, 2, 80)
    assert all(g[:2] == [0, 1] for g in groups)
    assert [i for g in groups for i in g[2:]] == [2, 3, 4, 5]  # every column once, in order
    assert all(sum(widths[i] + 3 for i in g) + 1 <= 80 for g in groups)
    assert split_columns(widths, 2, 1000) == [[0, 1, 2, 3, 4, 5]]


def test_every_line_fits_and_every_number_is_whole():
    for width in (120, 80, 60):
        text = render(width)
        assert max(map(len, text.splitlines())) <= width, width
        assert "…" not in text
        cells = parse(text)
        heads = {h for c in cells for h in c}
        assert heads == {head for _, head, _ in COLUMNS}  # no empty or cut header
        for _, row in ROWS.iterrows():
            mine = merged(cells)[row.substrate]
            for key, head, fmt in COLUMNS:
                got = mine[head]
                assert got == cell_text(row, key, fmt)
                if key != "substrate":  # parsed back, the number is the summary's to its digits
                    value = float(got.replace(",", "").rstrip("%")) / (100 if got.endswith("%") else 1)
                    assert abs(value - row[key]) <= 0.5 * 10 ** -_decimals(fmt) + 1e-12, (key, got)


def _decimals(fmt: str) -> int:
    m = re.search(r"\.(\d)[f%]", fmt)
    digits = int(m.group(1)) if m else 0
    return digits + (2 if "%" in fmt else 0)


def test_a_band_sits_under_its_value_whole():
    rows = ROWS.assign(worker_hours_lo=ROWS.worker_hours * 0.74, worker_hours_hi=ROWS.worker_hours * 1.35)
    assert cell_text(rows.iloc[0], "worker_hours", "{:,.1f}") == "45,959.9\n[34,010.3-62,045.9]"
    text = render(80, rows)
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text
    got = {s: c["worker-h"] for s, c in merged(parse(text)).items()}
    assert got == {"docker": "45,959.9 [34,010.3-62,045.9]", "kubernetes": "72,858.5 [53,915.3-98,358.9]"}
    nan_band = rows.assign(worker_hours_lo=np.nan)
    assert cell_text(nan_band.iloc[0], "worker_hours", "{:,.1f}") == "45,959.9"


def test_piped_width_is_columns_or_120(monkeypatch):
    monkeypatch.setenv("COLUMNS", "97")
    assert screen_console(io.StringIO()).width == 97
    monkeypatch.delenv("COLUMNS")
    assert screen_console(io.StringIO()).width == PIPED_WIDTH == 120
    monkeypatch.setenv("COLUMNS", "wide")
    assert screen_console(io.StringIO()).width == 120


def test_a_frame_gets_a_format_per_kind():
    df = pd.DataFrame({"substrate": ["a"], "hosts": [64], "cost_usd": [1234.5], "cost_usd_lo": [1.0],
                       "cost_usd_hi": [2.0], "binding": ["quota"]})  # fmt: skip
    assert frame_columns(df, 2) == [("substrate", "substrate", "{}"), ("hosts", "hosts", "{:,d}"),
                                    ("cost_usd", "cost_usd", "{:,.2f}"), ("binding", "binding", "{}")]  # fmt: skip
    (table,) = fitted_tables(frame_columns(df, 2), df, 200)
    buf = io.StringIO()
    Console(file=buf, width=200).print(table)
    assert "1,234.50" in buf.getvalue() and "[1.00-2.00]" in buf.getvalue()
