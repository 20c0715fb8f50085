"""Bad input: one paragraph naming file, field and line; exit code 2; no traceback."""

import pytest
import yaml

from tests.conftest import cli, make


def write(tmp_path, data, name="s.yaml"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return p


CASES = {
    "unknown field": (make(**{"workload.stepz": 3}), ["workload.stepz", "unknown field"]),
    "wrong type": (make(**{"workload.trajectories": "many"}), ["workload.trajectories", "integer"]),
    "negative latency": (
        make(**{"substrates.0.teardown": -0.5}),
        ["substrates.0.teardown", "greater than or equal to 0"],
    ),
    # an overflowed count is refused before anything is allocated (one entry per engine or host)
    "engines past any cluster": (
        make(**{"cluster.inference": {"engines": 67_072_177_488_551_168, "slowdown": 0.02}}),
        ["cluster.inference.engines", "less than or equal to 1000000"],
    ),
    "hosts past any fleet": (
        make(**{"substrates.0.capacity": {"hosts": 10**12}}),
        ["substrates.0.capacity.hosts", "less than or equal to 10000000"],
    ),
    "probability above 1": (
        make(**{"substrates.0.failures": {"create": 1.5}}),
        ["substrates.0.failures.create", "less than or equal to 1"],
    ),
    "quantiles out of order": (
        make(**{"substrates.0.cold_start": {"kind": "empirical", "quantiles": {0.5: 2.0, 0.99: 1.0}}}),
        ["substrates.0.cold_start", "out of order"],
    ),
    "infinite mean": (
        make(**{"workload.llm_time": {"kind": "loglogistic", "c": 0.8, "scale": 1.0}}),
        ["workload.llm_time", "infinite mean"],
    ),
    "unknown kind": (
        make(**{"workload.llm_time": {"kind": "pareto"}}),
        ["workload.llm_time", "unknown distribution kind"],
    ),
    "sync without batch": (make(**{"policy": {"mode": "sync"}}), ["policy", "batch_size"]),
    "reuse with a warm pool": (
        make(**{"policy.reuse": True, "policy.warm_pool": 2, "substrates.0.reset": 0.1}),
        ["policy.reuse", "warm_pool"],
    ),
    "reuse without reset": (make(**{"policy.reuse": True}), ["policy.reuse", "substrates.0.reset ('s')"]),
    "image size negative": (
        make(**{"workload.images": {"count": 4, "size_gb": -1.0}}),
        ["workload.images.size_gb", "greater than or equal to 0"],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_bad_scenario_gets_one_paragraph_and_exit_2(tmp_path, case):
    data, expected = CASES[case]
    p = write(tmp_path, data)
    r = cli("run", str(p), "-o", str(tmp_path / "out"))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr + r.stdout
    msg = " ".join(r.stderr.split())
    assert str(p) in msg
    for part in expected:
        assert part in msg, msg
    assert "(line " in msg
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_missing_file(tmp_path):
    r = cli("run", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "file not found" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_malformed_yaml_names_the_line(tmp_path):
    p = write(tmp_path, "version: 1\nworkload: {trajectories: 3\nsubstrates: []\n")
    r = cli("run", str(p))
    assert r.returncode == 2
    assert "malformed YAML at line" in " ".join(r.stderr.split())
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_missing_profile_is_an_input_error(tmp_path):
    d = make()
    d["substrates"] = [{"profile": "no/such.yaml"}]
    r = cli("run", str(write(tmp_path, d)))
    assert r.returncode == 2 and "no/such.yaml" in r.stderr and "Traceback" not in r.stderr


def test_profile_fields_are_merged_and_overridden(tmp_path):
    from simrollout.scenario import load_scenario

    prof = {
        "version": 1,
        "name": "dock",
        "substrate": {"cold_start": 0.5, "exec_overhead": 0.05, "teardown": 0.1},
    }
    write(tmp_path, prof, "p.yaml")
    d = make()
    d["substrates"] = [{"profile": "p.yaml", "teardown": 0.2}]
    scn = load_scenario(write(tmp_path, d))
    sub = scn.substrates[0]
    assert sub.name == "dock" and sub.cold_start.mean() == 0.5 and sub.teardown.mean() == 0.2
