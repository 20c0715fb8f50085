"""Every command's --help at 80 columns reads well: no reStructuredText markup, no sentence broken
before the end of a line, and every option's help says its default and, for a number, its unit.
The commands and options are read from the app, so new ones are checked too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import get_args

import pytest
import typer

from simrollout.cli import app
from tests.conftest import ROOT

GROUP = typer.main.get_command(app)
CTX = typer.Context(GROUP)


def _walk(group, prefix=()):
    """Every command as (its words, itself), sub-commands of a group (``validate suite``) too."""
    for name in group.list_commands(CTX):
        cmd = group.get_command(CTX, name)
        yield (*prefix, name), cmd
        if hasattr(cmd, "list_commands"):
            yield from _walk(cmd, (*prefix, name))


ALL = dict(_walk(GROUP))
COMMANDS = [" ".join(words) for words in ALL]
# a number's unit: time, sizes, money, shares, or what it counts
UNITS = re.compile(
    r"\b(s|ms|seconds?|minutes?|hours?|MB|GB|KB|tokens?|US dollars|dollars|share|%|per (hour|day|sandbox|"
    r"trajectory|level)|trajectories|requests|sandboxes|lifecycles|round trips|commands|turns|runs|processes|"
    r"levels|count|steps|seed|GPUs|engines|hosts|cores)\b",
    re.IGNORECASE,
)


def _render(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT), "TERM": "dumb"}
    r = subprocess.run([sys.executable, "-m", "simrollout.cli", *args, "--help"], capture_output=True, text=True,
                       env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def early_breaks(text: str) -> list[str]:
    """Lines a wrapped paragraph left short: the next line's first word would have fit."""
    out = []
    lines = text.splitlines()
    for a, b in zip(lines, lines[1:]):
        boxed = a.startswith("│") and b.startswith("│")
        if boxed:
            a, b = a[1:].rstrip("│"), b[1:].rstrip("│")
        width = len(a)
        x = len(b) - len(b.lstrip())
        word = b.strip().split(" ")[0] if b.strip() else ""
        if not word or word.startswith(("[", "-", "*")) or x < 1 or len(a.rstrip()) <= x:
            continue
        if a[x - 1 : x] != " " or a[x] == " " or (x > 1 and a[x - 2] != " " and not boxed):
            continue  # b does not continue a's text column
        if len(a.rstrip()) + 1 + len(word) <= width - 1:
            out.append(f"{a.rstrip()!r} / {b.strip()!r}")
    return out


def test_the_early_break_check_finds_one():
    box = ("│ plan   Find the cheapest substrate that meets a target,                  │\n"
           "│        counting only finished work.                                      │")  # fmt: skip
    assert early_breaks(box)
    full = ("│ plan   Find the cheapest substrate that meets a target, counting only       │\n"
            "│        finished work.                                                    │")  # fmt: skip
    assert not early_breaks(full)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_at_80_columns_has_no_markup_and_no_early_breaks(command):
    text = _render(*command.split())
    assert "``" not in text
    assert early_breaks(text) == []


def _options():
    for words, cmd in ALL.items():
        name = " ".join(words)
        for p in cmd.params:
            if p.param_type_name == "option" and p.name != "help":
                yield name, p


@pytest.mark.parametrize("command,option", [(c, p) for c, p in _options()],
                         ids=[f"{c} {p.opts[0]}" for c, p in _options()])  # fmt: skip
def test_every_option_gives_its_default_and_unit(command, option):
    help_ = option.help or ""
    shown = isinstance(option.show_default, str) or (option.show_default and option.default not in (None, ""))
    assert option.required or shown or "default" in help_.lower(), f"{command} {option.opts[0]}: no default"
    tp = option.type_descriptor.annotation
    if {int, float} & {tp, *get_args(tp)}:
        assert UNITS.search(help_), f"{command} {option.opts[0]}: no unit in {help_!r}"


HEAVY = ("numpy", "scipy", "pandas", "numba", "pyarrow", "matplotlib")


def test_help_starts_without_the_numeric_stack():
    """``simrollout --help`` (and a verb's) imports none of the libraries the simulation needs:
    each verb imports them when it runs, so the command answers in a fraction of a second."""
    for argv in (["--help"], ["run", "--help"], ["validate", "suite", "--help"]):
        got = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "simrollout.cli", *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert got.returncode == 0 and "Usage" in got.stdout
        imported = {line.rsplit("|", 1)[-1].strip() for line in got.stderr.splitlines() if "|" in line}
        assert "simrollout.cli.run" in imported  # the reading works: every verb's module is there
        assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
