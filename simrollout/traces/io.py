"""Reading trace files a line or a document at a time (never a whole JSONL file)."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import math
from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError
from .model import Problems

MAX_DOCUMENT = 512 * 2**20  # one JSON trajectory per file (ATIF, .traj): at most this many bytes


def _open(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def check_file(path: Path) -> None:
    if path.is_dir():
        raise InputError(f"{path}: is a directory; expected a trace file.")
    if not path.is_file():
        raise InputError(f"{path}: file not found.")


def json_lines(path: Path, problems: Problems) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` per non-empty line; a line that is not a JSON object (a
    truncated last line, a stray byte) is refused or skipped per ``problems``."""
    check_file(path)
    try:
        with _open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    cut = "truncated or malformed JSON" if line.endswith("\n") else "a truncated last line"
                    problems.bad("bad_json", str(path), n, f"{cut} ({exc.msg} at column {exc.colno})")
                    continue
                if not isinstance(obj, dict):
                    problems.bad(
                        "bad_json", str(path), n, f"expected a JSON object, got {type(obj).__name__}"
                    )
                    continue
                yield n, obj
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError) as exc:
        raise InputError(f"{path}: not a readable UTF-8 text trace ({exc}).") from None


def json_document(path: Path, problems: Problems) -> object | None:
    """One JSON document (a trajectory file); None when refused-and-skipped."""
    check_file(path)
    if path.stat().st_size > MAX_DOCUMENT:
        raise InputError(
            f"{path}: {path.stat().st_size:,} bytes, more than one trajectory file holds "
            f"({MAX_DOCUMENT:,}); a trace this large should be JSONL (one record per line)."
        )
    try:
        with _open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        problems.bad("bad_json", str(path), exc.lineno, f"truncated or malformed JSON ({exc.msg})")
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError) as exc:
        raise InputError(f"{path}: not a readable UTF-8 text trace ({exc}).") from None
    return None


def documents(paths: list[Path], problems: Problems, key: str, refusal: str) -> Iterator[tuple[Path, dict]]:
    """Each file's JSON document whose root maps ``key`` to a list; any other is counted as
    another format (``refusal`` says what was expected)."""
    for path in paths:
        doc = json_document(path, problems)
        if doc is None:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
            problems.bad("not_format", str(path), 0, refusal)
            continue
        yield path, doc


def timestamp(value) -> dt.datetime | None:
    """An ISO-8601 string (``Z`` allowed) or Unix seconds, as an aware datetime; None if absent."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return dt.datetime.fromtimestamp(float(value), dt.timezone.utc) if math.isfinite(value) else None
    if isinstance(value, str) and value:
        try:
            t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)
    return None


def seconds(a: dt.datetime, b: dt.datetime) -> float:
    return (b - a).total_seconds()


def number(value) -> float:
    """A JSON number as float; NaN when absent or not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)
