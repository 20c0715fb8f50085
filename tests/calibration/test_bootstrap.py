"""Bootstrap refits of a profile: by whole sandboxes per level, reproducible, the point unchanged."""

import json
import warnings
from collections import Counter

import numpy as np
import pytest
import yaml

from simrollout.calibration.bootstrap import resample, sandbox_blocks
from simrollout.calibration.calibrate import calibrate
from simrollout.errors import InputError
from simrollout.scenario import Substrate
from tests.conftest import cli
from tests.synthetic_probe import simulate_probe

TRUE = Substrate.model_validate({
    "name": "s", "cold_start": {"kind": "lognormal", "median": 0.4, "p99": 1.2},
    "exec_overhead": {"kind": "lognormal", "median": 0.05, "p99": 0.2},
    "teardown": {"kind": "lognormal", "median": 0.1, "p99": 0.3},
    "contention": {"create": 0.05, "exec": 0.02, "teardown": 0.03},
})  # fmt: skip


def probe(levels=(1, 2, 4), sandboxes=16, seed=0, **kw) -> list[dict]:
    recs = simulate_probe(TRUE, levels=levels, sandboxes=sandboxes, commands=4, seed=seed, **kw)
    for k, r in enumerate(recs):
        r["_file"], r["_line"] = "synthetic.jsonl", k
    return recs


@pytest.fixture(scope="module")
def recs():
    return probe()


def test_a_resample_draws_whole_sandboxes_within_each_level(recs):
    blocks = sandbox_blocks(recs)
    per_box = Counter((r["concurrency"], r["sandbox"]) for r in recs)
    out = resample(blocks, np.random.default_rng(1))
    got = Counter((r["concurrency"], r["sandbox"]) for r in out)
    # every sandbox drawn comes with all its records, k times over: never a part of one
    assert all(n % per_box[key] == 0 for key, n in got.items())
    # each level keeps its count of sandboxes and of records' phases in proportion
    for level in (1, 2, 4):
        drawn = sum(n // per_box[key] for key, n in got.items() if key[0] == level)
        assert drawn == 16
    # with replacement: some sandboxes twice or more, some left out
    times = [n // per_box[key] for key, n in got.items()]
    assert max(times) >= 2 and len(got) < len(per_box)
    # the records are the probe's own (with the load they met there), not copies with new times
    assert {id(r) for r in out} <= {id(r) for r in recs}


def test_refits_are_reproducible_for_a_seed_and_leave_the_point_fit_alone(recs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain, _ = calibrate(recs, "s")
        a, _ = calibrate(recs, "s", bootstrap=6, seed=3)
        b, _ = calibrate(recs, "s", bootstrap=6, seed=3)
        c, _ = calibrate(recs, "s", bootstrap=6, seed=4)
    assert "uncertainty" not in plain  # bootstrap 0 (the Python default) and no reference blocks
    assert a["substrate"] == plain["substrate"] and a["fits"] == plain["fits"]
    ua, ub, uc = a["uncertainty"], b["uncertainty"], c["uncertainty"]
    assert ua == ub and ua["refits"] == 6 and len(ua["substrates"]) == 6 and ua["seed"] == 3
    assert ua["substrates"] != uc["substrates"]
    # the refits differ from one another and from the point, and each is a valid substrate
    meds = [Substrate.model_validate({"name": "r", **s}).cold_start.ppf(0.5) for s in ua["substrates"]]
    assert len(set(np.round(meds, 9))) == 6
    point = Substrate.model_validate({"name": "p", **a["substrate"]}).cold_start.ppf(0.5)
    assert min(meds) < point * 1.2 and max(meds) > point * 0.8
    assert ua["drift"].startswith("not measured") and ua["drift_applied"] is False


def test_refits_spread_less_on_a_bigger_probe():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        small = calibrate(probe(sandboxes=12, seed=5), "s", bootstrap=12)[0]["uncertainty"]["spread"]
        big = calibrate(probe(sandboxes=96, seed=5), "s", bootstrap=12)[0]["uncertainty"]["spread"]
    width = {k: lambda s, k=k: s[k]["p50_hi"] - s[k]["p50_lo"] for k in ("create", "exec")}
    assert width["create"](big) < width["create"](small)
    assert width["exec"](big) < width["exec"](small)


def test_a_probe_too_thin_to_bootstrap_is_refused_when_asked_and_warned_about_by_default():
    thin = probe(levels=(1,), sandboxes=10)
    with (
        pytest.raises(InputError, match=r"10 sandboxes at concurrency 1, at least 12"),
        pytest.warns(UserWarning),
    ):
        calibrate(thin, "s", bootstrap=20)
    with pytest.warns(UserWarning, match="no refits") as caught:
        prof, _ = calibrate(thin, "s", bootstrap=None)  # what a plain `simrollout calibrate` does
    assert prof["uncertainty"]["refits"] == 0 and prof["uncertainty"]["substrates"] == []
    assert "10 sandboxes at concurrency 1" in prof["uncertainty"]["refused"]
    assert any("one concurrency level" in str(w.message) for w in caught)
    # enough sandboxes but one level: refits, with a warning that they hold no contention curve
    with pytest.warns(UserWarning, match="no uncertainty of a contention curve"):
        one, _ = calibrate(probe(levels=(1,), sandboxes=24), "s", bootstrap=4)
    assert one["uncertainty"]["refits"] == 4


@pytest.mark.slow
def test_calibrate_cli_stores_the_refits_and_says_so(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}) + "\n"
                            for r in probe(reference=3)))  # fmt: skip
    res = cli("calibrate", str(path), "-o", str(tmp_path / "prof.yaml"), "--bootstrap", "5", "--seed", "2")
    assert res.returncode == 0, res.stderr
    prof = yaml.safe_load((tmp_path / "prof.yaml").read_text())
    assert prof["uncertainty"]["refits"] == 5 and len(prof["uncertainty"]["substrates"]) == 5
    assert "bootstrap: 5 refits, with the reference blocks' drift" in res.stdout
    assert "drift create" in res.stdout + res.stderr
    bad = cli("calibrate", str(path), "-o", str(tmp_path / "x.yaml"), "--bootstrap", "-1")
    assert bad.returncode == 2 and "--bootstrap" in bad.stderr and "Traceback" not in bad.stderr
