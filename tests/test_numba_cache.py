"""numba's cache lives in the user's cache folder, never beside the installed source, and a run
that has to compile says so first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        cwd=ROOT,
    )


WHERE = (
    "import simrollout, numba, os; from simrollout.sim import compiled_loop as L; "
    "print(os.environ['NUMBA_CACHE_DIR']); print(numba.config.CACHE_DIR); print(L.run._cache._cache_path)"
)


def test_the_cache_goes_to_the_users_cache_folder(tmp_path):
    out = _python(WHERE, XDG_CACHE_HOME=str(tmp_path), HOME=str(tmp_path / "home"))
    env_dir, config_dir, loop_dir = out.stdout.split()
    assert env_dir == config_dir and Path(env_dir).parent == tmp_path / "simrollout" / "numba"
    assert Path(loop_dir).is_relative_to(env_dir)
    assert not Path(loop_dir).is_relative_to(ROOT / "simrollout")


def test_without_xdg_the_cache_is_under_home(tmp_path):
    out = _python(WHERE, HOME=str(tmp_path))
    assert Path(out.stdout.split()[0]).parent == tmp_path / ".cache" / "simrollout" / "numba"


def test_a_users_numba_cache_dir_is_kept(tmp_path):
    out = _python(WHERE, NUMBA_CACHE_DIR=str(tmp_path / "mine"), XDG_CACHE_HOME=str(tmp_path))
    assert out.stdout.split()[:2] == [str(tmp_path / "mine")] * 2


def test_numba_imported_first_still_gets_the_folder(tmp_path):
    code = "import numba; " + WHERE
    env_dir, config_dir, loop_dir = _python(code, XDG_CACHE_HOME=str(tmp_path)).stdout.split()
    assert config_dir == env_dir and Path(env_dir).parent == tmp_path / "simrollout" / "numba"
    assert Path(loop_dir).is_relative_to(tmp_path)


def test_an_edit_to_any_compiled_module_names_a_new_folder(tmp_path):
    """A loop inlines other modules' functions and constants; numba's cache checks its own file
    alone, so the folder is keyed by all of them."""
    import shutil

    from simrollout import numba_cache

    copy = tmp_path / "simrollout"
    for sub in numba_cache.COMPILED_IN:
        shutil.copytree(ROOT / "simrollout" / sub, copy / sub, ignore=shutil.ignore_patterns("__pycache__"))
    before = _digest(copy)
    assert before == numba_cache.source_digest()
    heap = copy / "sim" / "compiled_heap.py"
    heap.write_text(heap.read_text() + "\n# an edit\n")
    edited = _digest(copy)
    assert edited != before
    (copy / "sim" / "notes.py").write_text("# nothing compiled here\n")  # a module numba never compiles
    assert _digest(copy) == edited


def _digest(package: Path) -> str:
    from simrollout import numba_cache

    old = numba_cache.PACKAGE
    numba_cache.PACKAGE = package
    try:
        return numba_cache.source_digest()
    finally:
        numba_cache.PACKAGE = old


SAY = "from simrollout.sim import compiled; compiled._say_if_compiling()"


def test_an_empty_cache_says_it_compiles(tmp_path):
    out = _python(SAY, NUMBA_CACHE_DIR=str(tmp_path))
    assert "compiling the event loop" in out.stderr
    assert str(tmp_path) in out.stderr and "once per install" in out.stderr
    assert "serving engines" not in out.stderr  # a token loop's longer compile, said only for one
    tokens = _python(
        SAY.replace("_say_if_compiling()", "_say_if_compiling(True)"), NUMBA_CACHE_DIR=str(tmp_path / "t")
    )
    assert "a training loop on serving engines: about 84 s more" in tokens.stderr


@pytest.mark.slow  # two interpreters importing the engine: 3.0-3.2 s of CPU
def test_the_cells_of_one_run_say_it_once(tmp_path):
    """Cell processes of one run (children of one parent: here, this test) compile side by side;
    the first says so, the others do not repeat it."""
    first = _python(SAY, NUMBA_CACHE_DIR=str(tmp_path))
    second = _python(SAY, NUMBA_CACHE_DIR=str(tmp_path))
    assert "compiling the event loop" in first.stderr and second.stderr == ""


@pytest.mark.slow
def test_a_filled_cache_says_nothing(tmp_path):
    from simrollout.sim import compiled_loop as L

    index = Path(L.run._cache._cache_file._index_path)
    rel = index.relative_to(os.environ["NUMBA_CACHE_DIR"])
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_bytes(b"")  # the index numba writes beside a compiled function
    assert _python(SAY, NUMBA_CACHE_DIR=str(tmp_path)).stderr == ""


def test_loop_cached_reads_numbas_index_of_the_loop(tmp_path, monkeypatch):
    """A run's pool compiles the loop for its cells only when numba's cache has none yet."""
    from simrollout import numba_cache

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not numba_cache.loop_cached()
    (tmp_path / "sim_0a1b").mkdir()
    (tmp_path / "sim_0a1b" / "compiled_core.schedule-14.py311.nbi").touch()
    assert not numba_cache.loop_cached()
    (tmp_path / "sim_0a1b" / "compiled_loop.run-84.py311.nbi").touch()
    assert numba_cache.loop_cached()
    assert not numba_cache.loop_cached(tokens=True)  # a token loop's entry is compiled apart
    (tmp_path / "sim_0a1b" / "compiled_tokens.run_training-160.py311.nbi").touch()
    assert numba_cache.loop_cached(tokens=True)
