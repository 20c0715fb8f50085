"""The one shape every framework's importer returns (:class:`Imported`: the scenario fields it
mapped, each with the knobs it came from, and the config fields it could not map), the readers of
the config files, and the scenario YAML written from it."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ...errors import InputError, load_yaml, read_text


@dataclass
class Mapped:
    """A scenario field's value and where it came from: the framework's knobs and their values,
    or ``derived: ...`` / ``assumed: ...``."""

    value: Any
    source: str


@dataclass
class Imported:
    """What an importer read: scenario fields by dotted path (``training.prompts_per_step``), the
    config's fields it could not map (name -> value) and notes on what it derived or assumed."""

    framework: str
    config: Path
    fields: dict[str, Mapped] = field(default_factory=dict)
    unmapped: dict[str, Any] = field(default_factory=dict)

    def put(self, path: str, value: Any, source: str) -> None:
        self.fields[path] = Mapped(value, source)


class Knobs:
    """A config's fields by dotted name; every name read is remembered, so the rest are the
    unmapped ones."""

    def __init__(self, flat: dict[str, Any], path: Path):
        self.flat, self.path, self.used = flat, path, set()
        self.defaulted: dict[str, Any] = {}  # knobs absent, read at the framework's default

    def __contains__(self, name: str) -> bool:
        return name in self.flat

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.flat:
            self.used.add(name)
            return self.flat[name]
        return default

    def number(self, name: str, default: Any = None, kind: type = int) -> Any:
        """The knob as a number (``kind``), or ``default`` when absent or null; an InputError
        naming the file and the knob when it is not one."""
        v = self.get(name)
        if v is None:
            if default is not None and name not in self.flat:
                self.defaulted[name] = default
            return default
        try:
            x = kind(v) if not isinstance(v, bool) else None
        except (TypeError, ValueError):
            x = None
        if x is None or (kind is int and float(v) != x) or (kind is float and not math.isfinite(x)):
            what = "a whole number" if kind is int else "a number"
            raise InputError(f"{self.path}: field '{name}' is {v!r}; expected {what}.")
        return x

    def need(self, name: str, why: str) -> int:
        """A whole-number knob the mapping cannot do without: an InputError when it is absent."""
        v = self.number(name)
        if v is None:
            raise InputError(f"{self.path}: field '{name}' is missing; it gives {why}.")
        return v

    def flag(self, name: str, default: bool | None = None) -> bool | None:
        v = self.get(name)
        if v is None:
            return default
        if isinstance(v, str):
            return v.strip().lower() in ("true", "1", "yes")
        return bool(v)

    def rest(self) -> dict[str, Any]:
        return {k: v for k, v in self.flat.items() if k not in self.used}


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping's leaves by dotted name (a list is one leaf)."""
    if not isinstance(data, dict):
        return {prefix: data} if prefix else {}
    out: dict[str, Any] = {}
    for k, v in data.items():
        name = f"{prefix}.{k}" if prefix else str(k)
        out.update(flatten(v, name) if isinstance(v, dict) and v else {name: v})
    return out


_REF = re.compile(r"^\$\{(?:oc\.select:)?([A-Za-z0-9_.]+)(?:,([^}]*))?\}$")


def resolve(flat: dict[str, Any]) -> dict[str, Any]:
    """OmegaConf's whole-value references (``${a.b}``, ``${oc.select:a.b,default}``) replaced by
    what they name (a few levels deep); anything else is left as written."""
    out = dict(flat)
    for _ in range(4):
        for k, v in out.items():
            m = _REF.match(v) if isinstance(v, str) else None
            if m:
                got = out.get(m.group(1))
                out[k] = got if got is not None else (scalar(m.group(2)) if m.group(2) is not None else v)
    return out


def scalar(text: str) -> Any:
    """A command-line value as YAML reads it (``True``, ``0.5``, ``16``, ``[a, b]``)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def read_yaml(path: Path) -> dict[str, Any]:
    data, _ = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of config fields at the top level.")
    return resolve(flatten(data))


def read_toml(path: Path) -> dict[str, Any]:
    import tomllib

    try:
        return flatten(tomllib.loads(read_text(path, "TOML file")))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: malformed TOML: {exc}.") from None


def hydra_overrides(path: Path) -> tuple[dict[str, Any], list[str]]:
    """A launch script's Hydra overrides (``a.b=value``, ``+a.b=value``) and all its words."""
    from .shell import read_script

    _, words = read_script(read_text(path, "shell script"))
    flat = {}
    for w in words:
        key, eq, value = w.partition("=")
        key = key.lstrip("+~")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+", key):
            flat[key] = scalar(value)
    return resolve(flat), words


# ------------------------------------------------------------------ the scenario written
ASSUMED_WORKLOAD = """\
workload:  # assumed: a framework's config does not describe the agent's task; give your own
  steps: {kind: lognormal, median: 20, p99: 60}  # assumed turns per trajectory
  max_turns: 50  # assumed
  llm_time: {kind: lognormal, median: 5, p99: 60}  # assumed seconds per LLM call
  calls_per_step: 1  # assumed
  tools:
    shell: {weight: 1, latency: {kind: lognormal, median: 1, p99: 30}}  # assumed
substrates:
  - name: sandbox  # assumed figures: replace with a calibrated profile (docs/calibration.md)
    cold_start: 2
    exec_overhead: 0.05
    teardown: 1
"""


def _yaml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(v)


def _tree(fields: dict[str, Mapped]) -> dict:
    root: dict = {}
    for path, m in fields.items():
        *parents, last = path.split(".")
        node = root
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = m
    return root


def _render(node: dict, indent: int) -> list[str]:
    lines = []
    for key, v in node.items():
        pad = "  " * indent
        if isinstance(v, Mapped):
            lines.append(f"{pad}{key}: {_yaml_value(v.value)}  # {v.source}")
        else:
            lines.append(f"{pad}{key}:")
            lines.extend(_render(v, indent + 1))
    return lines


def _wrap(words: list[str], width: int = 100) -> list[str]:
    lines, cur = [], ""
    for w in words:
        if cur and len(cur) + len(w) + 2 > width:
            lines.append(cur)
            cur = ""
        cur = f"{cur}, {w}" if cur else w
    return [*lines, cur] if cur else lines


def unmapped_lines(imp: Imported) -> list[str]:
    """The config's fields not mapped, ``name=value`` each, wrapped."""
    items = [f"{k}={json.dumps(v) if isinstance(v, str) else _yaml_value(v) if v is not None else 'null'}"
             for k, v in sorted(imp.unmapped.items())]  # fmt: skip
    return _wrap(items)


def scenario_yaml(imp: Imported, name: str) -> str:
    """The scenario file: the mapped fields commented with their knobs, an assumed workload and
    substrate, and the unmapped fields in a closing comment block."""
    tree = _tree(imp.fields)
    head = [
        f"# From {imp.framework}'s config {imp.config.name} (simrollout import {imp.framework}).",
        "# Each mapped field names the framework knob it came from; 'assumed' fields are not in it.",
        "version: 1",
        f"name: {json.dumps(name)}",
        "seed: 1",
    ]
    body = [ASSUMED_WORKLOAD.rstrip("\n")]
    for section in ("cluster", "training"):
        body.append(f"{section}:")
        body.extend(_render(tree.get(section, {}), 1))
    tail = [f"# Not mapped ({len(imp.unmapped)} fields of {imp.config.name}):"]
    tail += [f"#   {line}" for line in unmapped_lines(imp)]
    return "\n".join(head + body + tail) + "\n"
