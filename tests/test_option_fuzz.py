"""Bad values for every option of ``probe`` and ``validate``, read from the app itself (a new option
is covered the next run): a number that is not one, negative, infinite or NaN is refused with exit
2 and a message naming the option; any other value (a huge count, an empty or odd string, a missing
path) is accepted or refused the same way, and never a traceback or warning. In process: each
command runs up to a refusal that comes before anything real (no cluster, no server listening)."""

from __future__ import annotations

import warnings
from typing import get_args

import pytest
import typer
from typer.testing import CliRunner

from simrollout.cli import app
from simrollout.errors import InputError
from tests.conftest import ROOT, shipped_files

GROUP = typer.main.get_command(app)
CTX = typer.Context(GROUP)
PROFILE = ROOT / "calibration/profiles" / sorted(shipped_files("calibration/profiles", "*.yaml"))[0]
ENGINE = ROOT / "calibration/engines/llama-cpp-tiny.yaml"
NOWHERE = "http://127.0.0.1:9/v1"  # nothing listens: a command that gets this far accepted its options
# per command and path: the arguments that reach the refusal, and the words that refusal says
SENTINELS = {
    ("probe", "sandbox"): (["probe", "kubernetes"], "no cluster"),
    ("probe", "openai"): (["probe", "openai", "--base-url", NOWHERE], "no OpenAI-compatible server answers"),
    ("validate", "sandbox"): (["validate", "--profile", str(PROFILE), "--backend", "kubernetes"], "no cluster"),
    ("validate", "engine"): (["validate", "--engine", "--profile", str(ENGINE), "--base-url", NOWHERE],
                             "no OpenAI-compatible server answers"),
}  # fmt: skip
FIXED = {"--profile", "--backend", "--base-url", "--engine", "--help", "--against", "--iterations"}


def _paths(command: str, option) -> list[str]:
    """The paths of ``command`` an option applies to, as its help says: 'openai: ...' (probe) or
    '--engine: ...' (validate) one path only; probe's others the sandboxes' (but --out and
    --concurrency, both); validate's others both."""
    help_, other = option.help or "", "openai" if command == "probe" else "engine"
    if help_.startswith(("openai", "--engine")):
        return [other]
    if command == "probe" and option.opts[0] not in ("--out", "--concurrency"):
        return ["sandbox"]
    return ["sandbox", other]


def _values(option) -> list[tuple[str, str]]:
    tp = option.type_descriptor.annotation
    kinds = {tp, *get_args(tp)}
    if int in kinds:  # counts and seeds
        return [("abc", "invalid"), ("-1", "invalid"), (str(10**30), "maybe")]
    if float in kinds:  # seconds
        return [
            ("abc", "invalid"),
            ("-1", "invalid"),
            ("inf", "invalid"),
            ("nan", "invalid"),
            ("1e300", "maybe"),
        ]
    if option.is_flag:
        return []
    return [("", "maybe"), ("x,,0,-1", "maybe"), ("/nonexistent/h33", "maybe")]


def cases():
    for command in ("probe", "validate"):
        for p in GROUP.get_command(CTX, command).params:
            if p.param_type_name != "option" or p.opts[0] in FIXED:
                continue
            for path in _paths(command, p):
                for value, expect in _values(p):
                    yield command, path, p.opts[0], value, expect, p.opts


CASES = list(cases())


@pytest.mark.parametrize("command,path,option,value,expect,opts", CASES,
                         ids=[f"{c}-{p}-{o}={v[:12]}" for c, p, o, v, _, _ in CASES])  # fmt: skip
def test_a_bad_option_value_is_refused_naming_the_option(command, path, option, value, expect, opts, tmp_path,
                                                          monkeypatch):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    args, sentinel = SENTINELS[command, path]
    out = ["-o", str(tmp_path / "p.jsonl")] if command == "probe" and option not in ("--out", "-o") else []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = CliRunner().invoke(app, [*args, *out, option, value])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        assert isinstance(r.exception, InputError), f"a traceback: {r.exception!r}"
        msg = str(r.exception)
        assert "\n" not in msg.strip()
        names = [o for o in opts if o in msg]
        refused = bool(names)
        assert refused or (expect == "maybe" and sentinel in msg), msg
        return
    assert r.exit_code == 2, (r.exit_code, r.output[-400:])  # click's own refusal: not a number
    assert option in r.output and "Traceback" not in r.output


def test_the_cases_cover_every_numeric_option():
    names = {o for _, _, o, _, _, _ in CASES}
    assert {"--sandboxes", "--commands", "--gap", "--think", "--image-mb", "--output-tokens", "--requests",
            "--trajectories", "--steps", "--tool-median", "--tool-p99", "--seed", "--repeat", "--api-key-env",
            "--concurrency", "--request-extra"} <= names  # fmt: skip
