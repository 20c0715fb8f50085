"""Tables that fit the screen: the columns of a table in the order given (most important first),
split into as many tables as the width needs, each repeating the row's key columns (substrate,
concurrency, a sweep's variables), never a cell cut short.

A column is ``(key, header, format)``; a banded cell (``run --uncertainty``: ``key_lo``/``key_hi``
in the row) shows its band on a second line. Piped output is as wide as ``COLUMNS`` says, else
:data:`PIPED_WIDTH` characters.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

PIPED_WIDTH = 120
Column = tuple[str, str, str]


def screen_console(file=None) -> Console:
    """A console on ``file`` (stdout): the terminal's width, or piped, ``COLUMNS`` else 120."""
    file = file or sys.stdout
    width = None
    if not (hasattr(file, "isatty") and file.isatty()):
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH
    return Console(file=file, width=width, highlight=False)


def value_text(v, fmt: str) -> str:
    """``v`` formatted by ``fmt`` (``-`` for a missing value)."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    if "d}" in fmt:
        v = int(v)
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def cell_text(row, key: str, fmt: str) -> str:
    """A cell: the value, and on a second line its band ``[lo-hi]`` when the row has one."""
    text = value_text(row.get(key), fmt)
    lo, hi = row.get(f"{key}_lo"), row.get(f"{key}_hi")
    try:
        banded = lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi)
    except TypeError:
        banded = False
    if banded:
        text += f"\n[{value_text(lo, fmt)}-{value_text(hi, fmt)}]"
    return text


def _width(head: str, cells: Sequence[str]) -> int:
    return max(len(line) for text in (head, *cells) for line in text.split("\n"))


def split_columns(widths: Sequence[int], keys: int, width: int) -> list[list[int]]:
    """Column indices per table: the first ``keys`` columns in every table, then the others in
    order while the table fits ``width`` (a rich table takes 3 characters per column and 1 more)."""
    key_cols = list(range(keys))
    base = sum(widths[i] + 3 for i in key_cols) + 1
    groups: list[list[int]] = []
    current: list[int] = []
    used = base
    for i in range(keys, len(widths)):
        need = widths[i] + 3
        if current and used + need > width:
            groups.append(current)
            current, used = [], base
        current.append(i)
        used += need
    if current or not groups:
        groups.append(current)
    return [key_cols + g for g in groups]


def fitted_tables(columns: Sequence[Column], rows: pd.DataFrame, width: int, keys: int = 2) -> list[Table]:
    """``rows`` as tables of ``columns`` no wider than ``width`` (the first ``keys`` columns
    repeated in each); every cell whole."""
    cells = [[cell_text(row, key, fmt) for key, _, fmt in columns] for _, row in rows.iterrows()]
    widths = [_width(head, [r[i] for r in cells]) for i, (_, head, _) in enumerate(columns)]
    keys = min(keys, len(columns))
    tables = []
    for group in split_columns(widths, keys, width):
        t = Table(show_edge=True)
        for i in group:
            head = columns[i][1]
            t.add_column(head, justify="left" if columns[i][2] == "{}" else "right",
                         no_wrap=True, min_width=widths[i])  # fmt: skip
        for r in cells:
            t.add_row(*(Text(r[i]) for i in group))
        tables.append(t)
    return tables


def print_fitted(
    console: Console, title: str | None, columns: Sequence[Column], rows: pd.DataFrame, keys: int = 2
) -> None:
    """The title (wrapped to the screen), then ``rows`` as tables that fit the console."""
    if title:
        console.print(Text(title, style="bold"))
    for table in fitted_tables(columns, rows, console.width, keys):
        console.print(table)


def frame_columns(df: pd.DataFrame, digits: int = 1) -> list[Column]:
    """Columns for every column of ``df``: integers with thousands separators, floats with
    ``digits`` decimals, anything else as it is."""
    out = []
    for c in df.columns:
        if c.endswith(("_lo", "_hi")) and c[:-3] in df:
            continue
        kind = df[c].dtype.kind
        fmt = "{:,d}" if kind in "iu" else f"{{:,.{digits}f}}" if kind == "f" else "{}"
        out.append((c, c, fmt))
    return out
