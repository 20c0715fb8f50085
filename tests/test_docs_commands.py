"""Every ``simrollout ...`` command the README and docs/examples.md show a user (their ```bash
blocks) parses against the command as shipped: its verb, its options and their values; every file
it reads, there or quoted in the text, is in the repository; the cheap ones run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from simrollout.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/examples.md")
OUTPUTS = {"-o", "--out", "--timeline", "--record"}  # options naming what a command writes
USERS_OWN = {"scenarios/mine.yaml"}  # files the text asks the user to make


SHELL = {"|", ">", ">>", "2>", "2>&1", "<"}  # what the shell does with a command's streams


def commands(doc: str) -> list[tuple[str, list[str]]]:
    """``(doc:line, argv)`` of every ``simrollout`` command in the ```bash blocks of ``doc``
    (continued lines joined, ``&&`` chains split, comments and the shell's redirections and pipes
    dropped)."""
    text = (ROOT / doc).read_text()
    out = []
    for block in re.finditer(r"```bash\n(.*?)```", text, re.S):
        line = text[: block.start()].count("\n") + 2
        for chunk in block.group(1).replace("\\\n", " ").splitlines():
            for part in re.split(r"\s&&\s", chunk):
                argv = shlex.split(part, comments=True)
                cut = [i for i, a in enumerate(argv) if a in SHELL or a.startswith((">", "2>"))]
                argv = argv[: cut[0]] if cut else argv
                if argv and argv[0] == "simrollout":
                    out.append((f"{doc}:{line}", argv[1:]))
    return out


ALL = [c for doc in DOCS for c in commands(doc)]
ROOT_COMMAND = typer.main.get_command(app)


def resolve(argv: list[str]):
    """The click command ``argv`` names (sub-verbs followed) and the arguments left for it."""
    cmd, names = ROOT_COMMAND, []
    while hasattr(cmd, "commands") and argv and argv[0] in cmd.commands:
        names.append(argv[0])
        cmd, argv = cmd.commands[argv[0]], argv[1:]
    return cmd, names, argv


def test_the_docs_show_commands_of_every_kind():
    verbs = {tuple(resolve(argv)[1]) for _, argv in ALL}
    assert len(ALL) >= 20 and {("run",), ("sweep",), ("plan",), ("probe",), ("validate", "suite")} <= verbs


@pytest.mark.parametrize("where,argv", ALL, ids=[f"{w}:{' '.join(a[:2])}" for w, a in ALL])
def test_a_documented_command_parses(where, argv):
    cmd, names, rest = resolve(argv)
    assert names, f"{where}: no verb `{argv[0]}`"
    try:
        ctx = cmd.make_context(" ".join(names), list(rest))
    except Exception as exc:  # click's usage errors: an unknown option, a bad value
        pytest.fail(f"{where}: `simrollout {shlex.join(argv)}`: {exc}")
    leftover = [*getattr(ctx, "protected_args", []), *ctx.args]  # a group's (validate's) own options
    assert ctx.params and not leftover, f"{where}: `simrollout {shlex.join(argv)}` leaves {leftover}"


def _inputs(argv: list[str]) -> list[str]:
    """The paths a command reads: arguments that look like files, not the values of an output
    option."""
    out = []
    for prev, arg in zip([""] + argv, argv):
        if prev in OUTPUTS or arg.startswith("-") or "://" in arg:
            continue
        if "/" in arg or re.search(r"\.(ya?ml|jsonl?|csv)$", arg):
            out.append(arg.split("=", 1)[-1] if "=" in arg else arg)
    return out


def test_every_file_a_documented_command_reads_is_shipped():
    written: set[str] = set()
    missing = []
    for where, argv in ALL:
        for path in _inputs(argv):
            if not (ROOT / path).exists() and path not in written | USERS_OWN:
                missing.append(f"{where}: {path}")
        written |= {b for a, b in zip(argv, argv[1:]) if a in OUTPUTS}  # an earlier step's output
    assert not missing, missing


def in_the_text(doc: str) -> list[list[str]]:
    """The argv of every ``simrollout`` command quoted in the prose of ``doc`` (`...` outside code
    blocks), in order."""
    text = re.sub(r"```.*?```", "", (ROOT / doc).read_text(), flags=re.S)
    return [
        shlex.split(m.group(1).replace("\n", " "))[1:] for m in re.finditer(r"`(simrollout [^`]*)`", text)
    ]


@pytest.mark.parametrize("doc", DOCS)
def test_every_file_a_command_in_the_text_reads_is_shipped(doc):
    written: set[str] = set()
    missing = []
    for argv in in_the_text(doc):
        missing += [p for p in _inputs(argv) if not (ROOT / p).exists() and p not in written]
        written |= {b for a, b in zip(argv, argv[1:]) if a in OUTPUTS}
    assert len(in_the_text(doc)) >= 4 and not missing, missing


def test_the_reader_finds_paths_and_skips_outputs():
    argv = shlex.split("run scenarios/a.yaml --set x.y=1 -o out/b.yaml --timeline t/trace.json")
    assert _inputs(argv) == ["scenarios/a.yaml"]


@pytest.mark.parametrize("verb", sorted({" ".join(resolve(a)[1]) for _, a in ALL}))
def test_every_documented_verb_answers_help(verb):
    got = CliRunner().invoke(app, [*verb.split(), "--help"], env={"COLUMNS": "240"})
    assert got.exit_code == 0 and "Usage" in got.output, got.output
    cmd = resolve(verb.split())[0]
    for opt in (
        o for p in cmd.params if not getattr(p, "hidden", False) for o in p.opts if o.startswith("--")
    ):
        assert opt in got.output, f"{verb} --help leaves out {opt}"


@pytest.mark.slow
def test_the_documented_task_image_run_runs(tmp_path):
    """The cheapest documented simulation (docs/examples.md: 8,000 trajectories, 6 s)."""
    argv = next(a for _, a in ALL if a[:2] == ["run", "scenarios/task_images.yaml"])
    got = CliRunner().invoke(app, [*argv, "--out", str(tmp_path), "--no-records"])
    assert got.exit_code == 0, got.output
    import pandas as pd
    import yaml

    summary = pd.read_csv(tmp_path / "summary.csv")
    names = {s["name"] for s in yaml.safe_load((ROOT / argv[1]).read_text())["substrates"]}
    assert set(summary["substrate"]) == names and (summary["worker_hours"] > 0).all()
