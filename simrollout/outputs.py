"""Outputs written atomically: a failed or interrupted command leaves earlier results as they were.

A command writes into a hidden ``.<name>.partial-<pid>`` beside its output and renames it into
place when complete. A command killed outright (SIGKILL, a power cut) cannot remove its own: the
next command writing to the same place removes those whose process is gone
(:func:`sweep_partials`), as does ``simrollout cleanup --results DIR`` for a whole tree. A live
command's partial output is never touched (nor one whose pid a new process took since: it goes
once that process ends).
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from .errors import InputError

_MARKS = (".partial-", ".old-")  # a folder being written, and the entries a swap replaced


def _say(text: str) -> None:
    Console(stderr=True).print(text)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(path: Path) -> int | None:
    """The pid in a partial output's name (``.<name>.partial-<pid>``), or None if it is not one."""
    if not path.name.startswith("."):
        return None
    for mark in _MARKS:
        head, sep, pid = path.name.rpartition(mark)
        if sep and head and pid.isdigit():
            return int(pid)
    return None


def stale_partials(folder: Path, name: str | None = None) -> list[Path]:
    """Partial outputs in ``folder`` (of the output ``name``, or of any) whose process is gone;
    this process's own are never stale."""
    prefix = f".{name}." if name is not None else "."
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    return [
        p
        for p in sorted(entries)
        if p.name.startswith(prefix)
        and (pid := _owner(p)) is not None
        and pid != os.getpid()
        and not pid_alive(pid)
    ]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def sweep_partials(folder: Path, name: str | None = None, dry_run: bool = False) -> list[Path]:
    """Remove (unless ``dry_run``) and return the partial outputs in ``folder`` left by commands
    that died; with ``name``, only those of that output."""
    found = stale_partials(folder, name)
    if not dry_run:
        for p in found:
            _remove(p)
    return found


def sweep_tree(root: Path, dry_run: bool = False) -> list[Path]:
    """:func:`sweep_partials` in ``root`` and every folder under it (not inside a partial output)."""
    found = []
    for here, dirs, _ in os.walk(root):
        found += sweep_partials(Path(here), dry_run=dry_run)
        dirs[:] = [d for d in dirs if _owner(Path(d)) is None]
    return found


def writable_folder(out: Path, what: str = "--out") -> None:
    """Refuse, before anything runs, an output folder that cannot be created or written: one that
    is a file, or under a file, or under a folder this user cannot write."""
    if out.exists() and not out.is_dir():
        raise InputError(f"{what} {out}: is a file; expected a results folder (existing or new).")
    _parents_writable(out, what)


def writable_file(path: Path, what: str = "--out") -> None:
    """Refuse, before anything runs, an output file that cannot be written (as :func:`writable_folder`)."""
    if path.is_dir():
        raise InputError(f"{what} {path}: is a folder; expected a file (existing or new).")
    _parents_writable(path, what)


def _parents_writable(out: Path, what: str) -> None:
    for parent in (out.parent, *out.parent.parents):
        if not parent.exists() and not parent.is_symlink():
            continue
        if not parent.is_dir():
            raise InputError(
                f"{what} {out}: cannot be created, because {parent} is a file, not a folder; choose "
                "an output whose parents are folders (or can be made)."
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(
                f"{what} {out}: cannot be created, because this user cannot write in {parent}; "
                "choose an output folder you can write."
            )
        _try_write(parent, out, what)
        return


def _try_write(parent: Path, out: Path, what: str) -> None:
    """Make and remove a partial folder in ``parent``: a permission check passes where writing still
    fails (root in /proc, a read-only or full file system)."""
    trial = parent / f".{out.name}.partial-{os.getpid()}"
    if trial.exists():
        return
    try:
        trial.mkdir()
    except OSError as exc:
        raise InputError(
            f"{what} {out}: cannot be created, because nothing can be written in {parent} "
            f"({exc.strerror or exc}); choose an output folder you can write."
        ) from None
    trial.rmdir()


def _make_parent(out: Path, what: str) -> None:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = exc.filename or out.parent
        raise InputError(
            f"{what} {out}: its folder cannot be created ({exc.strerror or exc}: {where}); choose an "
            "output whose parents are folders you can write."
        ) from None


@contextmanager
def atomic_folder(out: Path, what: str = "output"):
    """A temporary folder beside ``out`` that replaces it only when the block completes: a failed
    or interrupted run leaves an earlier result in ``out`` as it was. The partial folders of runs
    into ``out`` that died are removed first."""
    writable_folder(out, what)
    _make_parent(out, what)
    sweep_partials(out.parent, out.name)
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
def atomic_file(path: Path, what: str = "output"):
    """A temporary file beside ``path`` that replaces it only when the block completes (the
    partial files of writers of ``path`` that died are removed first)."""
    path = Path(path)
    writable_file(path, what)
    _make_parent(path, what)
    sweep_partials(path.parent, path.name)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
