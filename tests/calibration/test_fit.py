"""Fitting probe records into profiles."""

import json

import numpy as np
import pytest
import yaml

from simrollout.calibration.calibrate import calibrate, from_quantiles
from simrollout.calibration.probe import read_records
from simrollout.distributions.families import fit_phase
from simrollout.errors import InputError
from simrollout.scenario import load_profile
from tests.conftest import cli, shipped_files


def records(tmp_path, phases, levels=(1,), n=200, seed=0, fail=0.0, name="r.jsonl"):
    """Synthetic probe records: at level c, c streams of back-to-back sandbox lifecycles, each
    operation taking its base draw x (1 + slope (c - 1)) (c operations always in flight)."""
    rng = np.random.default_rng(seed)
    lines = []
    for c in levels:
        clock = [0.0] * c
        for i in range(n):
            for phase, (dist, slope) in phases.items():
                ok = rng.random() >= fail
                lat = float(dist(rng)) * (1 + slope * (c - 1))
                start = clock[i % c]
                clock[i % c] += lat if np.isfinite(lat) and lat > 0 else 0.01
                lines.append(
                    dict(
                        run_id="r",
                        backend="synthetic",
                        backend_version="0",
                        engine_version="0",
                        host="h",
                        image="i",
                        phase=phase,
                        start=start,
                        latency=lat,
                        concurrency=c,
                        mode="sequential",
                        ok=ok,
                        error=None if ok else "Boom",
                        sandbox=i,
                    )
                )
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return p


LOGN = (lambda r: r.lognormal(np.log(0.15), 0.4), 0.0)
# the 16 creates of a small probe's first level (seconds): most near 0.3, two slow outliers
OUTLIERS = (2.734, 0.305, 0.287, 0.33, 0.353, 0.288, 0.331, 0.26, 1.517, 0.307, 0.515, 0.366, 0.295, 0.266,
            0.346, 0.312)  # fmt: skip


def test_lognormal_data_selects_lognormal_with_small_quantile_error():
    x = np.random.default_rng(1).lognormal(np.log(0.2), 0.5, 2000)
    f = fit_phase(x)
    assert f["selected"] in ("lognormal", "lognormal_mixture")
    assert abs(f["quantile_rel_error"]["p50"]) < 0.03 and abs(f["quantile_rel_error"]["p90"]) < 0.05
    assert f["candidates"]["lognormal"]["ks_pvalue"] > 0.05


def test_bimodal_data_selects_the_mixture():
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.lognormal(np.log(0.1), 0.1, 700), rng.lognormal(np.log(2.0), 0.1, 300)])
    f = fit_phase(x)
    assert f["selected"] == "lognormal_mixture"
    assert abs(f["quantile_rel_error"]["p90"]) < 0.05


def test_a_law_the_ks_test_rejects_is_not_selected_for_its_likelihood():
    # OUTLIERS: a shifted exponential from the minimum has the best AIC but puts the median 44% high, and
    # every simulated create with it (a contention curve multiplies the base's median)
    f = fit_phase(np.array(OUTLIERS))
    c = f["candidates"]
    assert c["shifted_exponential"]["aic"] < c[f["selected"]]["aic"]  # the likelihood's choice ...
    assert c["shifted_exponential"]["ks_pvalue"] < 0.05  # ... which the KS test rejects
    assert c[f["selected"]]["ks_pvalue"] >= 0.05
    assert abs(f["quantile_rel_error"]["p50"]) < 0.15
    # when the KS test rejects every candidate, the least rejected one
    y = np.concatenate([np.full(12, 0.3), np.full(6, 3.0)]) + np.random.default_rng(0).uniform(0, 1e-3, 18)
    fit = fit_phase(y)
    g = fit["candidates"]
    assert all(v["ks_pvalue"] < 0.05 for v in g.values())
    assert fit["selected"] == max(g, key=lambda k: g[k]["ks_pvalue"]) != min(g, key=lambda k: g[k]["aic"])


@pytest.mark.slow
def test_calibrate_says_when_the_ks_test_overrode_the_likelihood(tmp_path):
    slow = iter(OUTLIERS)
    path = records(tmp_path, {"create": (lambda r: next(slow), 0.0), "exec": LOGN, "teardown": LOGN}, n=16)
    res = cli("calibrate", path, "-o", tmp_path / "p.yaml")
    assert res.returncode == 0, res.stderr
    assert "AIC preferred shifted_exponential, which the KS test rejects" in res.stdout
    prof = yaml.safe_load((tmp_path / "p.yaml").read_text())
    assert prof["fits"]["create"]["selected"] != "shifted_exponential"
    lines = res.stdout.splitlines()
    after_exec = lines[next(i for i, line in enumerate(lines) if line.startswith("exec")) + 1]
    assert "preferred" not in after_exec  # exec kept the likelihood's own choice


@pytest.mark.parametrize("shared", [False, True])
def test_contention_slope_and_failure_rate_are_recovered(shared):
    # a probe run on a known model: create latency x (1 + 0.05 (n - 1)), n = operations in flight
    # at its start, or (shared) each create progressing at 1 / (1 + 0.05 (n - 1)) with n re-read
    # as operations come and go; 10% of creates fail
    from simrollout.scenario import Substrate
    from tests.synthetic_probe import simulate_probe

    true = Substrate(name="t", cold_start={"kind": "lognormal", "median": 0.15, "p99": 0.4},
                     exec_overhead={"kind": "lognormal", "median": 0.15, "p99": 0.4}, teardown=0.15,
                     contention={"create": 0.05, "shared": shared}, failures={"create": 0.1})  # fmt: skip
    recs = simulate_probe(true, levels=(1, 8, 32), sandboxes=400, commands=1, seed=2)
    for k, r in enumerate(recs):
        r["_file"], r["_line"] = "s", k
    prof, _ = calibrate(recs, "syn", shared=shared)
    assert prof["substrate"]["contention"].get("shared", False) is shared
    assert ("share the host" in prof["provenance"]["contention_reading"]) is shared
    curve = prof["substrate"]["contention"]["create"]
    assert len(curve) >= 2 and max(curve) >= 16
    for n_in_flight, mult in curve.items():
        assert mult == pytest.approx(1 + 0.05 * (n_in_flight - 1), rel=0.1), (n_in_flight, mult)
    assert prof["fits"]["create"]["contention_slope"] == pytest.approx(
        0.05, rel=0.2
    )  # a summary of the points
    assert all(abs(m - 1) < 0.1 for m in prof["substrate"]["contention"]["exec"].values())
    assert all(v == pytest.approx(0.1, abs=0.03) for v in prof["substrate"]["failures"]["create"].values())


@pytest.mark.slow
def test_failure_curve_is_fitted_against_operations_in_flight(tmp_path):
    p = records(tmp_path, {"create": LOGN, "exec": LOGN, "teardown": LOGN}, levels=(1, 16), n=2000, fail=0.0)
    recs = read_records([p])
    rng = np.random.default_rng(5)
    for r in recs:  # creates fail more under load: 1% alone, 20% at 16 in flight
        if r["phase"] == "create":
            r["ok"] = bool(rng.random() >= (0.01 if r["concurrency"] == 1 else 0.2))
    prof, _ = calibrate(recs, "syn")
    curve = prof["substrate"]["failures"]["create"]
    (n1, p1), (n16, p16) = sorted(curve.items())
    assert n1 == pytest.approx(1, abs=0.2) and n16 > 10
    assert p1 == pytest.approx(0.01, abs=0.01) and p16 == pytest.approx(0.2, abs=0.03)
    assert prof["substrate"]["failures"]["exec"] == 0.0


def test_bad_probe_data_is_refused_with_phase_and_count(tmp_path):
    ok = {"create": LOGN, "exec": LOGN, "teardown": LOGN}
    few = records(tmp_path, ok, n=5, name="few.jsonl")
    with pytest.raises(InputError, match=r"phase 'create': 5 successful samples, at least 10"):
        calibrate(read_records([few]), "x")
    nan = records(
        tmp_path, {"create": (lambda r: float("nan"), 0), "exec": LOGN, "teardown": LOGN}, name="nan.jsonl"
    )
    with pytest.raises(InputError, match=r"phase 'create' has 200 NaN, infinite or negative"):
        calibrate(read_records([nan]), "x")
    neg = records(tmp_path, {"create": LOGN, "exec": (lambda r: -1.0, 0), "teardown": LOGN}, name="neg.jsonl")
    with pytest.raises(InputError, match=r"phase 'exec' has 200 NaN, infinite or negative"):
        calibrate(read_records([neg]), "x")
    allfail = records(tmp_path, ok, fail=1.0, name="fail.jsonl")
    with pytest.raises(InputError, match=r"all 600 records are failures|all 200 records are failures"):
        calibrate(read_records([allfail]), "x")


@pytest.mark.slow
def test_calibrate_cli_writes_a_profile_a_scenario_can_use(tmp_path):
    p = records(tmp_path, {"create": LOGN, "exec": LOGN, "teardown": LOGN, "upload": LOGN})
    out = tmp_path / "prof" / "syn.yaml"
    r = cli("calibrate", str(p), "-o", str(out))
    assert r.returncode == 0, r.stderr
    prof = load_profile(out)
    assert prof.provenance["samples"]["create"] == 200 and prof.provenance["backend"] == "synthetic"
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert "upload" in yaml.safe_load(out.read_text())["fits"]


@pytest.mark.slow
def test_calibrate_cli_bad_data_exit_2(tmp_path):
    p = records(tmp_path, {"create": LOGN, "exec": LOGN, "teardown": LOGN}, n=3)
    r = cli("calibrate", str(p), "-o", str(tmp_path / "x.yaml"))
    assert r.returncode == 2 and "at least 10" in r.stderr and "Traceback" not in r.stderr


def test_from_quantiles_marks_its_provenance(tmp_path):
    spec = {
        "name": "hosted",
        "source": "vendor benchmark",
        "substrate": {
            "cold_start": {"quantiles": {0.5: 0.11, 0.95: 0.28, 0.99: 0.29}},
            "exec_overhead": 0.1,
            "teardown": 0.1,
        },
    }
    prof = from_quantiles(spec, tmp_path / "spec.yaml")
    assert prof["provenance"]["method"].startswith("from published quantiles")
    assert prof["substrate"]["cold_start"]["kind"] == "empirical"
    bad = {**spec, "substrate": {**spec["substrate"], "cold_start": {"quantiles": {0.5: 1.0, 0.99: 0.5}}}}
    with pytest.raises(InputError, match="out of order"):
        from_quantiles(bad, tmp_path / "spec.yaml")


def test_shipped_profiles_load_and_cite_their_source(root):
    profiles = [
        root / "calibration/profiles" / n for n in sorted(shipped_files("calibration/profiles", "*.yaml"))
    ]
    assert len(profiles) >= 5
    for p in profiles:
        prof = load_profile(p)
        prov = prof.provenance
        assert prov.get("source") or prov.get("probe_files"), p


def test_calibrate_says_when_a_curve_is_under_sampled_and_what_to_probe(tmp_path):
    slow = (lambda r: r.lognormal(np.log(0.15), 0.2), 0.05)
    sparse = calibrate(read_records([records(tmp_path, {"create": slow, "exec": slow, "teardown": slow},
                                             levels=(1, 8, 32), n=40)]), "x")[0]  # fmt: skip
    cov = sparse["fits"]["create"]["coverage"]
    assert cov["under_sampled"] and cov["load_levels"] == 2
    assert any("--concurrency 1,2,3,4,6,8,12,16,24,32,48,64" in a for a in cov["advice"])
    assert any("gaps" in a for a in cov["advice"])
    dense = calibrate(read_records([records(tmp_path, {"create": slow, "exec": slow, "teardown": slow},
                                            levels=(1, 2, 4, 8, 16), n=40, name="d.jsonl")]), "x")[0]  # fmt: skip
    cov = dense["fits"]["create"]["coverage"]
    assert not cov["under_sampled"], cov["advice"]
    assert dense["fits"]["create"]["contention_law"]["exponent"] > 0


def test_a_level_left_unfilled_is_advice_unless_the_probe_paced_its_commands():
    from simrollout.calibration.load_curves import coverage

    # levels 3..48 with 40% of the level in flight on average
    per_level = {c: {"n": 40, "failures": 0, "in_flight": max(1.0, 0.4 * c)} for c in (1, 3, 6, 12, 24, 48)}
    assert any("never filled" in a for a in coverage(per_level)["advice"])
    # a probe with a think time before each command (probe --think) is not meant to fill a level
    paced = coverage(per_level, paced=True)
    assert not any("never filled" in a for a in paced["advice"]) and not paced["under_sampled"]


def test_a_calibrated_curve_predicts_unmeasured_levels_of_a_known_law(tmp_path):
    # probes from operations slowed by a known saturation law, each at its level's multiplier from
    # its start (the at-start reading); the fitted curve at 12 and 48 in flight (never probed) is
    # within 10% of the law
    from simrollout.distributions.contention import law

    truth = (3.0, 1.0, 3.0)
    lines = []
    for c in (1, 2, 4, 8, 16, 32, 64):
        rng = np.random.default_rng(c)
        clock = [0.0] * c
        for i in range(max(40, 2 * c)):
            lat = float(rng.lognormal(np.log(0.1), 0.1)) * float(law(c, *truth))
            start = clock[i % c]
            clock[i % c] += lat
            lines.append(dict(run_id="r", backend="synthetic", backend_version="0", engine_version="0", host="h",
                              image="i", phase="create", start=start, latency=lat, concurrency=c,
                              mode="burst", ok=True, error=None, sandbox=i))  # fmt: skip
            for ph in ("exec", "teardown"):
                lines.append({**lines[-1], "phase": ph, "latency": 0.05, "start": start + 1e9})
    p = tmp_path / "law.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    prof = calibrate(read_records([p]), "law", shared=False)[0]
    from simrollout.scenario import slowdown

    f = slowdown(prof["substrate"]["contention"]["create"])
    for n in (12, 48, 100):
        assert f(n) == pytest.approx(float(law(n, *truth)), rel=0.10), n


def test_pull_records_give_the_pull_rate_and_reset_records_the_reset(tmp_path):
    p = records(
        tmp_path, {"create": LOGN, "exec": LOGN, "teardown": LOGN, "reset": (lambda r: r.gamma(4, 0.05), 0.0)}
    )
    recs = read_records([p])
    # five loads of a 64 MiB archive at 32, 64 (x3) and 128 MiB/s, and one failed load
    for k, secs in enumerate([2.0, 1.0, 1.0, 1.0, 0.5, 0.1]):
        recs.append({**recs[0], "phase": "pull", "latency": secs, "bytes": 64 * 2**20, "sandbox": k,
                     "ok": k < 5, "start": 1e6 + k})  # fmt: skip
    profile, _ = calibrate(recs, "x", image_cache_gb=40.0)
    sub = profile["substrate"]
    assert sub["image_cache"] == {"pull_mb_s": 64.0, "cache_gb": 40.0}
    assert "not measured" in profile["provenance"]["image_cache"]
    assert sub["reset"]["kind"] in ("gamma", "lognormal", "weibull", "loglogistic", "mixture", "exponential")
    assert profile["provenance"]["samples"]["pull"] == 6
    # without pull or reset records the profile has neither
    plain, _ = calibrate(read_records([records(tmp_path, {"create": LOGN, "exec": LOGN, "teardown": LOGN},
                                               name="plain.jsonl")]), "y")  # fmt: skip
    assert "image_cache" not in plain["substrate"] and "reset" not in plain["substrate"]


def test_a_remote_backends_contention_is_scoped_to_its_client(tmp_path):
    slow = (lambda r: r.lognormal(np.log(0.15), 0.1), 0.2)
    p = records(tmp_path, {"create": slow, "exec": LOGN, "teardown": LOGN}, levels=(1, 4, 8), n=120)
    local, _ = calibrate(read_records([p]), "docker-like")
    assert "scope" not in local["substrate"]["contention"]  # host, the default
    remote, _ = calibrate([{**r, "backend": "daytona"} for r in read_records([p])], "daytona-like")
    assert remote["substrate"]["contention"]["scope"] == "client"
    assert remote["substrate"]["contention"]["create"]  # the curve itself is the same fit


def test_the_older_per_level_points_stay_available_and_are_named_in_the_provenance():
    from simrollout.scenario import Substrate
    from tests.synthetic_probe import simulate_probe

    true = Substrate(name="t", cold_start=0.1, exec_overhead=0.05, teardown=0.1, contention={"exec": 0.1})
    recs = simulate_probe(true, levels=(1, 4, 16), sandboxes=40, commands=4, seed=3)
    for k, r in enumerate(recs):
        r["_file"], r["_line"] = "s", k
    old, _ = calibrate(recs, "x", points="per-level")
    new, _ = calibrate(recs, "x")
    assert len(old["substrate"]["contention"]["exec"]) == 2  # one point per level above the first
    assert len(new["substrate"]["contention"]["exec"]) > 2  # one per count in flight (merged to 12)
    assert (old["provenance"]["contention_points"], new["provenance"]["contention_points"]) == (
        "per-level", "per-operation")  # fmt: skip
    with pytest.raises(InputError, match="per-operation or per-level"):
        calibrate(recs, "x", points="per-host")


def _stopped_answering(lines: list[dict], level: int, share: float) -> list[dict]:
    """The operations of ``level`` timed out on the client, a ``share`` of them (the first ones)."""
    at = [r for r in lines if r["concurrency"] == level]
    for r in at[: int(share * len(at))]:
        r.update(ok=False, error="ReadTimeout", latency=60.0)
    return lines


def test_a_level_where_the_engine_stopped_answering_is_left_out_not_read_as_failures(tmp_path):
    phases = {"create": (lambda g: g.lognormal(np.log(0.3), 0.2), 0.05),
              "exec": (lambda g: g.lognormal(np.log(0.05), 0.2), 0.05),
              "teardown": (lambda g: g.lognormal(np.log(0.1), 0.2), 0.05)}  # fmt: skip
    clean = [json.loads(x) for x in records(tmp_path, phases, levels=(1, 4, 16)).read_text().splitlines()]
    hung = _stopped_answering([dict(r) for r in clean], 16, 0.9)
    for r in hung:
        r["_file"] = "r.jsonl"
    with pytest.warns(UserWarning, match="concurrency 16: .* timed out on the client"):
        prof, _ = calibrate(hung, "hung")
    assert prof["substrate"]["failures"]["create"] == 0.0  # no failure curve from the hang
    assert "concurrency 16" in prof["provenance"]["left_out"][0]
    assert 16 not in prof["fits"]["create"]["by_concurrency"]
    # occasional timeouts are failures: they stay
    some = _stopped_answering([dict(r, _file="r.jsonl") for r in clean], 16, 0.1)
    prof, _ = calibrate(some, "some")
    assert "left_out" not in prof["provenance"]
    assert isinstance(prof["substrate"]["failures"]["create"], dict)  # a failure rate by load
    # every level hung: a clear error
    all_hung = [dict(r, _file="r.jsonl", ok=False, error="ReadTimeout") for r in clean]
    with pytest.warns(UserWarning, match="timed out"), pytest.raises(InputError, match="every level's"):
        calibrate(all_hung, "dead")
