"""The documentation points at what exists: every relative link resolves (file and anchor), and
the README's layout names every module of the package, each where it lives, and nothing else."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import shipped_files

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCS += [ROOT / d / "README.md" for d in ("calibration", "validation")]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
DESCRIPTION_COLUMN = 28  # in the layout block, names left of this column are entries


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(md: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def links(md: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("md", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(md: Path):
    found = links(md)
    bad = []
    for target in found:
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading '{anchor}' in {dest.name}")
    assert not bad, f"{md.name}: {bad}"


def test_the_link_checker_catches_a_missing_file_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n## What-if: sweeps and plans\n")
    md = tmp_path / "b.md"
    md.write_text("[x](a.md#what-if-sweeps-and-plans) [y](a.md#nothing) [z](c.md) [w](https://x.org)\n")
    assert links(md) == ["a.md#what-if-sweeps-and-plans", "a.md#nothing", "c.md"]
    assert "what-if-sweeps-and-plans" in anchors(tmp_path / "a.md")
    assert "nothing" not in anchors(tmp_path / "a.md")


def layout_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1]
    return section.split("```\n", 2)[1].splitlines()


def layout_modules(lines: list[str]) -> set[str]:
    """The package modules the layout names, as paths (``simrollout/sim/model.py``)."""
    stack: list[tuple[int, str]] = []  # (indent, directory)
    context = ""
    named = set()
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if indent < DESCRIPTION_COLUMN:  # an entry: a directory or modules, at its depth
            while stack and stack[-1][0] >= indent:
                stack.pop()
            first = line.split()[0]
            parent = "/".join(d for _, d in stack)
            if first.endswith("/"):
                stack.append((indent, first.rstrip("/")))
                context = "/".join(d for _, d in stack)
            else:
                context = parent
        named |= {f"{context}/{m}" for m in re.findall(r"\b(\w+\.py)\b", line)}
    return {n for n in named if n.startswith("simrollout/")}


def test_the_layout_names_every_module_where_it_lives():
    named = layout_modules(layout_block())
    actual = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "simrollout").rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    assert len(actual) > 100
    assert not actual - named, f"modules the layout leaves out: {sorted(actual - named)}"
    assert not named - actual, f"the layout names modules that do not exist: {sorted(named - actual)}"


def test_the_layout_parser_places_names_in_their_directory():
    lines = [
        "pkg/                       the package",
        "  sim/                     the model: a.py,",
        "                           b.py",
        "    c.py, d.py             parts",
        "  top.py                   a module",
    ]
    got = layout_modules([ln.replace("pkg/", "simrollout/") for ln in lines])
    assert got == {f"simrollout/{m}" for m in ("sim/a.py", "sim/b.py", "sim/c.py", "sim/d.py", "top.py")}


def test_the_layout_names_every_shipped_scenario():
    block = "\n".join(layout_block())
    shipped = shipped_files("scenarios", "*.yaml")
    assert shipped and shipped <= set(re.findall(r"\b[\w]+\.yaml\b", block))


IMPORT = re.compile(r"^[ \t]*(from simrollout[\w.]* import [^\n(\\]+|import simrollout[\w.]*)", re.M)


def import_lines(path: Path) -> list[str]:
    """The one-line simrollout imports a notebook's code cells or a document's text show a user."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    else:
        text = path.read_text()
    return [m.strip() for m in IMPORT.findall(text)]


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS + DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_import_a_notebook_or_document_shows_resolves(path: Path):
    bad = []
    for line in import_lines(path):
        try:
            exec(line, {})
        except ImportError as e:
            bad.append(f"{line}: {e}")
    assert not bad, f"{path.relative_to(ROOT)}: " + "; ".join(bad)


def test_the_import_checker_finds_imports_in_code_cells(tmp_path):
    nb = tmp_path / "x.ipynb"
    cell = {"cell_type": "code", "source": ["import os\n", "from simrollout.nowhere import x\n"]}
    nb.write_text(
        json.dumps({"cells": [cell, {"cell_type": "markdown", "source": ["import simrollout.md"]}]})
    )
    assert import_lines(nb) == ["from simrollout.nowhere import x"]
    assert NOTEBOOKS, "the shipped notebooks are found"
