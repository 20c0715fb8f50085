"""Atomic outputs: a block that fails leaves the earlier file or folder byte for byte."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from simrollout.errors import InputError
from simrollout.outputs import atomic_file, atomic_folder, writable_file, writable_folder
from tests.conftest import ROOT, cli, make


def test_a_failed_write_keeps_the_earlier_file(tmp_path):
    path = tmp_path / "plan.csv"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.csv"]
    with atomic_file(path) as tmp:
        tmp.write_text("new")
    assert path.read_text() == "new"


def test_a_failed_folder_keeps_the_earlier_folder_and_other_files(tmp_path):
    out = tmp_path / "record"
    out.mkdir()
    (out / "real.csv").write_text("old")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(KeyboardInterrupt):
        with atomic_folder(out) as tmp:
            (tmp / "real.csv").write_text("half")
            raise KeyboardInterrupt
    assert (out / "real.csv").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record"]
    with atomic_folder(out) as tmp:
        (tmp / "real.csv").write_text("new")
    assert (out / "real.csv").read_text() == "new" and (out / "notes.txt").read_text() == "mine"


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_partial_output_of_a_dead_writer_is_swept_and_a_live_ones_kept(tmp_path):
    out = tmp_path / "run"
    dead = tmp_path / f".run.partial-{_dead_pid()}"
    (dead / "trajectories").mkdir(parents=True)
    dead_file = tmp_path / f".run.old-{_dead_pid()}"
    dead_file.mkdir()
    live = tmp_path / f".run.partial-{os.getppid()}"  # the process that started this test: alive
    live.mkdir()
    other = tmp_path / f".other.partial-{_dead_pid()}"  # another output's: not this write's to sweep
    other.mkdir()
    with atomic_folder(out) as tmp:
        (tmp / "summary.csv").write_text("x")
    assert not dead.exists() and not dead_file.exists()
    assert live.exists() and other.exists()
    assert (out / "summary.csv").read_text() == "x"


def test_partial_file_of_a_dead_writer_is_swept(tmp_path):
    stale = tmp_path / f".plan.csv.partial-{_dead_pid()}"
    stale.write_text("half")
    with atomic_file(tmp_path / "plan.csv") as tmp:
        tmp.write_text("new")
    assert not stale.exists() and (tmp_path / "plan.csv").read_text() == "new"


def test_an_output_folder_under_a_file_is_refused_in_one_paragraph(tmp_path):
    (tmp_path / "results-file").write_text("not a folder")
    out = tmp_path / "results-file" / "sub"
    with pytest.raises(InputError, match=r"--out .*sub: cannot be created, because .*results-file is a file"):
        writable_folder(out, "--out")
    with pytest.raises(InputError, match="results-file is a file"):
        with atomic_folder(out):
            pass
    with pytest.raises(InputError, match="is a file; expected a results folder"):
        writable_folder(tmp_path / "results-file", "--out")
    with pytest.raises(InputError, match="is a folder; expected a file"):
        with atomic_file(tmp_path):
            pass


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_output_nothing_can_be_written_in_is_refused_even_where_permissions_say_yes(tmp_path):
    # /proc takes no new entries, though root may write there by its permission bits
    out = Path("/proc") / f"simrollout-{os.getpid()}"
    with pytest.raises(InputError, match=r"--out /proc/simrollout-\d+: cannot be created, because .* /proc"):
        writable_folder(out, "--out")
    with pytest.raises(InputError, match="cannot be created"):
        writable_file(out / "plan.csv", "--out")
    with pytest.raises(InputError, match="cannot be created"):
        with atomic_folder(out):
            pass
    writable_folder(tmp_path / "new" / "res", "--out")  # a writable place passes, and keeps nothing
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_run_out_under_a_file_exits_2_without_a_traceback(tmp_path):
    (tmp_path / "results-file").write_text("")
    proc = cli("run", ROOT / "scenarios/small.yaml", "--out", tmp_path / "results-file" / "sub")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "FileExistsError" not in proc.stderr
    assert "results-file is a file, not a folder" in proc.stderr


@pytest.mark.slow
def test_a_run_killed_hard_leaves_a_partial_folder_the_next_run_removes(tmp_path):
    out = tmp_path / "res"
    run = [
        sys.executable,
        "-m",
        "simrollout.cli",
        "run",
        str(ROOT / "scenarios/small.yaml"),
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(run, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = tmp_path / f".res.partial-{proc.pid}"
    deadline = time.monotonic() + 120
    while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert partial.exists(), "the run never created its partial folder"
    os.killpg(proc.pid, signal.SIGKILL)  # the run and any workers: no cleanup runs
    proc.wait()
    assert partial.exists()  # what SIGKILL leaves behind
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        live = tmp_path / f".res.partial-{sleeper.pid}"
        live.mkdir()
        tiny = tmp_path / "tiny.yaml"
        tiny.write_text(yaml.safe_dump(make()))
        again = cli("run", tiny, "--out", out, "--no-records")
        assert again.returncode == 0, again.stderr
        assert not partial.exists()
        assert live.exists()  # a live process's partial folder is never touched
        assert (out / "summary.csv").is_file()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_output_file_under_a_file_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "plan-file").write_text("")
    with pytest.raises(
        InputError, match=r"--out .*plan.csv: cannot be created, because .*plan-file is a file"
    ):
        writable_file(tmp_path / "plan-file" / "plan.csv", "--out")
    writable_file(tmp_path / "new" / "plan.csv", "--out")  # a folder still to make is fine
