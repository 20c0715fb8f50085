"""The drift a probe's reference blocks read, folded into the refits and warned about."""

import json
import warnings

import numpy as np
import pytest

from simrollout.calibration.backends import get_backend
from simrollout.calibration.calibrate import calibrate
from simrollout.calibration.drift import NOT_MEASURED, TARGETS, reference_drift, split_reference
from simrollout.calibration.probe import ProbePlan, probe, read_records
from simrollout.scenario import Substrate
from tests.conftest import cli
from tests.synthetic_probe import simulate_probe

# teardown a constant and uncontended: its reference medians show the injected drift exactly
SUB = Substrate.model_validate({
    "name": "s", "cold_start": {"kind": "lognormal", "median": 0.3, "p99": 0.9},
    "exec_overhead": {"kind": "lognormal", "median": 0.05, "p99": 0.15}, "teardown": 0.1,
    "contention": {"create": 0.03, "exec": 0.01},
})  # fmt: skip
LEVELS = (1, 2, 4, 8)


def records(drift: float, seed: int = 0) -> list[dict]:
    recs = simulate_probe(SUB, levels=LEVELS, sandboxes=16, commands=5, seed=seed, reference=8, drift=drift)
    for k, r in enumerate(recs):
        r["_file"], r["_line"] = "synthetic.jsonl", k
    return recs


def test_the_schedule_puts_reference_blocks_at_the_start_middle_and_end():
    order = ProbePlan(levels=LEVELS, reference=8).schedule()
    assert [(c, b) for c, _, b in order] == [(1, 0), (8, 0), (1, None), (2, None), (1, 1), (8, 1), (4, None),
                                             (8, None), (1, 2), (8, 2)]  # fmt: skip
    assert [n for c, n, b in order if b is not None] == [8, 8] * 3
    assert ProbePlan(levels=LEVELS).schedule() == [(c, ProbePlan().count(c), None) for c in LEVELS]


@pytest.mark.parametrize("drift", [0.0, 0.3])
def test_an_injected_linear_drift_is_read_from_the_reference_blocks(drift):
    d = reference_drift(split_reference(records(drift))[0])
    parts = len(ProbePlan(levels=LEVELS, reference=8).schedule()) - 1
    # the first level's blocks ran as parts 0, 4 and 8 of 0..9; the top level's as 1, 5 and 9
    want = {1: [1 + drift * k / parts for k in (0, 4, 8)], 8: [1 + drift * k / parts for k in (1, 5, 9)]}
    td = d["teardown"]
    for level, factors in want.items():
        got = [td["by_level"][level][b] for b in (0, 1, 2)]
        np.testing.assert_allclose(got, [0.1 * f for f in factors], rtol=1e-5)  # stored to 6 digits
    assert td["start"] == pytest.approx(0.1) and td["end"] == pytest.approx(0.1 * want[1][2], rel=1e-5)
    assert td["max_rel"] == pytest.approx(max(f[2] / f[0] - 1 for f in want.values()), abs=1e-4)
    assert td["exceeds_target"] is (td["max_rel"] > TARGETS["teardown"])
    # the noisy phases: their end block slower than their start by about the drift
    ends = [d[ph]["rel_by_level"][1][2] for ph in ("create", "exec")]
    assert all(abs(e - want[1][2] + 1) < 0.15 for e in ends), ends


def test_the_drift_scales_the_refits_and_the_fit_leaves_the_reference_blocks_out():
    recs = records(0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof, _ = calibrate(recs, "s", bootstrap=8)
        plain, _ = calibrate([r for r in recs if not r["reference"]], "s")
    assert prof["substrate"] == plain["substrate"]  # reference records are not in the fit
    unc = prof["uncertainty"]
    assert unc["drift_applied"] and set(unc["drift"]) == {"create", "exec", "teardown"}
    lo, hi = unc["drift"]["teardown"]["factor_range"]
    factors = [s["teardown"]["factor"] for s in unc["substrates"] if s["teardown"].get("kind") == "scaled"]
    assert len(factors) >= 6 and all(lo - 1e-6 <= f <= hi + 1e-6 for f in factors)
    assert max(factors) - min(factors) > 0.05  # drawn over the probe, not one value
    assert prof["provenance"]["reference_samples"] == sum(r["reference"] for r in recs)


@pytest.mark.slow
def test_calibrate_warns_past_the_targets_and_says_plainly_when_drift_was_not_measured(tmp_path):
    def write(recs, name):
        p = tmp_path / name
        p.write_text("".join(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}) + "\n"
                             for r in recs))  # fmt: skip
        return str(p)

    drifted = cli(
        "calibrate", write(records(0.3), "d.jsonl"), "-o", str(tmp_path / "d.yaml"), "--bootstrap", "0"
    )
    assert drifted.returncode == 0, drifted.stderr
    assert "warning: drift teardown" in drifted.stderr and "above the 10% validation target" in drifted.stderr
    old = [{k: v for k, v in r.items() if k not in ("reference", "block")} for r in records(0.0)
           if not r["reference"]]  # fmt: skip
    plain = cli("calibrate", write(old, "old.jsonl"), "-o", str(tmp_path / "o.yaml"), "--bootstrap", "3")
    assert plain.returncode == 0, plain.stderr
    assert f"drift: {NOT_MEASURED}" in plain.stdout and "without drift" in plain.stdout


def test_a_process_probe_runs_its_reference_blocks_and_marks_them(tmp_path):
    out = tmp_path / "p.jsonl"
    plan = ProbePlan(sandboxes=3, commands=2, levels=(1, 2), reference=2, reset="true")
    probe(get_backend("process"), plan, out)
    recs = read_records([out])
    ref, rest = split_reference(recs)
    assert {(r["block"], r["concurrency"]) for r in ref} == {(b, c) for b in (0, 1, 2) for c in (1, 2)}
    assert sum(r["phase"] == "create" for r in ref) == 3 * (2 + 2)
    assert not any(r["phase"] in ("upload", "download", "reset") for r in ref)  # first-level extras: once
    assert sum(r["phase"] == "create" for r in rest) == 6 and all(r["block"] is None for r in rest)
    # the records' order in time: start blocks first, end blocks last
    first_main = min(r["start"] for r in rest)
    assert max(r["start"] for r in ref if r["block"] == 0) < first_main
    assert min(r["start"] for r in ref if r["block"] == 2) > max(r["start"] for r in rest)


def test_an_engine_probes_reference_requests_give_its_drift_and_stay_out_of_its_fit():
    from tests.calibration.engine_fitting import engine_profile
    from tests.conftest import ROOT

    recs = read_records([ROOT / "tests/calibration/records/llama-cpp-tiny-m.jsonl"])
    plain = [r for r in recs if r["concurrency"] == 1 and r["mode"] == "plain" and r["ok"] and r["ttft"]][:4]
    top = max(r["concurrency"] for r in recs)
    ref = []
    for block, f in enumerate((1.0, 1.1, 1.25)):  # the engine slowing down over the probe
        for level in (1, top):
            ref += [{**r, "concurrency": level, "reference": True, "block": block, "ttft": r["ttft"] * f,
                     "tpot": r["tpot"] * f} for r in plain]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = engine_profile(recs, "e")
        both = engine_profile(recs + ref, "e")
    assert both["engine"] == base["engine"] and both["fit"] == base["fit"]
    assert base["uncertainty"]["drift"] == NOT_MEASURED
    drift = both["uncertainty"]["drift"]
    for metric in ("ttft", "tpot"):
        assert drift[metric]["max_rel"] == pytest.approx(0.25, abs=1e-3)
        assert drift[metric]["exceeds_target"] is True
        assert drift[metric]["end"] == pytest.approx(1.25 * drift[metric]["start"], rel=1e-4)


def test_a_sittings_probe_blocks_read_as_reference_blocks():
    """The validation suite's probe blocks, each a repeat of the same short probe, give the drift
    over the sitting: per group the block medians, the factor per block their geometric mean over
    the groups; records outside every group or block are left out."""
    from simrollout.calibration.drift import sitting_drift

    recs = []
    for block, f in enumerate((1.0, 1.1, 1.2, 1.3)):
        for level, base in ((1, 0.2), (8, 0.8)):
            recs += [{"phase": "exec", "concurrency": level, "ok": True, "latency": base * f * x,
                      "suite_block": block} for x in (0.9, 1.0, 1.1)]  # fmt: skip
    recs.append({"phase": "exec", "concurrency": 1, "ok": True, "latency": 99.0})  # in no block
    recs.append({"phase": "exec", "concurrency": 1, "ok": False, "latency": 99.0, "suite_block": 0})
    d = sitting_drift(recs, {"exec": "latency"}, lambda ph, r: r["concurrency"])["exec"]
    assert d["by_level"][8] == pytest.approx({0: 0.8, 1: 0.88, 2: 0.96, 3: 1.04})
    assert d["max_rel"] == pytest.approx(0.3) and d["exceeds_target"] is True
    gm = np.exp(np.mean(np.log([1.0, 1.1, 1.2, 1.3])))
    np.testing.assert_allclose(d["factor_by_block"], [f / gm for f in (1.0, 1.1, 1.2, 1.3)], rtol=1e-4)
    # one block, or no group: nothing to read
    assert sitting_drift([r for r in recs if r.get("suite_block") == 0], {"exec": "latency"},
                         lambda ph, r: r["concurrency"]) is None  # fmt: skip
    assert sitting_drift(recs, {"exec": "latency"}, lambda ph, r: None) is None


def test_the_suites_engine_drift_reads_lone_prompts_and_decode_runs_and_widens_the_band():
    """An engine cell's sitting drift: time to first token of plain requests alone in flight (a
    loaded level's is where a request fell in the batch, left out), time per output token of the
    decode runs; given to the fit, its refits carry it, the point fit unchanged."""
    from simrollout.validation.suite_engine import sitting_drift
    from tests.calibration.engine_fitting import engine_profile
    from tests.conftest import ROOT

    recs = [r for r in read_records([ROOT / "tests/calibration/records/llama-cpp-tiny-m.jsonl"]) if r["ok"]]
    blocks = []
    for block, f in enumerate((1.0, 1.15, 1.3)):  # the engine slowing over the sitting
        blocks += [{**r, "suite_block": block, "ttft": r["ttft"] * f, "tpot": r["tpot"] * f,
                    "latency": r["latency"] * f} for r in recs]  # fmt: skip
    d = sitting_drift(blocks)
    assert set(d) == {"ttft", "tpot"}
    assert all(k.startswith("1/") for k in d["ttft"]["by_level"])  # lone plain requests only
    assert {r["concurrency"] for r in recs if r["mode"] == "decode"} == set(d["tpot"]["by_level"])
    for phase in ("ttft", "tpot"):
        assert d[phase]["max_rel"] == pytest.approx(0.3, abs=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        still = engine_profile(recs, "e", bootstrap=12, seed=1)
        moved = engine_profile(recs, "e", bootstrap=12, seed=1, drift=d)
    assert moved["engine"] == still["engine"]
    assert still["uncertainty"]["drift"] == NOT_MEASURED and moved["uncertainty"]["drift_applied"]

    def width(p):
        return p["uncertainty"]["spread"]["per_decode"]["hi"] - p["uncertainty"]["spread"]["per_decode"]["lo"]

    assert width(moved) > width(still) + 0.1  # the drift's +-13% around its middle, on top
