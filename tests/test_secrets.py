"""Credentials never reach a record, a profile, a validation record, a log line or an error: the
API key of an OpenAI-compatible server (sent as a bearer token), a user and password in its URL,
and the SDK backends' keys (simrollout.redact)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from simrollout.redact import scrub, strip_url
from tests.conftest import ROOT

KEY = "sk-h33-bearer-7f3a9c1e5d"
URL_PASSWORD = "pw-h33-in-the-url"
SDK = {"DAYTONA_API_KEY": "dtn-h33-4b8e2a", "E2B_API_KEY": "e2b-h33-9d1c7f", "AWS_ACCESS_KEY_ID": "AKIAH33EXAMPLE",
       "AWS_SECRET_ACCESS_KEY": "aws-h33-secret-0c5b", "AWS_SESSION_TOKEN": "aws-h33-session-6e2d"}  # fmt: skip
SECRETS = [KEY, URL_PASSWORD, *SDK.values()]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return {**env, **SDK, "PYTHONPATH": str(ROOT), **extra}


def _cli(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simrollout.cli", *map(str, args)], capture_output=True,
                          text=True, env=env or _env(), cwd=ROOT)  # fmt: skip


def _leaks(folder: Path, *outputs: str) -> list[str]:
    """Every place a secret (or the URL's user) shows up: files under ``folder``, and ``outputs``."""
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.name}: {s}" for s in SECRETS + ["alice@"] if s.encode() in data]
    for k, text in enumerate(outputs):
        found += [f"output {k}: {s}" for s in SECRETS + ["alice@"] if s in text]
    return found


def test_scrub_masks_every_credential_variable_and_url_userinfo(monkeypatch):
    for k, v in SDK.items():
        monkeypatch.setenv(k, v)
    text = f"boto said {SDK['AWS_SECRET_ACCESS_KEY']} via https://bob:{URL_PASSWORD}@api.example.com/v1 ok"
    clean = scrub({"error": text, "list": [SDK["E2B_API_KEY"]], SDK["DAYTONA_API_KEY"]: 1})
    assert clean == {"error": "boto said *** via https://api.example.com/v1 ok", "list": ["***"], "***": 1}
    assert strip_url(f"https://bob:{URL_PASSWORD}@h:8443/v1") == ("https://h:8443/v1", ("bob", URL_PASSWORD))
    assert strip_url("http://127.0.0.1:8089/v1") == ("http://127.0.0.1:8089/v1", None)


@pytest.mark.slow
def test_sdk_keys_never_reach_probe_records_or_profiles(tmp_path):
    """A real probe (process backend) whose timed command and profile name carry the keys: the
    records, the profile and the output hold none of them."""
    probes = tmp_path / "p.jsonl"
    r = _cli("probe", "process", "--command", f"echo {SDK['E2B_API_KEY']} {SDK['DAYTONA_API_KEY']}",
             "--concurrency", "1", "--sandboxes", "12", "--commands", "1", "--reset", "", "--image-mb", "0",
             "-o", probes)  # fmt: skip
    assert r.returncode == 0, r.stderr[-800:]
    assert '"command": "echo *** ***"' in probes.read_text()
    c = _cli(
        "calibrate", probes, "-o", tmp_path / "prof.yaml", "--name", f"box-{SDK['AWS_SECRET_ACCESS_KEY']}"
    )
    assert c.returncode == 0, c.stderr[-800:]
    assert "name: box-***" in (tmp_path / "prof.yaml").read_text()
    bad = _cli("calibrate", tmp_path / f"{SDK['AWS_SESSION_TOKEN']}.jsonl", "-o", tmp_path / "x.yaml")
    assert bad.returncode == 2 and "***.jsonl: file not found" in bad.stderr
    assert _leaks(tmp_path, r.stdout, r.stderr, c.stdout, c.stderr, bad.stderr) == []


def _llama_dir() -> Path:
    return Path(os.environ.get("SIMROLLOUT_LLAMA_DIR", Path.home() / ".cache/simrollout/llama"))


@pytest.fixture
def keyed_server():
    """A llama-server of its own that requires the API key (scripts/start-llama-server.sh builds the
    binary and the model; skipped with the reason on a machine without them, required in CI)."""
    d = _llama_dir()
    binary, model = d / "build/bin/llama-server", d / "simrollout-tiny.gguf"
    if not (binary.is_file() and model.is_file()):
        reason = (
            f"no llama-server build at {binary} (or model {model.name}); run scripts/start-llama-server.sh"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(d / f"server-keyed-{port}.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "8192", "-np",
                             "2", "-t", "2", "--cache-ram", "0", "--api-key", KEY],
                            env={**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}, stdout=log,
                            stderr=subprocess.STDOUT)  # fmt: skip
    try:
        for _ in range(120):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            pytest.fail(f"the keyed llama-server did not start; see {log.name}")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_probe_and_validate_an_endpoint_behind_a_key_and_record_no_secret(
    keyed_server, tmp_path, monkeypatch
):
    url = f"http://alice:{URL_PASSWORD}@127.0.0.1:{keyed_server}/v1"
    small = ["--concurrency", "1", "--prompts", "16,64", "--output-tokens", "4", "--requests", "1"]
    # no key: refused before anything is timed, and said how to give one; a wrong key: refused
    nokey = _cli("probe", "openai", "--base-url", url, *small, "-o", tmp_path / "none.jsonl")
    assert nokey.returncode == 2 and "needs an API key" in nokey.stderr and "--api-key-env" in nokey.stderr
    wrong = _cli("probe", "openai", "--base-url", url, "--api-key-env", "WRONG", *small, "-o", tmp_path / "w.jsonl",
                 env=_env(WRONG="sk-not-the-key"))  # fmt: skip
    assert wrong.returncode == 2 and "the API key in WRONG was refused" in wrong.stderr
    assert not (tmp_path / "none.jsonl").exists() or "ok" not in (tmp_path / "none.jsonl").read_text()
    # the right key: a probe (the CLI's server, a small plan: this machine's CPU serves it), then
    # its profile and a recorded validation through the CLI
    from simrollout.calibration.engine_probe import EnginePlan, probe_engine
    from simrollout.cli.options import _server

    for k, v in {**SDK, "MYKEY": KEY}.items():
        monkeypatch.setenv(k, v)
    probes = tmp_path / "probe.jsonl"
    sys.path.insert(0, str(ROOT / "scripts"))
    from tiny_gguf import ascii_only_bias  # whole characters: every token streamed as it comes

    extra = {"logit_bias": ascii_only_bias()}
    plan = EnginePlan(levels=(1, 2), prompts=(16, 64), output=4, requests=2, decode_output=8, decode_rounds=1,
                      decode_contexts=(16,), shared_prefix=0, extra=extra)  # fmt: skip
    probe_engine(_server(url, "default", "MYKEY"), plan, probes)
    text = probes.read_text()
    assert text.count('"ok": true') == text.count("\n") >= 8 and f'"host": "127.0.0.1:{keyed_server}"' in text
    env = _env(MYKEY=KEY)
    c = _cli("calibrate", probes, "-o", tmp_path / "engine.yaml", env=env)
    assert c.returncode == 0, c.stderr[-800:]
    v = _cli("validate", "--engine", "--profile", tmp_path / "engine.yaml", "--base-url", url, "--api-key-env",
             "MYKEY", "--trajectories", "1", "--steps", "1", "--concurrency", "1", "--record", tmp_path / "rec",
             "--request-extra", json.dumps(extra), env=env)  # fmt: skip
    assert v.returncode in (0, 1), v.stderr[-800:]  # 1: a target missed on this busy machine
    assert (tmp_path / "rec" / "machine.json").is_file() and f"127.0.0.1:{keyed_server}/v1" in v.stdout
    outputs = [x for r in (nokey, wrong, c, v) for x in (r.stdout, r.stderr)]
    assert _leaks(tmp_path, *outputs) == []
