"""Single iterations timed on the real engine (llama.cpp's server, the tiny model) beside a
profile's cost for them: `validate --engine --iterations`."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest

from simrollout.scenario import Engine, load_engine_profile
from tests.conftest import ROOT, cli

sys.path.insert(0, str(ROOT / "scripts"))
from tiny_gguf import ascii_only_bias  # noqa: E402

PROFILE = ROOT / "tests" / "calibration" / "records" / "llama-cpp-tiny-j.yaml"


def test_iterations_timed_on_the_server_beside_the_profile(llama_server, tmp_path):
    res = cli("validate", "--engine", "--iterations", "--profile", PROFILE, "--base-url", llama_server,
              "--model", "tiny", "--concurrency", "1,2", "--pin-slots", "--request-extra",
              json.dumps({"logit_bias": ascii_only_bias()}), "--record", tmp_path / "rec")  # fmt: skip
    assert res.returncode == 0, res.stderr  # no targets: a check never fails on a difference
    table = pd.read_csv(tmp_path / "rec" / "iterations.csv")
    info = json.loads((tmp_path / "rec" / "iterations.json").read_text())
    assert info["profile"] == PROFILE.name and info["plan"]["decodes"] == [1, 2] and info["plan"]["pin_slots"]
    engine = Engine.model_validate(load_engine_profile(PROFILE).engine)
    it = engine.iteration
    decode = table[table.metric.str.startswith("decode")]
    assert sorted(decode.metric.unique()) == [
        "decode, 1024 cached",
        "decode, 16 cached",
        "decode, 512 cached",
    ]
    for r in decode.itertuples():
        context = int(r.metric.split()[1])
        # the warm-up put each prompt in the server's cache: the batch ran decodes, no prefill
        assert r.cached_min >= context, r
        # the profile's iteration for d decodes whose contexts are the prompt, its suffix and
        # half the output (48), as the server counted them (it adds a token or two)
        d = r.concurrency
        assert it(0, d, d * (context + 8 + 24)) <= r.simulated <= it(0, d, d * (context + 8 + 24 + 4)), r
        assert r.real_min <= r.real <= r.real_max and r.runs >= 2, r
    first = table[table.metric.str.startswith("first token")].set_index("metric")
    assert sorted(first.index) == sorted(
        f"first token, +{n} after {c}" for n in (96, 384) for c in (512, 1024)
    )
    for c in (512, 1024):  # alone, after a prefix the server holds: one prefill of the new tokens
        short, long = first.loc[f"first token, +96 after {c}"], first.loc[f"first token, +384 after {c}"]
        assert short.cached_min >= c and long.cached_min >= c
        assert short.real < long.real and short.simulated < long.simulated
        # the profile's overhead and one iteration of the new tokens after the cached ones, as
        # the server counted them (it adds a token or two)
        fixed = engine.overhead + it.base
        assert fixed + it.prefill_seconds(96, c) <= short.simulated <= fixed + it.prefill_seconds(100, c + 4)
    mixed = table[table.metric.str.startswith("mixed")]
    assert set(mixed.metric) == {"mixed, +96 after 512", "mixed, +384 after 512"}
    assert (mixed.concurrency == 2).all()
    lone = decode[(decode.concurrency == 1) & (decode.metric == "decode, 512 cached")].real.iloc[0]
    by_new = mixed.set_index("metric").real
    # a prefill in the iteration makes the decode's gap longer than its lone iterations, and a
    # longer prefill longer still
    assert lone < by_new["mixed, +96 after 512"] < by_new["mixed, +384 after 512"], table
    assert "decode, 512 cached" in res.stdout and "no targets" in res.stdout


@pytest.mark.slow
def test_iterations_and_pinned_slots_need_an_engine_validation(tmp_path):
    for extra in (["--iterations"], ["--pin-slots"]):
        res = cli("validate", *extra, "--profile", PROFILE)
        assert res.returncode == 2 and "give --engine" in res.stderr and "Traceback" not in res.stderr
    res = cli("validate", "--engine", "--iterations", "--profile", PROFILE, "--against",
              ROOT / "tests" / "calibration" / "records" / "engine-llama-cpp-sitting-12")  # fmt: skip
    assert res.returncode == 2 and "takes no --pin-slots or --iterations" in res.stderr
    res = cli("probe", "docker", "--pin-slots", "-o", tmp_path / "p.jsonl")
    assert res.returncode == 2 and "applies to 'probe openai', not docker" in res.stderr
    assert not (tmp_path / "p.jsonl").exists()


@pytest.mark.slow
def test_iterations_refuse_an_unreachable_server_and_a_batch_larger_than_the_engine(tmp_path, monkeypatch):
    import pytest

    from simrollout.calibration.engine_probe import Server
    from simrollout.errors import InputError
    from simrollout.validation.iteration_check import IterationPlan, iteration_check

    res = cli("validate", "--engine", "--iterations", "--profile", PROFILE, "--base-url", "http://127.0.0.1:9/v1",
              "--record", tmp_path / "rec")  # fmt: skip
    assert res.returncode == 2 and "no OpenAI-compatible server answers" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "rec").exists()
    engine = Engine.model_validate(load_engine_profile(PROFILE).engine)  # 8 slots
    server = Server("http://127.0.0.1:9/v1", "tiny")
    monkeypatch.setattr(server, "check", lambda: None)  # as if it answered
    with pytest.raises(InputError, match=r"at most 8 requests at once; decode batches of \[16\]"):
        iteration_check(server, engine, IterationPlan(decodes=(1, 16)), {})
