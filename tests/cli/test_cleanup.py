"""``simrollout cleanup --results DIR``: the partial output of killed runs, never a live run's."""

import os
import subprocess
import sys

from typer.testing import CliRunner

from simrollout.cli import app


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_cleanup_results_removes_dead_runs_partial_output_in_the_whole_tree(tmp_path):
    dead = _dead_pid()
    top = tmp_path / f".small.partial-{dead}"
    deep = tmp_path / "sweeps" / f".grid.partial-{dead}"
    (deep / "inner").mkdir(parents=True)
    top.mkdir()
    half_file = tmp_path / "sweeps" / f".plan.csv.partial-{dead}"
    half_file.write_text("half")
    live = tmp_path / f".small.partial-{os.getpid()}"
    live.mkdir()
    kept = tmp_path / ".hidden-notes"  # not a partial output
    kept.write_text("mine")

    dry = CliRunner().invoke(app, ["cleanup", "--results", str(tmp_path), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "3 partial outputs of killed runs (dry run)" in dry.output
    assert top.exists() and deep.exists() and half_file.exists()

    res = CliRunner().invoke(app, ["cleanup", "--results", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert f"removed      {top}" in res.output
    assert not top.exists() and not deep.exists() and not half_file.exists()
    assert live.exists() and kept.read_text() == "mine"


def test_cleanup_needs_a_backend_or_results():
    from simrollout.errors import InputError

    res = CliRunner().invoke(app, ["cleanup"])
    assert res.exit_code != 0 and isinstance(res.exception, InputError)
    assert "--results DIR" in str(res.exception)
    res = CliRunner().invoke(app, ["cleanup", "--results", "no-such-folder-here"])
    assert isinstance(res.exception, InputError) and "not a folder" in str(res.exception)
