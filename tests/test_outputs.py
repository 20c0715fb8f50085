"""Atomic outputs: a block that fails leaves the earlier file or folder byte for byte."""

import pytest

from simrollout.outputs import atomic_file, atomic_folder


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
