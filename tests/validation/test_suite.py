"""The interleaved validation suite: its arithmetic against hand-checked numbers, its verdicts and
added repeats, its block order under drift (on the synthetic substrate, a known model), and the
report, suite.json and history.csv it writes."""

import json

import numpy as np
import pandas as pd
import pytest

from simrollout.validation import suite_report
from simrollout.validation.suite import (
    HeldOutCell,
    HeldOutWorkload,
    SuitePlan,
    block_order,
    drift_factors,
    neighbours,
    next_pair,
    probe_blocks,
    rows_table,
    run_suite,
)
from simrollout.validation.suite_stats import (
    needs_repeats,
    paired_errors,
    precision,
    summarize,
    t_interval,
    verdict,
)
from tests.conftest import cli
from tests.validation.synthetic_target import SyntheticTarget

W = HeldOutWorkload("w", 2, {"kind": "lognormal", "median": 0.1, "p99": 0.5})


def test_t_interval_by_hand():
    # mean 12, sd 2, t(0.975, 2) = 4.3027: half-width 4.3027 * 2 / sqrt(3)
    mean, half = t_interval([10.0, 12.0, 14.0])
    assert mean == pytest.approx(12.0) and half == pytest.approx(4.3027 * 2 / 3**0.5, rel=1e-4)
    # five repeats: t(0.975, 4) = 2.7764, sd of 1..5 = 1.5811
    assert t_interval([1, 2, 3, 4, 5])[1] == pytest.approx(2.7764 * 1.5811 / 5**0.5, rel=1e-4)
    assert np.isnan(t_interval([3.0])[1])


def test_verdicts_pass_miss_indeterminate():
    assert verdict(100.0, 9.9, 110.0, 10) == "pass"  # at the target, and the CI resolves it
    assert verdict(100.0, 9.9, 110.5, 10) == "miss"
    assert verdict(100.0, 9.9, 89.0, 10) == "miss"  # under-prediction misses too
    assert verdict(100.0, 10.5, 100.0, 10) == "indeterminate"  # CI wider than the target
    assert verdict(100.0, float("nan"), 100.0, 10) == "indeterminate"  # one repeat: no CI
    assert needs_repeats({"a": [10, 12, 14], "b": [10, 10.1, 9.9]}, {"a": 10, "b": 10}) == ["a"]


def test_paired_errors_cancel_a_drift_the_real_spread_keeps():
    real = [100.0, 110.0, 120.0, 130.0]  # the machine slows 10 a repeat
    sim = [102.0, 112.2, 122.4, 132.6]  # each repeat's neighbours read it 2% high
    assert paired_errors(real, sim) == pytest.approx([2.0, 2.0, 2.0, 2.0])
    assert paired_errors(real, [102.0, float("nan"), 122.4, 132.6]) == pytest.approx([2.0] * 3)
    mean, half = t_interval(real)  # 115 +- 20.5: 17.9% of the mean
    assert precision(real, None) == pytest.approx(100 * half / mean)
    assert precision(real, sim) == pytest.approx(0.0, abs=1e-9)
    # with fewer than 3 partners the real mean's own interval stands
    assert precision(real, [102.0, float("nan"), float("nan"), 132.6]) == precision(real, None)
    assert verdict(mean, half, 117.0, 10) == "indeterminate"
    assert verdict(mean, half, 117.0, 10, precision(real, sim)) == "pass"
    assert verdict(mean, half, 130.0, 10, precision(real, sim)) == "miss"
    noisy = [102.0, 100.0, 140.0, 120.0]  # the partners disagree: errors 2, -9, 17, -8
    assert precision(real, noisy) > 10 and verdict(mean, half, 117.0, 10, precision(real, noisy)) == (
        "indeterminate"
    )
    assert needs_repeats({"a": real}, {"a": 10}, {"a": sim}) == []
    assert needs_repeats({"a": real}, {"a": 10}) == ["a"]


def test_drift_factors_per_phase_geometric_over_levels():
    def rec(phase, level, latency, ok=True):
        return {"phase": phase, "concurrency": level, "latency": latency, "ok": ok}

    every = [rec("exec", 1, x) for x in (1.0, 1.0, 2.0, 2.0)] + [rec("exec", 8, x) for x in (4.0, 4.0)]
    every += [rec("create", 1, 0.5), rec("create", 1, 0.5, ok=False)]
    near = [rec("exec", 1, 2.0), rec("exec", 8, 2.0), rec("create", 1, 1.0)]
    # exec: level 1 2.0 / 1.5, level 8 2.0 / 4.0 -> sqrt(4/3 * 1/2); create: 1.0 / 0.5
    f = drift_factors(near, every + near)
    assert f["exec"] == pytest.approx((2.0 / 2.0 * 2.0 / 4.0) ** 0.5)
    assert f["create"] == pytest.approx(1.0 / 0.75) and "teardown" not in f
    assert drift_factors(every, every) == {"exec": pytest.approx(1.0), "create": pytest.approx(1.0)}


def test_neighbours_and_blocks_by_time():
    sched = [
        {"block": k, "index": i, "start": 10.0 * n, "seconds": 9.0}
        for n, (k, i) in enumerate([("real", 0), ("probe", 0), ("real", 1), ("probe", 1), ("real", 2)])
    ]
    assert neighbours(sched) == [(), (0, 1), ()]
    recs = [{"start": 10.5}, {"start": 18.9}, {"start": 31.0}, {"start": 25.0}, {"start": None}]
    blocks = probe_blocks(recs, sched)
    assert [r["start"] for r in blocks[0]] == [10.5, 18.9] and [r["start"] for r in blocks[1]] == [31.0]
    tagged = [{"start": 0.0, "suite_block": 1}, {"start": 99.0, "suite_block": 0}]
    assert probe_blocks(tagged, sched) == {1: [tagged[0]], 0: [tagged[1]]}


def _rows(errors, covered, verdicts, metric="m", target=10):
    return pd.DataFrame(
        {
            "workload": "w",
            "level": range(len(errors)),
            "metric": metric,
            "target_pct": target,
            "error_pct": errors,
            "covered": covered,
            "verdict": verdicts,
        }
    )


def test_mape_coverage_and_counts_by_hand():
    rows = pd.concat(
        [
            _rows(
                [5.0, -15.0, 10.0, -2.0], [True, False, True, None], ["pass", "miss", "pass", "indeterminate"]
            ),
            _rows([30.0, 10.0], [False, False], ["miss", "miss"], metric="n", target=20),
        ]
    )
    s = summarize(rows).set_index("metric")
    assert s.loc["m", "mape_pct"] == pytest.approx(8.0)  # (5 + 15 + 10 + 2) / 4
    assert s.loc["m", "coverage"] == pytest.approx(2 / 3)  # the unbanded cell left out
    assert (s.loc["m", "pass"], s.loc["m", "miss"], s.loc["m", "indeterminate"]) == (2, 1, 1)
    assert s.loc["n", "mape_pct"] == pytest.approx(20.0) and s.loc["n", "coverage"] == 0.0


def test_a_band_with_the_real_means_noise_by_hand_and_by_simulation():
    """Widened in quadrature by the 90% range of the real mean (here sem 1: 1.645): a band of
    half-width 1 around 100 reaches 100 +- hypot(1, 1.645) = 101.925; a perfect band held to the
    mean of 3 noisy repeats covers it about 90% of the time only with the noise, far less without."""
    from simrollout.validation.suite_stats import covers_with_noise

    real = [99.0, 101.0, 103.0]  # mean 101, sem 1.1547
    noise = 1.6449 * 1.1547
    assert covers_with_noise(100.0, 99.0, 101.0, real) is True  # 101 <= 100 + hypot(1, 1.9)
    assert covers_with_noise(99.0 - noise, 98.0 - noise, 99.0 - noise + 0.001, real) is False
    assert covers_with_noise(100.0, 99.0, 101.0, [101.0]) is None
    assert covers_with_noise(100.0, float("nan"), float("nan"), real) is None
    rng = np.random.default_rng(3)
    truth, sd, plain, noisy = 100.0, 5.0, 0, 0
    for _ in range(2000):  # the band: the truth's own 90% range (an input uncertainty of sd 1)
        point = truth + rng.normal(0, 1.0)
        lo, hi = point - 1.645, point + 1.645
        real = truth + rng.normal(0, sd, 3)
        plain += lo <= real.mean() <= hi
        noisy += covers_with_noise(point, lo, hi, list(real))
    assert plain / 2000 < 0.6 and 0.8 < noisy / 2000 < 0.95


@pytest.mark.parametrize("repeats", [3, 4, 5])
@pytest.mark.parametrize("seed", range(4))
def test_block_order_alternates_and_balances_the_mean_time(repeats, seed):
    order = block_order(repeats, np.random.default_rng(seed))
    for _ in range(2):  # repeats added keep it so
        assert all(a != b for a, b in zip(order, order[1:])) and order[0] == order[-1]
        pos = {k: np.mean([i for i, b in enumerate(order) if b == k]) for k in ("probe", "real")}
        assert pos["probe"] == pos["real"]
        assert min(order.count("probe"), order.count("real")) >= repeats
        order = order + next_pair(order)
    seq = block_order(repeats, np.random.default_rng(seed), interleave=False)
    assert seq == ["probe"] * repeats + ["real"] * repeats


class Scripted:
    """A target whose real repeats read from a list (cycled) and whose simulation is fixed."""

    name = "scripted"
    targets = {"m": 10}

    def __init__(self, reals, sim=100.0):
        self.reals, self.sim, self.blocks = reals, sim, []

    def probe(self, cell, block):
        self.blocks.append("probe")
        return []

    def real(self, cell, repeat):
        self.blocks.append("real")
        return {"m": self.reals[repeat % len(self.reals)]}

    def simulate(self, cell, records, plan):
        return {"m": {"point": self.sim, "lo": self.sim * 0.95, "hi": self.sim * 1.05, "source": "fixed"}}

    def machine(self):
        return {}


class Drifting(Scripted):
    """A machine that slows 8% a block: real repeats and probe blocks alike; the simulation of
    probe blocks reads them ``bias`` high."""

    def __init__(self, bias=0.03):
        super().__init__([], sim=0.0)
        self.bias, self.clock = bias, 0

    def probe(self, cell, block):
        self.clock += 1
        return [{"speed": 100.0 * (1 + 0.08 * self.clock)}]

    def real(self, cell, repeat):
        self.clock += 1
        return {"m": 100.0 * (1 + 0.08 * self.clock)}

    def point(self, cell, near, records, plan):
        return {"m": (1 + self.bias) * float(np.mean([r["speed"] for r in near]))}

    def simulate(self, cell, records, plan):
        p = self.point(cell, records, records, plan)["m"]
        return {"m": {"point": p, "lo": p * 0.95, "hi": p * 1.05, "source": "fixed"}}


def test_a_drift_shared_by_both_sides_resolves_without_repeats():
    plan = SuitePlan([HeldOutCell(W, 4)], repeats=3, max_repeats=8, seed=2)
    assert block_order(3, np.random.default_rng(2))[0] == "probe"  # every real run between two probes
    r = rows_table(run_suite(Drifting(), plan))
    # the real repeats spread over 16-48% of the machine's speed: their own interval is wide, but
    # every real run is its neighbours' mean, read 3% high: the paired errors agree
    assert r.real_half_pct.item() > 10 and r.repeats.item() == 3 and r.pairs.item() == 3
    assert r.paired_error_pct.item() == pytest.approx(3.0, abs=1e-9) and r.precision_pct.item() < 1e-6
    assert r.verdict.item() == "pass" and abs(r.error_pct.item() - 3.0) < 1.0
    r = rows_table(run_suite(Drifting(0.15), plan))
    assert r.verdict.item() == "miss" and r.repeats.item() == 3
    # begun with a real run, the two ends have one neighbour each and pair with none: 2 pairs of 4
    # are too few, so the real spread decides and repeats are added until 3 pairs stand
    plan = SuitePlan([HeldOutCell(W, 4)], repeats=3, max_repeats=8, seed=0)
    assert block_order(3, np.random.default_rng(0))[0] == "real"
    r = rows_table(run_suite(Drifting(), plan))
    assert r.repeats.item() == 5 and r.pairs.item() == 3 and r.verdict.item() == "pass"


def test_repeats_are_added_while_indeterminate_up_to_the_bound():
    steady = Scripted([100.0, 101.0, 99.0, 100.5])
    r = rows_table(run_suite(steady, SuitePlan([HeldOutCell(W, 4)], repeats=3, max_repeats=6, seed=2)))
    assert r.verdict.item() == "pass" and r.repeats.item() in (3, 4)  # no repeats added
    noisy = Scripted([60.0, 140.0, 100.0])  # 95% half-width far above 10%: never resolves
    r = rows_table(run_suite(noisy, SuitePlan([HeldOutCell(W, 4)], repeats=3, max_repeats=6, seed=2)))
    assert r.repeats.item() == 6 and r.verdict.item() == "indeterminate"
    assert noisy.blocks.count("real") == 6
    # resolves once the spread of repeats narrows: 3 wide values, then close ones
    # (90, 110, 100: 24.8%; with a fourth 100: 13.0%; a fifth: 8.8%)
    settling = Scripted([90.0, 110.0] + [100.0] * 10)
    r = rows_table(run_suite(settling, SuitePlan([HeldOutCell(W, 4)], repeats=3, max_repeats=9, seed=0)))
    assert r.repeats.item() == 5 and r.verdict.item() == "pass"
    assert r.real_half_pct.item() <= 10


# the synthetic cell: a rollout the probe never ran (an LLM wait, a tool mix), 96 trajectories
SYN = HeldOutWorkload(
    "syn",
    10,
    {"kind": "lognormal", "median": 0.2, "p99": 1.0},
    {"kind": "lognormal", "median": 0.5, "p99": 1.5},
    min_trajectories=96,
)


def _rows_of(drift: float, interleave: bool, seed: int = 0) -> pd.DataFrame:
    plan = SuitePlan(
        [HeldOutCell(SYN, 16)],
        repeats=3,
        max_repeats=3,
        draws=4,
        interleave=interleave,
        seed=seed,
        bootstrap=0,
    )
    return rows_table(run_suite(SyntheticTarget(drift=drift), plan))


def _errors(drift: float, interleave: bool) -> pd.Series:
    return _rows_of(drift, interleave).set_index("metric").error_pct


@pytest.mark.slow
def test_linear_drift_biases_a_sequential_comparison_and_the_interleaved_suite_cancels_it():
    """The machine slows 4% with every block (24-28% over the sitting). Probing first and running
    the real side after compares the fit with a machine that has since slowed: infrastructure
    time and cold start read far low. Interleaved, the error stays within 3% on infrastructure
    time, makespan and the durations, and within 3 points of the drift-free suite's on
    infrastructure time. (Cold start p50 of 96 trajectories has a sampling noise of about 4% a
    repeat, so it is held to the drift-free suite's error less the sequential bias only.)"""
    still, inter, seq = _errors(0.0, True), _errors(0.04, True), _errors(0.04, False)
    for m in ("infra_per_trajectory", "makespan", "duration_p50", "duration_p99"):
        assert abs(inter[m]) <= 3, (m, inter.to_dict())
    assert abs(inter["infra_per_trajectory"] - still["infra_per_trajectory"]) <= 3
    bias = seq - still
    assert bias["infra_per_trajectory"] < -6 and bias["cold_start_p50"] < -6, bias.to_dict()
    assert abs(inter["cold_start_p50"] - still["cold_start_p50"]) < abs(bias["cold_start_p50"])
    # each real repeat against its neighbouring probe blocks (begun with a probe block: 3 pairs):
    # the drift cancels in the pairs
    drifting = _rows_of(0.04, True, seed=3).set_index("metric")
    infra = drifting.loc["infra_per_trajectory"]
    assert infra.pairs == 3 and infra.precision_pct < infra.real_half_pct, infra.to_dict()


def test_report_suite_json_and_history_written_and_read_back(tmp_path):
    res = run_suite(
        Scripted([100.0, 101.0, 99.0]), SuitePlan([HeldOutCell(W, 4), HeldOutCell(W, 8)], repeats=3, seed=1)
    )
    rows = rows_table(res)
    entry = suite_report.suite_entry(
        "docker",
        rows,
        "simrollout validate suite --record x",
        {"cpus": 2},
        {"repeats": 3},
        [{"name": "w", "description": W.describe()}],
        {},
        {},
    )
    suite_report.write(tmp_path, entry)
    suite_report.write(tmp_path, {**entry, "target": "engine"})
    data = suite_report.read_suite(tmp_path / "suite.json")
    assert set(data["targets"]) == {"docker", "engine"}
    d = data["targets"]["docker"]
    assert d["code_hash"] == suite_report.code_hash() and len(d["code_hash"]) == 16
    assert [c["level"] for c in d["cells"]] == [4, 8] and d["overall"]["cells"] == 2
    assert d["cells"][0]["real"] == rows.real.iloc[0] and d["summary"][0]["mape_pct"] == pytest.approx(0.0)
    report = (tmp_path / "REPORT.md").read_text()
    assert report.index("## Docker") < report.index("## llama.cpp engine")
    assert "`simrollout validate suite --record x`" in report and "| w | 8 | m |" in report
    hist = pd.read_csv(tmp_path / "history.csv")
    assert list(hist.columns) == suite_report.HISTORY_COLUMNS and list(hist.target) == ["docker", "engine"]
    assert hist.verdict.iloc[0].startswith("2 pass / 0 miss / 0 indeterminate")
    # the same entry again (a refit that changed nothing) adds no row; another target's does
    suite_report.write(tmp_path, {**entry, "target": "engine"})
    assert len(pd.read_csv(tmp_path / "history.csv")) == 2
    suite_report.write(tmp_path, entry)
    assert list(pd.read_csv(tmp_path / "history.csv").target) == ["docker", "engine", "docker"]
    (tmp_path / "suite.json").write_text("{not json")
    with pytest.raises(Exception, match="suite.json: not valid JSON"):
        suite_report.read_suite(tmp_path / "suite.json")
    assert json.loads(json.dumps(suite_report._clean({"x": float("nan")}))) == {"x": None}


@pytest.mark.slow
def test_validate_suite_rejects_bad_options_and_validate_keeps_its_usage(tmp_path):
    res = cli("validate", "suite", "--record", tmp_path, "--repeats", "2")
    assert res.returncode == 2 and "--repeats" in res.stderr and "Traceback" not in res.stderr
    res = cli("validate", "suite", "--record", tmp_path, "--workloads", "nope")
    assert res.returncode == 2 and "unknown workload 'nope'" in res.stderr
    res = cli("validate", "--concurrency", "1")  # the plain validation still needs its profile
    assert res.returncode == 2 and "--profile" in res.stderr
    assert "suite" in cli("validate", "--help").stdout


def test_a_cells_profile_carries_the_drift_its_probe_blocks_read():
    """On the synthetic substrate slowing 4% a block, the cell's profile reads the drift over the
    sitting from its own probe blocks (each block a reference block) and its refits carry it."""
    import yaml

    target = SyntheticTarget(drift=0.04)
    plan = SuitePlan([HeldOutCell(SYN, 8)], repeats=3, max_repeats=3, draws=2, seed=0, bootstrap=6)
    rows = rows_table(run_suite(target, plan))
    assert rows.band_source.str.endswith("bootstrap B=6 with the sitting's drift").all(), rows.band_source
    unc = yaml.safe_load((target.folder / "syn-8" / "profile.yaml").read_text())["uncertainty"]
    assert unc["drift_applied"] and set(unc["drift"]) == {"create", "exec", "teardown"}
    td = unc["drift"]["teardown"]
    # the probe blocks ran 2 blocks apart, each 8% slower than the one before: the last about 1.08^2
    # times the first (medians of 4-16 lognormal teardowns per level: a few % of noise)
    f = td["factor_by_block"]
    assert len(f) >= 3 and all(np.diff(f) > 0), td
    assert abs(np.log(f[-1] / f[0]) - (len(f) - 1) * np.log(1.08)) < 0.06, td
    assert unc["refits"] == 6


def test_recorded_records_are_tagged_by_the_schedules_time_spans():
    """A recorded cell (``--refit``): its records carry no block, so each is tagged by the probe
    block whose time span holds its start; one in no probe block is tagged with none."""
    from simrollout.validation.suite import in_blocks

    schedule = [{"block": "probe", "index": 0, "start": 100.0, "seconds": 10.0},
                {"block": "real", "index": 0, "start": 112.0, "seconds": 5.0},
                {"block": "probe", "index": 1, "start": 119.0, "seconds": 10.0}]  # fmt: skip
    recs = [{"start": 101.0}, {"start": 109.5}, {"start": 120.0}, {"start": 114.5, "suite_block": 7}]
    assert [r["suite_block"] for r in in_blocks(recs, schedule)] == [0, 0, 1, None]
    assert "suite_block" not in recs[0]  # the records themselves are left as they were
    tagged = [dict(r, suite_block=k) for r, k in zip(recs, (0, 0, 1, 1))]
    assert [r["suite_block"] for r in in_blocks(tagged, [])] == [0, 0, 1, 1]  # a live cell's own tags


def test_a_new_sitting_of_a_cell_starts_its_probe_records_afresh(tmp_path, monkeypatch):
    """A cell recorded before (probes.jsonl.gz, probes.jsonl) and run again live: its first probe
    block removes the earlier sitting's records, so the cell's record (read by --refit) holds this
    sitting's blocks alone; its later blocks append."""
    import gzip

    from simrollout.calibration import probe as probe_mod
    from simrollout.validation.suite_docker import DockerTarget

    def fake_probe(backend, plan, out):
        with open(out, "a") as f:
            f.write(json.dumps({"level": plan.levels[0]}) + "\n")

    monkeypatch.setattr(probe_mod, "probe", fake_probe)
    monkeypatch.setattr(probe_mod, "read_records", lambda paths: [json.loads(x) for x in open(paths[0])])
    target = DockerTarget(backend=None, folder=tmp_path)
    cell = HeldOutCell(W, 8)
    folder = tmp_path / "w-8"
    folder.mkdir()
    with gzip.open(folder / "probes.jsonl.gz", "wt") as f:
        f.write('{"level": 99}\n')
    (folder / "probes.jsonl").write_text('{"level": 98}\n')
    assert [r["level"] for r in target.probe(cell, 0)] == [1, 4, 8]  # this block's levels alone
    assert not (folder / "probes.jsonl.gz").exists()
    assert [r["level"] for r in target.probe(cell, 1)] == [1, 4, 8]
    assert [json.loads(x)["level"] for x in open(folder / "probes.jsonl")] == [1, 4, 8, 1, 4, 8]
