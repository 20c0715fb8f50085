"""Input errors: one paragraph naming the file, the field and what was expected."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import ValidationError


class InputError(Exception):
    """Bad user input; the CLI prints the message and exits with code 2."""


class SubstrateError(Exception):
    """A real substrate stopped answering (what was measured is kept); the CLI prints the message
    and exits with code 1."""


MAX_BYTES = 5_000_000  # a scenario, profile or spec is a few kB; refuse what cannot be one


def read_text(path: str | Path, what: str = "file") -> str:
    """A text file decoded as UTF-8, or an InputError naming the file and the first bad byte."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory; expected a {what}.")
    if not path.is_file():
        raise InputError(f"{path}: file not found.")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}); save the {what} as UTF-8."
        ) from None


def load_yaml(path: str | Path) -> tuple[object, yaml.Node | None]:
    """Parse a YAML file; return the data and its node tree (for line numbers)."""
    path = Path(path)
    if path.is_file() and path.stat().st_size > MAX_BYTES:
        raise InputError(
            f"{path}: too large ({path.stat().st_size:,} bytes); a YAML input is at most {MAX_BYTES:,} bytes."
        )
    text = read_text(path, "YAML file")
    try:
        fast = getattr(yaml, "CSafeLoader", None)  # libyaml's parser: a profile with refits is large
        if fast is not None:
            try:
                data = yaml.load(text, Loader=fast)
            except yaml.YAMLError:  # malformed: the pure-Python parser says where, as it always did
                data = None
            else:
                if _depth(data) > MAX_DEPTH:
                    raise RecursionError
                return data, yaml.compose(text, Loader=fast)
        return yaml.safe_load(text), yaml.compose(text)
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a scenario, profile or spec.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"{path}: malformed YAML{where}: {problem}.") from None


MAX_DEPTH = 200  # nesting a scenario, profile or spec never needs (libyaml parses any depth)


def _depth(data) -> int:
    """How deeply ``data`` nests lists and mappings (iteratively: no recursion limit)."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        node, d = todo.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, d)
            if d <= MAX_DEPTH:
                todo.extend((v, d + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def _line_of(node: yaml.Node | None, loc: tuple) -> int | None:
    line = None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(key):
                    line, nxt = k.start_mark.line + 1, v
                    break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        if node is None:
            break
    return line


def _clean_loc(loc: tuple) -> tuple:
    # pydantic adds union-member tags ("lognormal", "function-after[...]") to locations
    return tuple(
        p
        for p in loc
        if isinstance(p, int) or not ("[" in p or "(" in p or p in _DIST_KINDS or p in _TYPE_TAGS)
    )


_TYPE_TAGS = {"float", "int", "str", "bool", "constrained-float", "constrained-int"}


_DIST_KINDS = {
    "constant",
    "exponential",
    "lognormal",
    "gamma",
    "weibull",
    "loglogistic",
    "empirical",
    "discrete",
    "mixture",
    "scaled",
    "function-before",
    "function-after",
}


def explain(exc: ValidationError, path: str | Path, node: yaml.Node | None = None) -> InputError:
    """Turn a pydantic ValidationError into one readable InputError."""
    parts = []
    seen = set()
    for err in exc.errors():
        loc = _clean_loc(err["loc"])
        if not loc:  # a check across sections names its field first: point at that line
            named = re.match(r"(?:Value error, )?([a-z_]+(?:\.[a-z_0-9]+)+)\b", err["msg"])
            if named:
                loc = tuple(int(k) if k.isdigit() else k for k in named.group(1).split("."))
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        if dotted in seen:
            continue
        seen.add(dotted)
        line = _line_of(node, loc)
        where = f"field '{dotted}'" + (f" (line {line})" if line else "")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field; check its spelling against the documented fields"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "union_tag_invalid":
            kinds = sorted(k for k in _DIST_KINDS if not k.startswith("function"))
            msg = f"unknown distribution kind; expected one of {kinds}"
        else:
            got = err.get("input")
            if got is not None and not isinstance(got, dict | list):
                msg += f" (got {got!r})"
        parts.append(f"{where}: {msg}")
        if len(parts) == 4:
            break
    more = len({_clean_loc(e["loc"]) for e in exc.errors()}) - len(parts)
    tail = f"; and {more} more" if more > 0 else ""
    return InputError(f"{path}: invalid input. " + "; ".join(parts) + tail + ".")
