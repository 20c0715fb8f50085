"""The package's import graph has no cycle: a module never imports, at the top, inside a function
or under ``if TYPE_CHECKING:``, a module that leads back to it; and the stages are in order (docs/
extending.md): no module of a stage imports, anywhere in it, a module of a later stage."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = "simrollout"


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for p in sorted((root / PKG).rglob("*.py")):
        parts = list(p.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _targets(mod: str, path: Path, node: ast.Import | ast.ImportFrom, mods: dict) -> list[str]:
    """The package modules ``node`` (in ``mod``) imports."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        prefix = node.module or ""
        if node.level:
            base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            prefix = ".".join(base + ([node.module] if node.module else []))
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in mods else prefix for a in node.names]
    out = []
    for n in names:
        while n and n not in mods:
            n = n.rpartition(".")[0]
        if n.startswith(PKG + ".") and n != mod and not mod.startswith(n + "."):
            out.append(n)  # a package's own __init__ above ``mod`` runs first anyway: not an edge
    return out


def import_graph(root: Path = ROOT, typing: bool = True) -> dict[str, set[str]]:
    """Module -> the package modules it imports; ``typing=False`` leaves out type-only imports."""
    mods = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        typing_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for stmt in block.body
            for n in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and (typing or id(node) not in typing_only):
                graph[mod].update(_targets(mod, path, node, mods))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """The package's import graph, read once."""
    return import_graph()


def test_the_package_has_no_import_cycle(graph):
    assert len(graph) > 100 and sum(map(len, graph.values())) > 300  # the graph was read
    found = cycles(graph)
    detail = [[f"{a} -> {b}" for a in c for b in sorted(graph[a] & set(c))] for c in found]
    assert not found, f"import cycles: {detail}"


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / PKG
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .a import x\n")
    (pkg / "sub" / "a.py").write_text("from ..b import y\nx = 1\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import z\n"
        "def y():\n    from .sub.a import x\n    return x\n"
    )
    (pkg / "c.py").write_text("from .b import y\nz = 2\n")
    graph = import_graph(tmp_path, typing=False)
    assert graph[f"{PKG}.b"] == {f"{PKG}.sub.a"}  # without type-only imports
    assert cycles(graph) == [[f"{PKG}.b", f"{PKG}.sub.a"]]
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import z\n")
    assert cycles(import_graph(tmp_path, typing=False)) == []
    assert cycles(import_graph(tmp_path)) == [[f"{PKG}.b", f"{PKG}.c"]]  # a type-only cycle is one too


# the pipeline's stages, in order (docs/extending.md); the package's own modules below them all, and
# its front doors (the package, its Python API and the CLI) above them all
STAGES = (
    ("errors", "rng", "redact", "outputs", "numba_cache"),
    ("distributions",),
    ("scenario", "traces"),
    ("calibration",),
    ("sim",),
    ("run",),
    ("whatif",),
    ("validation",),
    ("", "api", "cli"),
)


def stage_of(mod: str) -> int | None:
    """The index in :data:`STAGES` of ``mod``'s stage (its first name below the package)."""
    top = mod.split(".")[1] if "." in mod else ""
    return next((i for i, names in enumerate(STAGES) if top in names), None)


def climbs(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module of a later stage than the importer's."""
    return sorted(f"{a} -> {b}" for a, ts in graph.items() for b in ts if stage_of(b) > stage_of(a))


def test_every_module_has_a_stage(graph):
    assert [m for m in graph if stage_of(m) is None] == []


@pytest.mark.parametrize("stage", [n for names in STAGES for n in names if n])
def test_no_stage_imports_a_later_one(stage: str, graph):
    mine = {m: ts for m, ts in graph.items() if m == f"{PKG}.{stage}" or m.startswith(f"{PKG}.{stage}.")}
    assert mine  # the stage was read
    bad = climbs(mine)
    assert not bad, f"imports of a later stage: {bad}"


def test_a_climb_inside_a_function_is_found(tmp_path):
    pkg = tmp_path / PKG
    (pkg / "sim").mkdir(parents=True)
    (pkg / "validation").mkdir()
    for init in (pkg, pkg / "sim", pkg / "validation"):
        (init / "__init__.py").write_text("")
    (pkg / "validation" / "verdicts.py").write_text("from ..sim.model import m\nv = 1\n")
    (pkg / "sim" / "model.py").write_text("m = 1\n")
    (pkg / "sim" / "draws.py").write_text("def f():\n    from ..validation.verdicts import v\n    return v\n")
    graph = import_graph(tmp_path)
    assert climbs(graph) == [f"{PKG}.sim.draws -> {PKG}.validation.verdicts"]
    (pkg / "sim" / "draws.py").write_text("from .model import m\n")
    assert climbs(import_graph(tmp_path)) == []


def test_a_plain_run_loads_no_validation_module():
    """The runner, imported alone, brings in neither the validation suites nor the fidelity matrix."""
    code = "import sys, simrollout.run.runner; print(sorted(m for m in sys.modules if '.validation' in m))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
