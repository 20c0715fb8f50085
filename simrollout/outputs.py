"""Outputs written atomically: a failed or interrupted command leaves earlier results as they were."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console


def _say(text: str) -> None:
    Console(stderr=True).print(text)


@contextmanager
def atomic_folder(out: Path):
    """A temporary folder beside ``out`` that replaces it only when the block completes: a failed
    or interrupted run leaves an earlier result in ``out`` as it was."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if out.exists():
            _say(f"{out}/ left as it was; the partial output was removed")
        raise
    # swap in entry by entry (other files in ``out`` are left alone)
    out.mkdir(parents=True, exist_ok=True)
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    old.mkdir(exist_ok=True)
    for entry in tmp.iterdir():
        if (out / entry.name).exists():
            (out / entry.name).rename(old / entry.name)
        entry.rename(out / entry.name)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def atomic_file(path: Path):
    """A temporary file beside ``path`` that replaces it only when the block completes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
