"""``report.html``: one self-contained page to send to a colleague, with a results folder's
tables (bands included), its plots (PNG inline as data URIs), what ran, at which fidelity and why,
and where the inputs came from (the scenario file, the profiles with their provenance, the seed,
the version)."""

from __future__ import annotations

import base64
import html
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .. import __version__
from ..errors import InputError, load_yaml
from .screen import Column, cell_text

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.85em; }
th { background: #2b5797; color: #fff; padding: 4px 8px; text-align: right; white-space: nowrap; }
td { padding: 3px 8px; text-align: right; border-bottom: 1px solid #ddd; white-space: nowrap; }
tr:nth-child(even) td { background: #eef3fa; }
td.key, th.key { text-align: left; }
.band { color: #666; font-size: 0.9em; }
.note { color: #555; font-size: 0.85em; max-width: 100em; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; font-size: 0.9em; }
dt { font-weight: 600; } dd { margin: 0; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #555; }
"""


@dataclass
class Section:
    """A table of ``rows`` by ``columns`` (the first ``keys`` are the rows' names) with a note."""

    heading: str
    columns: Sequence[Column]
    rows: pd.DataFrame
    note: str = ""
    keys: int = 2


@dataclass
class Report:
    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)  # what ran, and the inputs
    sections: list[Section] = field(default_factory=list)
    text: list[str] = field(default_factory=list)  # paragraphs after the tables
    images: list[Path] = field(default_factory=list)


def _table(sec: Section) -> str:
    head = "".join(f'<th class="{"key" if i < sec.keys else ""}">{html.escape(h)}</th>'
                   for i, (_, h, _) in enumerate(sec.columns))  # fmt: skip
    body = []
    for _, row in sec.rows.iterrows():
        cells = []
        for i, (key, _, fmt) in enumerate(sec.columns):
            value, *band = cell_text(row, key, fmt).split("\n")
            inner = html.escape(value) + "".join(
                f'<br><span class="band">{html.escape(b)}</span>' for b in band
            )
            cells.append(f'<td class="{"key" if i < sec.keys else ""}">{inner}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    return f'<div class="scroll">{table}</div>'


def _image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    name = html.escape(path.name)
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{name}">'
            f"<figcaption>{name}</figcaption></figure>")  # fmt: skip


def render(report: Report) -> str:
    """The page as HTML text."""
    facts = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in report.facts)
    parts = [f"<h1>{html.escape(report.title)}</h1>", f"<h2>What ran</h2><dl>{facts}</dl>"]
    for sec in report.sections:
        parts.append(f"<h2>{html.escape(sec.heading)}</h2>{_table(sec)}")
        if sec.note:
            parts.append(f'<p class="note">{html.escape(sec.note)}</p>')
    parts += [f'<p class="note">{html.escape(t)}</p>' for t in report.text]
    if report.images:
        parts.append("<h2>Plots</h2>" + "".join(_image(p) for p in report.images))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(report.title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


def write(report: Report, path: Path) -> Path:
    path.write_text(render(report), encoding="utf-8")
    return path


def input_facts(scn, seed: int | None = None) -> list[tuple[str, str]]:
    """The scenario file, each profile it uses with its provenance, the seed and the version."""
    facts = [("scenario file", str(scn._source)), ("seed", str(scn.seed if seed is None else seed))]
    base = Path(str(scn._source)).parent
    refs = [(f"substrate {s.name}", s.profile) for s in scn.substrates if s.profile]
    engine_ref = getattr(scn.cluster.inference, "profile", None)
    if engine_ref:
        refs.append(("inference engine", engine_ref))
    for who, ref in refs:
        facts.append((f"{who}: profile", f"{ref}; {_provenance(base, ref)}"))
    facts += [("simrollout", __version__), ("python", platform.python_version())]
    return facts


def _provenance(base: Path, ref: str) -> str:
    """A profile's ``provenance`` section in one line, or why it cannot be read."""
    path = next((p for p in (base / ref, Path(ref)) if p.is_file()), None)
    if path is None:
        return "file not found"
    try:
        data, _ = load_yaml(path)
    except InputError:
        return "unreadable"
    prov = data.get("provenance") if isinstance(data, dict) else None
    if not isinstance(prov, dict):
        return "no provenance section"
    return "; ".join(f"{k}: {' '.join(str(v).split()) if not isinstance(v, dict) else _flat(v)}"
                     for k, v in prov.items())  # fmt: skip


def _flat(d: dict) -> str:
    return ", ".join(f"{k}: {' '.join(str(v).split())}" for k, v in d.items())
