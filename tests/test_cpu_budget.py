"""The quick tier's CPU budget (tests/conftest.py): an unmarked test past it fails with what to do,
a test marked slow does not, and each test's CPU time is recorded on request."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BURN = """
import time

import pytest


def _burn(seconds):
    t0 = time.process_time()
    while time.process_time() - t0 < seconds:
        pass


def test_cheap():
    assert True


def test_dear():
    _burn(0.3)


@pytest.mark.slow
def test_dear_but_marked():
    _burn(0.3)
"""


def _pytest(folder: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SIMROLLOUT_TEST") and k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
        capture_output=True,
        text=True,
        cwd=folder,
        env={
            **clean,
            "PYTHONPATH": str(ROOT),
            "SIMROLLOUT_TEST_WARM": "0",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            **env,
        },
    )


def _folder(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    (tmp_path / "test_burn.py").write_text(BURN)
    return tmp_path


def test_an_unmarked_test_past_the_budget_fails_and_says_what_to_do(tmp_path):
    times = tmp_path / "times.tsv"
    got = _pytest(_folder(tmp_path), SIMROLLOUT_TEST_BUDGET="0.15", SIMROLLOUT_TEST_TIMES=str(times))
    assert "1 failed, 2 passed" in got.stdout, got.stdout
    assert "test_dear took" in got.stdout and "mark it @pytest.mark.slow" in got.stdout
    cpu = dict(line.split("\t") for line in times.read_text().splitlines())
    assert float(cpu["test_burn.py::test_dear"]) >= 0.3 > float(cpu["test_burn.py::test_cheap"])


def test_without_a_budget_nothing_fails(tmp_path):
    got = _pytest(_folder(tmp_path))
    assert "3 passed" in got.stdout, got.stdout
