"""The README's two commands in a fresh virtual environment, in a new user's order:
``pip install .``, a run, then ``pip install -e '.[test]'``; afterwards ``simrollout --help``
works and nothing compiled was left under site-packages (numba's cache is the user's)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(
    ".git", "__pycache__", "results", "*.egg-info", "build", ".ruff_cache", ".pytest_cache"
)


def _sh(argv: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    got = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True)
    assert got.returncode == 0, f"{argv}: exit {got.returncode}\n{got.stdout[-2000:]}\n{got.stderr[-4000:]}"
    return got


def test_the_readme_shows_the_commands_the_venv_test_runs():
    """The README's first two commands are the ones below, in that order: changing them changes this."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert [b.strip() for b in blocks[:2]] == [
        "pip install . && simrollout run scenarios/1m_150step.yaml",
        "pip install -e '.[test]' && python -m pytest",
    ]


@pytest.mark.slow
def test_the_readme_commands_in_a_fresh_venv(tmp_path):
    """A small scenario (scenarios/small.yaml) stands in for the headline to keep CI short. The
    venv sees this interpreter's packages (``--system-site-packages``) and both installs take
    ``--no-deps``: the dependencies, the test extras among them, are those already installed, so
    the same files are installed and only the build backend (setuptools) comes from the index."""
    src = tmp_path / "checkout"
    shutil.copytree(ROOT, src, ignore=SKIP)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    bin_ = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR", "VIRTUAL_ENV")}
    env |= {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": f"{bin_}{os.pathsep}{env.get('PATH', '')}"}
    pip = [bin_ / "python", "-m", "pip", "install", "-q", "--no-deps"]
    site = Path(
        _sh(
            [bin_ / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], src, env
        ).stdout.strip()
    )

    _sh([*pip, "."], src, env)
    assert (site / "simrollout" / "cli" / "entry.py").exists()
    out = tmp_path / "out"
    run = _sh([bin_ / "simrollout", "run", "scenarios/small.yaml", "--out", out, "--no-records"], src, env)
    assert (out / "summary.csv").read_text().count("\n") >= 3 and "small" in run.stdout
    # small.yaml compiles nothing: compile one of the engine's functions as a run of the compiled
    # engine would, and find numba's files in the user's cache folder, none beside the installed source
    heap = "from simrollout.sim import compiled_heap as H; import numpy as np; a = np.zeros(4); i = np.zeros(4, np.int64); g = np.zeros(4, np.int64); H.push(a, i, i, i, g, 1.0, 0, 0); print(g[2])"
    assert _sh([bin_ / "python", "-c", heap], tmp_path, env).stdout.strip() == "1"
    assert list((tmp_path / "cache" / "simrollout" / "numba").rglob("*.nbi"))
    compiled = [p for p in site.rglob("*") if p.suffix in (".nbi", ".nbc")]
    assert not compiled, f"numba wrote into site-packages: {compiled[:3]}"

    _sh([*pip, "-e", ".[test]"], src, env)
    assert not (site / "simrollout").exists(), "the earlier install left a folder that hides the editable one"
    got = _sh([bin_ / "simrollout", "--help"], tmp_path, env)
    assert "Usage" in got.stdout and "Traceback" not in got.stderr
    where = _sh([bin_ / "python", "-c", "import simrollout; print(simrollout.__file__)"], tmp_path, env)
    assert Path(where.stdout.strip()).parent == src / "simrollout"
