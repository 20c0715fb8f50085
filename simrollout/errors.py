"""Input errors: one paragraph naming the file, the field and what was expected."""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:  # pydantic is imported by what validates, not by every command's start
    from pydantic import BaseModel, ValidationError


class InputError(Exception):
    """Bad user input; the CLI prints the message and exits with code 2."""


class SubstrateError(Exception):
    """A real substrate stopped answering (what was measured is kept); the CLI prints the message
    and exits with code 1."""


@contextmanager
def naming(paths: Sequence[str | Path]) -> Iterator[None]:
    """Every InputError raised inside names one of ``paths`` (the files a command reads): one that
    names none of them, nor an option (``--...``), is given them in front."""
    try:
        yield
    except InputError as exc:
        msg, names = str(exc), [str(p) for p in paths]
        if not names or msg.startswith("-") or any(n in msg for n in names):
            raise
        raise InputError(f"{', '.join(names)}: {msg}") from None


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
    """Parse a YAML file; return the data and its node tree (for line numbers). The tree is
    measured before anything is built from it: aliases (``*a``) repeat what their anchor holds
    without copying it, and a document that would expand past :data:`MAX_NODES` values (a
    "billion laughs"), or nest past :data:`MAX_DEPTH`, is refused."""
    path = Path(path)
    if path.is_file() and path.stat().st_size > MAX_BYTES:
        raise InputError(
            f"{path}: too large ({path.stat().st_size:,} bytes); a YAML input is at most {MAX_BYTES:,} bytes."
        )
    text = read_text(path, "YAML file")
    fast = getattr(yaml, "CSafeLoader", None)  # libyaml's parser: a profile with refits is large
    try:
        try:
            node = yaml.compose(text, Loader=fast or yaml.SafeLoader)
        except yaml.YAMLError:
            if fast is None:
                raise
            node = yaml.compose(text)  # malformed: the pure-Python parser says where, as it always did
        size, depth = _measure(node)
        if depth > MAX_DEPTH:
            raise RecursionError
        if size > MAX_NODES:
            raise InputError(
                f"{path}: its aliases (*name repeating an &name anchor) expand it to more than "
                f"{MAX_NODES:,} values; a scenario, profile or spec holds far fewer. Write the "
                "repeated parts out, or anchor less."
            )
        return yaml.load(text, Loader=fast or yaml.SafeLoader), node
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a scenario, profile or spec.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"{path}: malformed YAML{where}: {problem}.") from None


MAX_DEPTH = 200  # nesting a scenario, profile or spec never needs (libyaml parses any depth)
MAX_NODES = 2_000_000  # values once aliases expand; a 5 MB file written out holds fewer


def _measure(root: yaml.Node | None) -> tuple[int, int]:
    """``(values, depth)`` of the document once its aliases expand, computed on the node graph
    (an aliased node is measured once, so an alias bomb costs what its text does)."""
    if root is None:
        return 0, 0
    memo: dict[int, tuple[int, int]] = {}
    todo: list[tuple[yaml.Node, bool]] = [(root, False)]
    while todo:
        node, ready = todo.pop()
        if id(node) in memo:
            continue
        kids = _children(node)
        if ready or not kids:
            got = [memo[id(k)] for k in kids]
            size = 1 + sum(s for s, _ in got)
            depth = (1 + max(d for _, d in got)) if got else int(not isinstance(node, yaml.ScalarNode))
            memo[id(node)] = (min(size, MAX_NODES + 1), min(depth, MAX_DEPTH + 1))
            continue
        todo.append((node, True))
        todo.extend((k, False) for k in kids if id(k) not in memo)
    return memo[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


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
        if isinstance(p, int)
        or not ("[" in p or "(" in p or p in _DIST_KINDS or p in _TYPE_TAGS or p in _MODEL_KINDS)
    )


_TYPE_TAGS = {"float", "int", "str", "bool", "constrained-float", "constrained-int"}
_MODEL_KINDS = {"linear", "flops", "transfer"}  # the training loop's time models beside the distributions


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


def explain(
    exc: ValidationError, path: str | Path, node: yaml.Node | None = None, within: tuple = ()
) -> InputError:
    """Turn a pydantic ValidationError into one readable InputError; ``within``: the section of
    the file that was validated (its fields' paths start there)."""
    parts = []
    seen = set()
    errors = exc.errors()
    guessed = {  # a missing field that an unknown one misspells is said once, as the misspelling
        (*e["loc"][:-1], close)
        for e in errors
        if e["type"] == "extra_forbidden"
        for close in difflib.get_close_matches(str(e["loc"][-1]), _fields_at(exc.title, e["loc"][:-1]), 1)
    }
    for err in errors:
        if err["type"] == "missing" and tuple(err["loc"]) in guessed:
            continue
        loc = within + _clean_loc(err["loc"])
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
            guess = did_you_mean(err["loc"][-1], _fields_at(exc.title, err["loc"][:-1]))
            msg = f"unknown field; {guess or 'check its spelling against the documented fields'}"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "union_tag_invalid":
            kinds = sorted(k for k in _DIST_KINDS if not k.startswith("function"))
            guess = did_you_mean(err.get("ctx", {}).get("tag"), kinds)
            msg = f"unknown distribution kind{' (' + guess + ')' if guess else ''}; expected one of {kinds}"
        elif err["type"] in ("literal_error", "enum") and isinstance(err.get("input"), str):
            allowed = re.findall(r"'([^']*)'", err.get("ctx", {}).get("expected", ""))
            guess = did_you_mean(err["input"], allowed)
            msg += f" (got {err['input']!r}{'; ' + guess if guess else ''})"
        else:
            got = err.get("input")
            if got is not None and not isinstance(got, dict | list):
                msg += f" (got {got!r})"
        parts.append(f"{where}: {msg}")
        if len(parts) == 4:
            break
    more = len({_clean_loc(e["loc"]) for e in errors if tuple(e["loc"]) not in guessed}) - len(parts)
    tail = f"; and {more} more" if more > 0 else ""
    text = "; ".join(parts) + tail
    return InputError(f"{path}: invalid input. {text}" + ("" if text.endswith("?") else "."))


def did_you_mean(name: object, allowed: Sequence[str]) -> str | None:
    """``did you mean 'x'?`` for the allowed name closest to ``name`` (difflib), or None."""
    if not isinstance(name, str):
        return None
    close = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close and close[0] != name else None


def did_you_mean_file(ref: str, scenario: Path) -> str:
    """``; did you mean 'x'?`` for a file ``ref`` not found: ``ref`` with the closest file name in the
    folder it names (relative to the scenario file, then the current directory), or ''."""
    if not isinstance(ref, str) or len(ref) > 255:
        return ""
    ref_path = Path(ref)
    for base in (scenario.parent, Path()):
        try:
            names = [p.name for p in (base / ref_path.parent).iterdir() if p.is_file()]
        except (OSError, ValueError):  # no such folder, not one, or a name no file system holds
            continue
        close = difflib.get_close_matches(ref_path.name, names, n=1, cutoff=0.6)
        if close:
            return f"; did you mean '{(ref_path.parent / close[0]).as_posix()}'?"
    return ""


def _models_named(title: str) -> list[type[BaseModel]]:
    """The project's pydantic models called ``title`` (a ValidationError's title names its model)."""
    from pydantic import BaseModel

    todo, found = list(BaseModel.__subclasses__()), []
    while todo:
        m = todo.pop()
        todo.extend(m.__subclasses__())
        if m.__name__ == title and m.__module__.startswith("simrollout"):
            found.append(m)
    return found


def _members(tp: object) -> list:
    """``tp`` with Annotated, Optional and unions taken apart."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _members(typing.get_args(tp)[0])
    if origin is typing.Union or type(tp).__name__ == "UnionType":
        return [m for a in typing.get_args(tp) for m in _members(a)]
    return [tp]


def _step(tp: object, part: object) -> list:
    """The types one location part below ``tp`` (a field of a model, an item of a list or mapping,
    or ``tp`` itself where the part is a union member's tag)."""
    from pydantic import BaseModel

    if isinstance(tp, type) and issubclass(tp, BaseModel):
        for name, f in tp.model_fields.items():
            if part in (name, f.alias):
                return [f.annotation]
        kind = tp.model_fields.get("kind")  # a discriminated union's tag, or a smart union's class name
        tags = {tp.__name__, *(typing.get_args(kind.annotation) if kind is not None else ())}
        return [tp] if part in tags else []
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin in (list, tuple, Sequence, set, frozenset) and isinstance(part, int):
        return [a for a in args if a is not Ellipsis]
    if origin in (dict, typing.Mapping) or (isinstance(origin, type) and issubclass(origin, dict)):
        return list(args[1:2])
    return []


def _fields_at(title: str, loc: tuple) -> list[str]:
    """The field names a model accepts at ``loc`` under the model called ``title``."""
    from pydantic import BaseModel

    kinds: list = list(_models_named(title))
    for part in loc:
        if isinstance(part, str) and ("[" in part or "(" in part or part in _TYPE_TAGS):  # pydantic's tags
            continue
        kinds = [nxt for tp in kinds for m in _members(tp) for nxt in _step(m, part)]
    names = []
    for tp in kinds:
        for m in _members(tp):
            if isinstance(m, type) and issubclass(m, BaseModel):
                names += [f.alias or name for name, f in m.model_fields.items()]
    return list(dict.fromkeys(names))
