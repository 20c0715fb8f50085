"""GPU engine profiles against published serving tables (validation/engines_gpu/)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest

from simrollout.errors import InputError
from simrollout.scenario import Engine
from simrollout.scenario.files import load_engine_profile
from simrollout.validation import serving_tables as st

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "validation" / "engines_gpu"


@pytest.fixture(scope="module")
def specs():
    return st.load_specs(HERE / "specs.yaml")


@pytest.fixture(scope="module")
def rows():
    return st.load_rows(HERE / "published.csv")


def test_h20_profile_rederived_matches_recorded_predictions_and_shipped_profile(specs, rows):
    name = "qwen3-8b-h20-sglang"
    eff = st.fit(specs, name, rows)
    at = rows[rows["profile"] == name]
    pred = st.predict(specs, name, at, eff)
    recorded = pd.read_csv(HERE / "predictions.csv")
    recorded = recorded[recorded["profile"] == name]
    assert len(recorded) == len(at) == 6
    assert pred == pytest.approx(recorded["predicted"].to_numpy(), rel=1e-4)
    held = (at["split"] == "held_out").to_numpy()
    errors = abs(pred / at["value"].to_numpy() - 1)[held]
    assert held.sum() == 4 and errors.mean() <= 0.15
    shipped = load_engine_profile(ROOT / "calibration" / "engines" / f"{name}.yaml")
    assert shipped.engine == st.engine_spec(specs, name, eff)
    assert shipped.provenance["efficiencies"]["bandwidth"] == eff["bandwidth"]


def test_one_request_takes_its_prefill_chunks_then_its_decodes():
    it = {"base": 0.01, "per_prefill_token": 1e-5, "per_context_token": 1e-7, "per_decode": 1e-4}
    eng = Engine.model_validate({"iteration": it, "kv_capacity_tokens": 100_000, "max_batch_tokens": 1000})
    out = st.simulate(eng, input_len=2500, output_len=11, concurrency=1, requests=1)
    prefill = 3 * 0.01 + 2500 * 1e-5  # three chunks: 1000, 1000, 500 tokens
    decodes = sum(0.01 + 1e-4 + 1e-7 * (2501 + k) for k in range(10))  # context grows a token each
    assert out["output_tokens_per_s"] == pytest.approx(11 / (prefill + decodes))
    assert out["total_tokens_per_s"] == pytest.approx(2511 / (prefill + decodes))
    assert out["itl_median_ms"] == pytest.approx(decodes / 10 * 1000)


def test_requests_in_flight_share_iterations():
    it = {"base": 0.01, "per_prefill_token": 0.0, "per_decode": 0.001}
    eng = Engine.model_validate({"iteration": it, "kv_capacity_tokens": 100_000})
    one = st.simulate(eng, 10, 101, concurrency=1, requests=4)
    four = st.simulate(eng, 10, 101, concurrency=4, requests=4)
    assert one["itl_median_ms"] == pytest.approx(11.0)
    assert four["itl_median_ms"] > one["itl_median_ms"]
    assert four["output_tokens_per_s"] > 3 * one["output_tokens_per_s"]


def test_tensor_parallel_sums_gpus_at_the_published_efficiency(specs):
    eff = {"bandwidth": 0.5, "prefill": 0.5, "decode": 0.5}
    one = st.engine_spec(specs, "qwen3-32b-h20-sglang", eff)
    two = st.engine_spec(specs, "qwen3-32b-h20-sglang-tp2", eff)
    speedup = one["iteration"]["base"] / two["iteration"]["base"]
    assert speedup == pytest.approx(2 * specs["tp_efficiency"], rel=1e-3)
    assert two["gpus"] == 2 and two["kv_capacity_tokens"] > 2 * one["kv_capacity_tokens"]


def test_a_bad_table_names_the_file_line_and_column(tmp_path):
    bad = tmp_path / "published.csv"
    bad.write_text(
        "profile,input_len,output_len,concurrency,requests,metric,value,split\n"
        "p,1,2048,1,1,total_tokens_per_s,81.7,fit\np,6144,2048,1,1,tokens,296,held_out\n"
    )
    with pytest.raises(InputError, match=r"published.csv: line 3, column 'metric'"):
        st.load_rows(bad)
    bad.write_text("profile,input_len\np,1\n")
    with pytest.raises(InputError, match=r"missing column\(s\) output_len"):
        st.load_rows(bad)


def test_rows_of_a_profile_specs_do_not_define_are_refused(specs, rows):
    extra = pd.concat([rows, rows.head(1).assign(profile="qwen3-8b-b200")], ignore_index=True)
    with pytest.raises(InputError, match="qwen3-8b-b200 that specs.yaml does not define"):
        st.evaluate(specs, extra)


def test_predict_script_exits_2_with_one_paragraph_on_bad_specs(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("predict", HERE / "predict.py")
    predict = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(predict)
    (tmp_path / "specs.yaml").write_text(
        (HERE / "specs.yaml").read_text().replace("bandwidth: 3.35e12", "x: 1")
    )
    (tmp_path / "published.csv").write_text((HERE / "published.csv").read_text())
    monkeypatch.setattr(predict, "HERE", tmp_path)
    assert predict.main([]) == 2
    err = capsys.readouterr().err
    assert "field 'gpus.h100.bandwidth': expected a number" in err and "Traceback" not in err


@pytest.mark.slow
def test_every_profile_within_15_percent_held_out_and_as_recorded(specs, rows):
    pred, effs = st.evaluate(specs, rows)
    recorded = pd.read_csv(HERE / "predictions.csv")
    assert pred["predicted"].to_numpy() == pytest.approx(recorded["predicted"].to_numpy(), rel=1e-4)
    held = st.mape(pred).query("split == 'held_out'").set_index("profile")["mape_pct"]
    assert len(held) == len(specs["profiles"]) >= 6
    assert (held <= 15).all(), held
    assert effs["qwen3-8b-h100-vllm-tp2"]["prefill"] == effs["qwen3-8b-h100-vllm"]["prefill"]  # prefill_from
    for name, eff in effs.items():
        shipped = load_engine_profile(ROOT / "calibration" / "engines" / f"{name}.yaml")
        assert shipped.engine == st.engine_spec(specs, name, eff)
    again, _ = st.evaluate(specs, rows)  # same inputs, same numbers
    assert again["predicted"].tolist() == pred["predicted"].tolist()
    assert not any(math.isnan(x) for x in pred["predicted"])
