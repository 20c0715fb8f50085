"""Engine calibration: records simulated from a known engine profile are fitted back to it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import simpy

from simrollout.errors import InputError
from simrollout.scenario import Engine, Inference
from simrollout.sim.serving import ServingTier
from tests.calibration.engine_fitting import engine_profile, fit_engine

TRUE = {"base": 0.03, "per_prefill_token": 0.0025, "per_prefill_attention": 1e-6, "per_decode": 0.004,
        "per_context_token": 4e-5}  # fmt: skip


def synthetic_probe(
    levels=(1, 2, 4, 8),
    prompts=(128, 512, 1024),
    output=32,
    per=8,
    overhead=0.01,
    seed=0,
    decode=False,
    decode_contexts=(16,),
    iteration=None,
    cached=False,
):
    """The probe's plan played against the engine model: records as ``probe openai`` writes them
    (``cached``: with the prompt tokens the server says it served from its cache)."""
    rng = np.random.default_rng(seed)
    spec = {
        "iteration": iteration or TRUE,
        "kv_capacity_tokens": 16384,
        "max_batch_tokens": 2048,
        "overhead": overhead,
    }
    recs = []
    for level in levels:
        env = simpy.Environment()
        tier = ServingTier(env, Inference(engines=1, engine=spec, prefix_cache=False))
        jobs = [p for _ in range(max(per, 2 * level)) for p in prompts]
        rng.shuffle(jobs)
        queue = list(enumerate(jobs))

        def worker(env=env, tier=tier, queue=queue, level=level):
            while queue:
                k, p = queue.pop(0)
                t0 = env.now
                yield env.timeout(overhead)
                req = tier.request(10_000 * level + k, int(p), output)
                yield req.done
                recs.append({"run_id": "r", "host": "h", "image": "m", "phase": "generate", "ok": True,
                             "concurrency": level, "mode": "plain", "prompt_tokens": int(p), "prompt_length": int(p),
                             "output_tokens": output, "ttft": req.first - t0, "start": 1e6 * level + t0,
                             "tpot": (req.end - req.first) / (output - 1), "latency": req.end - t0,
                             "slots": 8, "slot_context": 2048, "_file": "synthetic.jsonl"})  # fmt: skip

        for _ in range(level):
            env.process(worker())
        env.run()
        for length in decode_contexts if decode else ():
            # decode runs: ``level`` requests with long outputs started together, with a short
            # prompt, or with a longer one the engine was given once before (its cache holds it)
            env = simpy.Environment()
            tier = ServingTier(env, Inference(engines=1, engine=spec, prefix_cache=True))
            new = 8 if length > 16 else 0
            if new:
                for k in range(level):
                    tier.request(k, length, 1)
                env.run()
            reqs = [(env.now, tier.request(k, length + new, 96)) for k in range(level)]
            env.run()
            recs.extend([{"run_id": "r", "host": "h", "image": "m", "phase": "generate", "ok": True, "start": 2e6 + t0,
                      "concurrency": level, "mode": "decode", "prompt_tokens": length + new, "prompt_length": length,
                      "output_tokens": 96, "ttft": overhead + r.first - t0, "tpot": (r.end - r.first) / 95,
                      "latency": r.end - t0, "slots": 8, "slot_context": 2048, "_file": "synthetic.jsonl",
                      **({"cached_tokens": r.reuse} if cached else {})}
                         for t0, r in reqs])  # fmt: skip
    return recs


def test_the_fit_recovers_a_known_engine():
    fitted = fit_engine(synthetic_probe())
    it = fitted["engine"]["iteration"]
    for k, v in TRUE.items():
        assert it[k] == pytest.approx(v, rel=1e-3), k
    assert fitted["engine"]["overhead"] == pytest.approx(0.01, rel=1e-3)
    assert fitted["engine"]["kv_capacity_tokens"] == 8 * 2048 and fitted["engine"]["max_running"] == 8
    for key, row in fitted["fit"].items():  # the replay on the fitted profile gives the medians back
        assert abs(row["tpot_rel_error"]) < 1e-3 and abs(row["ttft_rel_error"]) < 1e-3, key
    Engine.model_validate(fitted["engine"])


def test_decode_runs_give_the_per_decode_cost_directly():
    it = fit_engine(synthetic_probe(decode=True))["engine"]["iteration"]
    for k, v in TRUE.items():
        assert it[k] == pytest.approx(v, rel=0.05), k


def test_decode_runs_at_two_prompt_lengths_read_the_context_cost_in_batches():
    recs = synthetic_probe(decode=True, decode_contexts=(16, 1024))
    fitted = fit_engine(recs)
    for k, v in TRUE.items():
        assert fitted["engine"]["iteration"][k] == pytest.approx(v, rel=0.05), k
    # the fit's report: each decode run's best round against one iteration of the profile
    rows = {k: v for k, v in fitted["fit"].items() if k.startswith("decode_")}
    assert sorted(rows) == sorted(f"decode_c{c}_p{p}" for c in (1, 2, 4, 8) for p in (16, 1024))
    assert all(abs(v["tpot_rel_error"]) < 0.02 for v in rows.values()), rows
    # lone requests whose time per token climbs faster with their context than a batch's does
    # (as on the CPU engine) no longer tilt the context cost ...
    skew = [{**r, "tpot": r["tpot"] + 1e-5 * r["prompt_tokens"]}
            if r["mode"] == "plain" and r["concurrency"] == 1 else r for r in recs]  # fmt: skip
    it = fit_engine(skew)["engine"]["iteration"]
    assert it["per_context_token"] == pytest.approx(TRUE["per_context_token"], rel=0.05)
    # ... which, without the long decode runs, the lone requests' slope carries
    short = [r for r in skew if not (r["mode"] == "decode" and r["prompt_length"] > 16)]
    assert fit_engine(short)["engine"]["iteration"]["per_context_token"] > 1.2 * TRUE["per_context_token"]


def test_resumed_requests_read_what_a_pair_with_the_cached_prefix_costs():
    """A CPU engine's short append after a long cached prefix runs far slower per pair than a
    whole prompt does: the decode runs on a held prompt (alone at concurrency 1) read it."""
    truth = {**TRUE, "per_cached_attention": 1.2e-5}
    recs = synthetic_probe(decode=True, decode_contexts=(16, 1024), iteration=truth, cached=True)
    plain = fit_engine(recs)  # by default one rate per pair; the resumed requests' miss reported
    assert "per_cached_attention" not in plain["engine"]["iteration"]
    assert plain["fit"]["resumed_c1"]["ttft_rel_error"] < -0.3
    fitted = fit_engine(recs, cached_attention=True)
    it = fitted["engine"]["iteration"]
    for k, v in truth.items():
        assert it[k] == pytest.approx(v, rel=0.05), k
    assert abs(fitted["fit"]["resumed_c1"]["ttft_rel_error"]) < 0.01
    # records that do not say what was cached: no such term (a cached pair costs a new one's)
    blind = fit_engine(
        [{k: v for k, v in r.items() if k != "cached_tokens"} for r in recs], cached_attention=True
    )
    assert "per_cached_attention" not in blind["engine"]["iteration"] and "resumed_c1" not in blind["fit"]


def shared_pairs(iteration: dict, sizes=(16, 32, 64, 128), prefix=1024, pairs=2, overhead=0.01) -> list[dict]:
    """Shared-prefix pairs as ``probe openai`` writes them, each alone on the engine model: the
    first a fresh prompt, the second resuming after its cached ``prefix``."""
    from simrollout.scenario import IterationTime

    it, recs = IterationTime.model_validate(iteration), []
    for a, size in enumerate(sizes):
        for k in range(pairs):
            n = prefix + size
            for j, (new, cached) in enumerate([(n, 0), (size, prefix)]):
                ttft = overhead + it(new, 0, 0, new * (cached + new / 2), it.cached_pairs(new, cached))
                recs.append({"run_id": "r", "host": "h", "image": "m", "phase": "generate", "ok": True,
                             "concurrency": 1, "mode": "shared_prefix", "prompt_tokens": n, "prompt_length": n,
                             "cached_tokens": cached, "output_tokens": 1, "ttft": ttft, "tpot": None,
                             "latency": ttft, "start": 3e6 + 100 * (a * pairs + k) + j, "slots": 8,
                             "slot_context": 2048, "_file": "synthetic.jsonl"})  # fmt: skip
    return recs


def test_the_fit_reads_the_append_size_where_the_cached_rate_stops():
    """Pairs of four append sizes on an engine whose cached pairs cost more below 64 tokens: the
    default fit finds the rate and the size; pairs of one size, or sizes all alike, add no term
    (as before); slow only above is not that switch and adds none either."""
    truth = {**TRUE, "per_cached_attention": 1.2e-5, "cached_attention_below": 64}
    base = synthetic_probe(decode=True)
    fitted = fit_engine(base + shared_pairs(truth))
    it = fitted["engine"]["iteration"]
    # slow at 32, not at 64: the switch at the smallest fast size
    assert fitted["fit"]["cached_attention_switch"] == {"slow_at": 32, "fast_at": 64}
    assert it["cached_attention_below"] == 64
    assert it["per_cached_attention"] == pytest.approx(1.2e-5, rel=0.05)
    for size in (16, 32, 64, 128):  # every size's resumed pairs now on the model
        assert abs(fitted["fit"][f"resumed_c1_p{1024 + size}"]["ttft_rel_error"]) < 0.03, size
    # two sizes far apart: the switch at the fast one, and the gap said (calibrate warns of it)
    wide = fit_engine(base + shared_pairs(truth, sizes=(32, 128)))
    assert wide["fit"]["cached_attention_switch"] == {"slow_at": 32, "fast_at": 128}
    assert wide["engine"]["iteration"]["cached_attention_below"] == 128
    off = fit_engine(base + shared_pairs(truth), cached_attention=False)["engine"]["iteration"]
    assert "per_cached_attention" not in off and "cached_attention_below" not in off
    for pairs in (shared_pairs(truth, sizes=(32,)), shared_pairs(TRUE), shared_pairs(truth, sizes=(16, 32))):
        assert "per_cached_attention" not in fit_engine(base + pairs)["engine"]["iteration"]
    above = {**TRUE, "per_cached_attention": 1.2e-5}  # slow at every size: one rate, asked for
    forced = fit_engine(base + shared_pairs(above), cached_attention=True)["engine"]["iteration"]
    assert forced["per_cached_attention"] == pytest.approx(1.2e-5, rel=0.05)
    assert "cached_attention_below" not in forced
    backwards = [{**r, "ttft": r["ttft"] * (3 if r["cached_tokens"] and r["prompt_tokens"] > 1100 else 1)}
                 for r in shared_pairs(TRUE)]  # fmt: skip
    assert "per_cached_attention" not in fit_engine(base + backwards)["engine"]["iteration"]


def test_the_fit_holds_under_measurement_noise():
    rng = np.random.default_rng(7)
    noisy = [{**r, "ttft": r["ttft"] * rng.lognormal(0, 0.05), "tpot": r["tpot"] * rng.lognormal(0, 0.05)}
             for r in synthetic_probe(per=16)]  # fmt: skip
    fitted = fit_engine(noisy)
    it = fitted["engine"]["iteration"]
    for k in ("per_prefill_token", "per_context_token"):
        assert it[k] == pytest.approx(TRUE[k], rel=0.10), k
    lone = TRUE["base"] + TRUE["per_decode"]
    assert it["base"] + it["per_decode"] == pytest.approx(lone, rel=0.10)
    assert it["per_decode"] == pytest.approx(
        TRUE["per_decode"], rel=0.5
    )  # weakly identified without decode runs
    for key, row in fitted["fit"].items():
        assert abs(row["tpot_rel_error"]) < 0.10, (key, row)


@pytest.mark.slow
def test_a_validation_pinned_otherwise_than_its_profiles_probe_is_warned_of(tmp_path):
    """The profile says whether its probe kept each client to a slot; an engine validation run
    the other way says so before it times anything (here: before finding no server)."""
    import yaml

    from tests.conftest import cli

    recs = synthetic_probe(levels=(1, 2))
    plain = engine_profile(recs, "e", bootstrap=0)
    assert plain["provenance"]["pinned_slots"] is False
    pinned = engine_profile([{**r, "slot": 0} for r in recs], "e", bootstrap=0)
    assert pinned["provenance"]["pinned_slots"] is True
    path = tmp_path / "pinned.yaml"
    path.write_text(yaml.safe_dump(pinned))
    args = ("validate", "--engine", "--profile", path, "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    unpinned = cli(*args)
    assert unpinned.returncode == 2 and "no OpenAI-compatible server answers" in unpinned.stderr
    said = " ".join(unpinned.stderr.split())  # as one line, however the console wrapped it
    assert "its probe ran with --pin-slots and this validation runs without" in said, said
    same = cli(*args, "--pin-slots")
    assert same.returncode == 2 and "this validation runs" not in " ".join(same.stderr.split())


def test_engine_profile_keeps_provenance(tmp_path):
    prof = engine_profile(synthetic_probe(levels=(1, 4)), "tiny")
    assert prof["provenance"]["requests"] > 0 and prof["provenance"]["probe_files"] == ["synthetic.jsonl"]
    assert set(prof["engine"]) >= {"iteration", "kv_capacity_tokens", "max_running", "overhead"}


def test_too_few_or_one_sided_records_are_refused():
    recs = synthetic_probe(levels=(1,))
    with pytest.raises(InputError, match="two concurrency levels"):
        fit_engine(recs)
    with pytest.raises(InputError, match="at least 8"):
        fit_engine(recs[:3])
    one_length = synthetic_probe(levels=(1, 2), prompts=(256,))
    with pytest.raises(InputError, match="two prompt lengths"):
        fit_engine(one_length)
    no_kv = [{**r, "slots": None} for r in synthetic_probe(levels=(1, 2))]
    with pytest.raises(InputError, match="--kv-capacity"):
        fit_engine(no_kv)
    assert fit_engine(no_kv, kv_capacity=50_000)["engine"]["kv_capacity_tokens"] == 50_000


def write_probe(path: Path, recs: list[dict]) -> Path:
    """Records as ``probe openai`` writes them, one JSON line each."""
    fields = ("run_id", "backend", "backend_version", "engine_version", "host", "image", "phase", "start",
              "latency", "concurrency", "mode", "ok", "error", "sandbox")  # fmt: skip
    with path.open("w") as f:
        for k, r in enumerate(recs):
            base = {x: r.get(x, "") for x in fields}
            base.update(start=float(k), error=None, sandbox=k, backend="openai")
            f.write(json.dumps({**base, **{x: v for x, v in r.items() if not x.startswith("_")}}) + "\n")
    return path


@pytest.mark.slow
def test_calibrate_says_where_the_cached_rate_switches_and_warns_of_a_wide_gap(tmp_path):
    from tests.conftest import cli

    truth = {**TRUE, "per_cached_attention": 1.2e-5, "cached_attention_below": 64}
    base = synthetic_probe(levels=(1, 2, 4))
    dense = cli(
        "calibrate", write_probe(tmp_path / "d.jsonl", base + shared_pairs(truth)), "-o", tmp_path / "d.yaml"
    )
    assert dense.returncode == 0, dense.stderr
    assert "for chunks under 64 new tokens (slow at 32, not at 64)" in dense.stdout, dense.stdout
    assert "priced by a guess" not in dense.stderr
    wide = cli("calibrate", write_probe(tmp_path / "w.jsonl", base + shared_pairs(truth, sizes=(32, 128))),
               "-o", tmp_path / "w.yaml")  # fmt: skip
    assert wide.returncode == 0, wide.stderr
    assert "for chunks under 128 new tokens (slow at 32, not at 128)" in wide.stdout, wide.stdout
    assert "between 32 and 128 new tokens" in wide.stderr and "priced by a guess" in wide.stderr


@pytest.mark.slow
def test_calibrate_cli_writes_an_engine_profile_a_scenario_can_use(tmp_path):
    from tests.conftest import cli, make

    probes = write_probe(tmp_path / "engine.jsonl", synthetic_probe(levels=(1, 2, 4)))
    out = tmp_path / "engine.yaml"
    res = cli("calibrate", probes, "-o", out)
    assert res.returncode == 0, res.stderr
    assert "TPOT" in res.stdout and out.is_file()
    scn = make(**{"workload.llm_time": None})
    scn["workload"].pop("llm_time")
    scn["workload"]["tokens"] = {"prompt": 100, "appended": 20, "output": 8}
    scn["workload"]["steps"] = 3
    scn["cluster"]["inference"] = {"engines": 1, "profile": str(out)}
    path = tmp_path / "s.yaml"
    import yaml

    path.write_text(yaml.safe_dump(scn))
    run = cli("run", path, "-o", tmp_path / "out")
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["summary"][0]
    assert summary["llm_requests"] == 300 and summary["ttft_p50"] > 0
    mixed = tmp_path / "mixed.jsonl"
    lines = probes.read_text().splitlines()
    sandbox = json.loads(lines[0]) | {"phase": "create"}
    mixed.write_text("\n".join(lines + [json.dumps(sandbox)]) + "\n")
    bad = cli("calibrate", mixed, "-o", tmp_path / "m.yaml")
    assert bad.returncode == 2 and "mixes engine records" in bad.stderr


def test_validate_engine_compares_with_the_median_of_repeated_real_runs():
    from simrollout.validation.validate_engine import agent_scenario, compare_engine

    root = Path(__file__).resolve().parents[2]
    scn = agent_scenario(root / "calibration/engines/llama-cpp-tiny.yaml", 2, 3, [1], 64, 16, 8,
                         {"kind": "lognormal", "median": 0.05, "p99": 0.5})  # fmt: skip
    rows = []
    for run, (lat, end) in enumerate([(1.0, 10.0), (3.0, 30.0), (2.0, 50.0)]):  # three real runs
        rows += [{"concurrency": 1, "trajectory": i, "step": s, "start": 0.0, "latency": lat, "run": run,
                  "ttft": lat / 4, "output_tokens": 8} for i in range(2) for s in range(3)]  # fmt: skip
        rows += [{"concurrency": 1, "trajectory": i, "step": -1, "start": end, "latency": 0.0, "run": run,
                  "ttft": 0.0, "output_tokens": 0} for i in range(2)]  # fmt: skip
    table = compare_engine(pd.DataFrame(rows), scn).set_index("metric")
    assert table.loc["request_p50", "real"] == 2.0 and table.loc["makespan", "real"] == 30.0
    # where a request goes, without a target: first token, then each of the 7 after it
    assert table.loc["ttft_p50", "real"] == 0.5 and table.loc["tpot_p50", "real"] == pytest.approx(1.5 / 7)
    assert table.loc[["ttft_p50", "tpot_p50"], "target_pct"].isna().all()
    assert (table.loc["makespan", "real_min"], table.loc["makespan", "real_max"]) == (10.0, 50.0)
    assert (table.runs == 3).all()
    sim = table.loc["makespan", "simulated"]
    assert table.loc["makespan", "diff_pct"] == pytest.approx(100 * (sim - 30.0) / 30.0)


def test_resumed_pairs_of_several_append_sizes_are_read_apart():
    """Pairs of two append sizes: each size's resumed requests get their own row (first token real
    and predicted, and the cost per new x cached pair beyond the model's); one size adds none."""
    import warnings

    from simrollout.calibration.probe import read_records
    from tests.conftest import ROOT

    recs = [r for r in read_records([ROOT / "tests/calibration/records/llama-cpp-tiny-m.jsonl"]) if r["ok"]]
    pairs = [r for r in recs if r["mode"] == "shared_prefix"]
    length = pairs[0]["prompt_length"]
    longer = [{**r, "prompt_length": length + 64, "prompt_tokens": r["prompt_tokens"] + 64,
               "ttft": r["ttft"] + (1.0 if k % 2 else 0.0), "start": r["start"] + 1e4}
              for k, r in enumerate(pairs)]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = engine_profile(recs, "e", bootstrap=0)
        two = engine_profile(recs + longer, "e", bootstrap=0)
    assert not [k for k in one["fit"] if k.startswith("resumed_c1_p")]  # one size: as before
    a, b = two["fit"][f"resumed_c1_p{length}"], two["fit"][f"resumed_c1_p{length + 64}"]
    assert a["n"] == b["n"] == len(pairs) // 2 and b["new_tokens"] == a["new_tokens"] + 64
    assert b["ttft_median"] == pytest.approx(a["ttft_median"] + 1.0, abs=1e-6)
    for row in (a, b):  # what the real first token takes beyond the model's, per new x cached pair
        want = (row["ttft_median"] - row["ttft_predicted"]) / (row["new_tokens"] * row["cached_tokens"])
        assert row["per_pair_beyond_model"] == pytest.approx(want, rel=0.1), row
    assert b["per_pair_beyond_model"] > a["per_pair_beyond_model"]  # a second more, far above the model's
