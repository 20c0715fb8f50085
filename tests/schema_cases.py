"""Bad-input cases derived from the pydantic schemas themselves (tests/test_schema_fuzz.py).

Every field of a model is read from ``model_fields`` with its type and constraints; for each one
the cases are a wrong type, out of range, inf and NaN, empty, huge, the field missing (when
required) and an unknown key next to it (when the model forbids extra keys). Each case says
whether the schema makes it invalid (``invalid``) or lets it through (``maybe``: accepted, or
refused by a check across fields; either way a clean outcome), and why, from the constraint that
decides it. A field added to a model is covered by the next run, with no list to update.
"""

from __future__ import annotations

import copy
import math
import types
from dataclasses import dataclass, field
from typing import Annotated, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from simrollout import distributions as D

DELETE = object()  # an edit that removes the key
UNKNOWN = "zz_not_a_field"
HUGE_FLOAT, HUGE_INT, HUGE_LEN = 1e300, 10**30, 10_000

# one valid example of every distribution kind: the fields of each kind are fuzzed from it; a new
# kind without an example fails test_every_distribution_kind_has_an_example
DIST_EXAMPLES = {
    "constant": {"kind": "constant", "value": 2.0},
    "exponential": {"kind": "exponential", "mean": 2.0, "loc": 0.5},
    "lognormal": {"kind": "lognormal", "median": 2.0, "p99": 8.0},
    "gamma": {"kind": "gamma", "shape": 2.0, "scale": 1.0},
    "weibull": {"kind": "weibull", "shape": 1.5, "scale": 2.0},
    "loglogistic": {"kind": "loglogistic", "c": 3.0, "scale": 2.0},
    "empirical": {"kind": "empirical", "quantiles": {0.5: 2.0, 0.9: 4.0, 0.99: 8.0}},
    "discrete": {"kind": "discrete", "values": [1, 2, 3], "weights": [0.5, 0.3, 0.2]},
    "mixture": {"kind": "mixture", "components": [{"weight": 1, "dist": 2.0}, {"weight": 1, "dist": 3.0}]},
    "scaled": {"kind": "scaled", "factor": 1.5, "dist": 2.0},
}
EMPIRICAL_SAMPLES = {"kind": "empirical", "samples": [1.0, 2.0, 4.0]}  # the other form of empirical


@dataclass
class Case:
    file: str  # which input: scenario, profile or engine
    path: tuple  # the mutated field, inside that file
    what: str  # wrong type, out of range, inf, nan, empty, huge, missing, unknown key
    edits: list  # (path, value or DELETE), applied in order to the file's base data
    expect: str  # invalid | maybe
    why: str  # the schema's reason for the expectation

    @property
    def dotted(self) -> str:
        return ".".join(map(str, self.path))

    @property
    def id(self) -> str:
        return f"{self.file}:{self.dotted}:{self.what}"


@dataclass
class Spec:
    """What the schema says of one value: its kind, bounds, lengths, choices, optionality."""

    kind: str  # number, int, str, bool, literal, model, dist, list, dict, any
    tp: object = None
    lo: tuple | None = None  # (bound, inclusive)
    hi: tuple | None = None
    min_len: int | None = None
    max_len: int | None = None
    choices: tuple = ()
    optional: bool = False
    item: Spec | None = None  # list item or dict value
    key: Spec | None = None  # dict key
    members: list = field(default_factory=list)  # model classes of a union of models


def _is_dist_union(args) -> bool:
    return any(isinstance(a, type) and issubclass(a, D._Base) for a in args)


def analyze(tp, metadata=()) -> Spec:
    """The Spec of annotation ``tp`` with pydantic field ``metadata`` (constraints)."""
    meta = list(metadata)
    while get_origin(tp) is Annotated:
        tp, *more = get_args(tp)
        meta += more
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        if _is_dist_union(args):
            return Spec("dist", tp, members=[a for a in args if isinstance(a, type)])
        rest = [a for a in args if a is not type(None)]
        spec = analyze(rest[0], meta) if len(rest) == 1 else _first(rest, meta)
        spec.optional = spec.optional or type(None) in args
        return spec
    spec = Spec("any", tp)
    if tp is bool:
        spec.kind = "bool"
    elif tp is int:
        spec.kind = "int"
    elif tp is float:
        spec.kind = "number"
    elif tp is str:
        spec.kind = "str"
    elif origin is Literal:
        spec.kind, spec.choices = "literal", args
    elif isinstance(tp, type) and issubclass(tp, BaseModel):
        spec.kind = "model"
    elif origin is list:
        spec.kind, spec.item = "list", analyze(args[0])
    elif origin is dict:
        spec.kind, spec.key, spec.item = "dict", analyze(args[0]), analyze(args[1])
    for m in meta:
        for c in m.metadata if isinstance(m, FieldInfo) else [m]:
            if isinstance(c, at.Gt | at.Ge):
                spec.lo = (c.gt, False) if isinstance(c, at.Gt) else (c.ge, True)
            elif isinstance(c, at.Lt | at.Le):
                spec.hi = (c.lt, False) if isinstance(c, at.Lt) else (c.le, True)
            elif isinstance(c, at.MinLen):
                spec.min_len = c.min_length
            elif isinstance(c, at.MaxLen):
                spec.max_len = c.max_length
    return spec


def _first(members, meta) -> Spec:
    """A union of several types (a number or a measured curve, one level or a list): the first
    member's spec, as the cases are values that no member accepts or the first member's own."""
    spec = analyze(members[0], meta)
    spec.members = members
    return spec


def _field_spec(f: FieldInfo) -> Spec:
    spec = analyze(f.annotation, f.metadata)
    if f.default is None and not f.is_required():
        spec.optional = True
    return spec


def _below(lo) -> tuple[float, str]:
    bound, inclusive = lo
    return (bound - 1 if inclusive else bound), f"{'>=' if inclusive else '>'} {bound}"


def _above(hi) -> tuple[float, str]:
    bound, inclusive = hi
    return (bound + 1 if inclusive else bound), f"{'<=' if inclusive else '<'} {bound}"


def value_cases(spec: Spec, finite: bool) -> list[tuple[str, object, str, str]]:
    """(what, value, expect, why) for one value of ``spec``; ``finite``: the model refuses inf
    and NaN (``allow_inf_nan=False``)."""
    out = []
    null = ("maybe", "optional: null is the field left out") if spec.optional else ("invalid", "not optional")
    if spec.kind in ("number", "int"):
        out.append(("wrong type", "abc", "invalid", f"a {spec.kind}"))
        if spec.lo is not None:
            v, why = _below(spec.lo)
            out.append(("out of range", v, "invalid", why))
        if spec.hi is not None:
            v, why = _above(spec.hi)
            out.append(("out of range", v, "invalid", why))
        nonfinite = ("invalid", "an int" if spec.kind == "int" else "allow_inf_nan=False")
        if spec.kind == "int" or finite:
            out += [("inf", math.inf, *nonfinite), ("nan", math.nan, *nonfinite)]
        big = HUGE_INT if spec.kind == "int" else HUGE_FLOAT
        out.append(("huge", big, *(("invalid", "bounded above") if spec.hi else ("maybe", "no upper bound"))))
        out.append(("empty", None, *null))
    elif spec.kind == "str":
        out.append(("wrong type", [1, 2], "invalid", "a string"))
        empty = ("invalid", f"min_length {spec.min_len}") if spec.min_len else ("maybe", "no min_length")
        out.append(("empty", "", *empty))
        out.append(("huge", "x" * HUGE_LEN, "maybe", "no max_length"))
        out.append(("empty", None, *null))
    elif spec.kind == "bool":
        out.append(("wrong type", "perhaps", "invalid", "a boolean"))
        out.append(("out of range", 2, "invalid", "a boolean (0 and 1 only)"))
        out.append(("empty", None, *null))
    elif spec.kind == "literal":
        out.append(("wrong type", [1], "invalid", f"one of {spec.choices}"))
        out.append(("out of range", "not-a-choice", "invalid", f"one of {spec.choices}"))
        out.append(("empty", "", "invalid", f"one of {spec.choices}"))
        out.append(("empty", None, *null))
    elif spec.kind == "dist":
        out.append(("wrong type", "abc", "invalid", "a number or a distribution mapping"))
        out.append(("wrong type", [1, 2], "invalid", "a number or a distribution mapping"))
        out.append(("out of range", -1.0, "invalid", "a constant >= 0"))
        out += [
            ("inf", math.inf, "invalid", "allow_inf_nan=False"),
            ("nan", math.nan, "invalid", "allow_inf_nan=False"),
        ]
        out.append(("empty", {}, "invalid", "a distribution needs its kind"))
        out.append(("huge", HUGE_FLOAT, "maybe", "a constant has no upper bound in the schema"))
        out.append(("empty", None, *null))
    elif spec.kind in ("list", "dict"):
        wrong = "abc" if spec.kind == "list" else [1, 2]
        out.append(("wrong type", wrong, "invalid", f"a {spec.kind}"))
        empty = ("invalid", f"min_length {spec.min_len}") if spec.min_len else ("maybe", "no min_length")
        out.append(("empty", [] if spec.kind == "list" else {}, *empty))
        out.append(("empty", None, *null))
    elif spec.kind == "model":
        out.append(("wrong type", "abc", "invalid", "a mapping"))
        out.append(("wrong type", [1], "invalid", "a mapping"))
        required = [n for n, f in spec.tp.model_fields.items() if f.is_required()]
        empty = ("invalid", f"required {required}") if required else ("maybe", "every field has a default")
        out.append(("empty", {}, *empty))
        out.append(("empty", None, *null))
    return out


def _huge_list(spec: Spec, current) -> list | None:
    if spec.kind == "list" and isinstance(current, list) and current:
        return [current[0]] * HUGE_LEN
    return None


def model_cases(model: type[BaseModel], data: dict, path: tuple, file: str, pre: list, depth: int = 0):
    """Cases for every field of ``model`` whose data (inside the file) is ``data`` at ``path``;
    ``pre``: edits that make that data the base (a distribution kind's example)."""
    finite = model.model_config.get("allow_inf_nan", True) is False
    for name, f in model.model_fields.items():
        key = f.alias or name
        fpath = path + (key,)
        spec = _field_spec(f)
        for what, value, expect, why in value_cases(spec, finite):
            yield Case(file, fpath, what, pre + [(fpath, value)], expect, why)
        huge = _huge_list(spec, data.get(key))
        if huge is not None:
            yield Case(file, fpath, "huge", pre + [(fpath, huge)], "invalid" if spec.max_len else "maybe",
                       f"max_length {spec.max_len}" if spec.max_len else "no max_length")  # fmt: skip
        if f.is_required():
            yield Case(file, fpath, "missing", pre + [(fpath, DELETE)], "invalid", "required")
        if key in data:
            yield from _inner(spec, data[key], fpath, file, pre, depth)
    forbid = model.model_config.get("extra") == "forbid"
    yield Case(file, path + (UNKNOWN,), "unknown key", pre + [(path + (UNKNOWN,), 1)],
               "invalid" if forbid else "maybe", f"extra={model.model_config.get('extra')!r}")  # fmt: skip


def _inner(spec: Spec, value, path: tuple, file: str, pre: list, depth: int):
    """Cases inside a present value: a section's fields, list items, dict entries and keys, the
    fields of every distribution kind (at the top level of distributions only)."""
    if spec.kind == "model" and isinstance(value, dict):
        yield from model_cases(spec.tp, value, path, file, pre, depth)
    elif spec.kind == "dist" and depth == 0:
        for ex in [*DIST_EXAMPLES.values(), EMPIRICAL_SAMPLES]:
            kind = next(m for m in spec.members if m.model_fields["kind"].default == ex["kind"])
            yield from model_cases(kind, ex, path, file, pre + [(path, copy.deepcopy(ex))], depth + 1)
    elif spec.kind == "list" and isinstance(value, list) and value and spec.item:
        for what, v, expect, why in value_cases(spec.item, True):
            yield Case(file, path + (0,), what, pre + [(path + (0,), v)], expect, why)
        yield from _inner(spec.item, value[0], path + (0,), file, pre, depth)
    elif spec.kind == "dict" and isinstance(value, dict) and value and spec.item:
        first = next(iter(value))
        if spec.key is not None and spec.key.lo is not None:
            bad, why = _below(spec.key.lo)
            yield Case(
                file, path, "key out of range", pre + [(path, {bad: value[first]})], "invalid", f"key {why}"
            )
        if spec.key is not None and spec.key.kind == "literal":
            yield Case(file, path + ("not-a-choice",), "unknown key", pre + [(path + ("not-a-choice",), value[first])],
                       "invalid", f"keys one of {spec.key.choices}")  # fmt: skip
        for what, v, expect, why in value_cases(spec.item, True):
            yield Case(file, path + (first,), what, pre + [(path + (first,), v)], expect, why)
        yield from _inner(spec.item, value[first], path + (first,), file, pre, depth)


def apply(base: dict, edits: list) -> dict:
    """``base`` with the edits applied (a deep copy)."""
    data = copy.deepcopy(base)
    for path, value in edits:
        node = data
        for k in path[:-1]:
            node = node[k]
        if value is DELETE:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = copy.deepcopy(value)
    return data
