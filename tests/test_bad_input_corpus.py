"""A corpus of bad inputs, one or more per class and per verb (with tests/test_bad_inputs.py, over
a hundred): every one exits 2 with one paragraph naming the file or option and the field, and no
traceback."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import make
from tests.test_bad_inputs import check_case

GOOD = make()
RECORD = {
    "run_id": "r",
    "backend": "b",
    "backend_version": "0",
    "engine_version": "0",
    "host": "h",
    "image": "i",
    "phase": "create",
    "start": 0.0,
    "latency": 0.1,
    "concurrency": 1,
    "mode": "sequential",
    "ok": True,
    "error": None,
    "sandbox": 0,
}


def m(**over):
    return {"s.yaml": make(**over)}


def drop(path):
    d = make()
    node = d
    *parents, last = path.split(".")
    for p in parents:
        node = node[p]
    node.pop(last)
    return {"s.yaml": d}


RUN = ["run", "{s.yaml}", "-o", "{out}"]


def SWEEP(*a):
    return ["sweep", "{s.yaml}", *a]


def PLAN(*a):
    return ["plan", "{s.yaml}", *a]


CAL = ["calibrate", "{p.jsonl}", "-o", "{out.yaml}"]


def recs(r, n=12):
    return "".join(json.dumps({**RECORD, **r, "sandbox": k}) + "\n" for k in range(n))


NEW = {
    # run: schema
    "unknown top-level field": (m(colour="red"), RUN, ["colour", "unknown field"]),
    "wrong version": (m(version=2), RUN, ["version"]),
    "missing workload": (drop("workload"), RUN, ["workload", "missing"]),
    "empty substrates": (m(substrates=[]), RUN, ["substrates"]),
    "duplicate substrate names": (m(substrates=[GOOD["substrates"][0]] * 2), RUN, ["substrates", "unique"]),
    "negative concurrency": (m(**{"cluster.concurrency": -4}), RUN, ["cluster.concurrency"]),
    "empty concurrency list": (m(**{"cluster.concurrency": []}), RUN, ["cluster.concurrency"]),
    "zero tool weight": (
        m(**{"workload.tools": {"shell": {"weight": 0, "latency": 1}}}),
        RUN,
        ["workload.tools.shell.weight"],
    ),
    "calls but no tools": (
        m(**{"workload.tools": {}, "workload.calls_per_step": 2}),
        RUN,
        ["calls_per_step", "tools"],
    ),
    "unknown distribution kind": (
        m(**{"workload.llm_time": {"kind": "normal", "mean": 1}}),
        RUN,
        ["workload.llm_time", "kind"],
    ),
    "one-point quantiles": (
        m(**{"workload.llm_time": {"kind": "empirical", "quantiles": {0.5: 1}}}),
        RUN,
        ["s.yaml", "workload.llm_time", "at least two quantiles"],
    ),
    "quantile above 1": (
        m(**{"workload.llm_time": {"kind": "empirical", "quantiles": {0.5: 1, 1.5: 2}}}),
        RUN,
        ["s.yaml", "workload.llm_time", "strictly between 0 and 1", "got 1.5"],
    ),
    "empty samples": (
        m(**{"workload.llm_time": {"kind": "empirical", "samples": []}}),
        RUN,
        ["s.yaml", "workload.llm_time.samples", "at least 1 item"],
    ),
    "cold start quantile above 1 (the issue's example)": (
        m(**{"substrates.0.cold_start": {"kind": "empirical", "quantiles": {1.5: 0.2, 0.9: 0.4}}}),
        RUN,
        ["s.yaml", "substrates.0.cold_start", "strictly between 0 and 1"],
    ),
    "quantile at 0": (
        m(**{"substrates.0.cold_start": {"kind": "empirical", "quantiles": {0: 0.2, 0.9: 0.4}}}),
        RUN,
        ["s.yaml", "substrates.0.cold_start", "strictly between 0 and 1", "got 0"],
    ),
    "discrete weights mismatch": (
        m(**{"workload.calls_per_step": {"kind": "discrete", "values": [1, 2], "weights": [1]}}),
        RUN,
        ["workload.calls_per_step"],
    ),
    "negative mixture weight": (
        m(**{"workload.llm_time": {"kind": "mixture", "components": [{"weight": -1, "dist": 1}]}}),
        RUN,
        ["workload.llm_time"],
    ),
    "negative lognormal median": (
        m(**{"workload.llm_time": {"kind": "lognormal", "median": -1, "p99": 3}}),
        RUN,
        ["workload.llm_time"],
    ),
    "zero exponential mean": (
        m(**{"workload.llm_time": {"kind": "exponential", "mean": 0}}),
        RUN,
        ["workload.llm_time"],
    ),
    "quota and hosts": (
        m(**{"substrates.0.capacity": {"quota": 5, "hosts": 2}}),
        RUN,
        ["substrates.0.capacity", "not both"],
    ),
    "failure probability 1.5": (
        m(**{"substrates.0.failures": {"exec": 1.5}}),
        RUN,
        ["substrates.0.failures.exec"],
    ),
    "failure curve at n=0": (
        m(**{"substrates.0.failures": {"exec": {0: 0.1}}}),
        RUN,
        ["substrates.0.failures.exec"],
    ),
    "contention multiplier 0": (
        m(**{"substrates.0.contention": {"exec": {1: 1, 8: 0}}}),
        RUN,
        ["substrates.0.contention.exec"],
    ),
    "contention weight of an unknown phase": (
        m(**{"substrates.0.contention": {"create": 0.5, "weights": {"create": {"execs": 0.25}}}}),
        RUN,
        ["substrates.0.contention.weights.create.execs", "'create', 'exec' or 'teardown'"],
    ),
    "contention weight of a phase's own operations": (
        m(**{"substrates.0.contention": {"create": 0.5, "weights": {"create": {"create": 0.5}}}}),
        RUN,
        ["substrates.0.contention", "own operations count one"],
    ),
    "negative price": (
        m(**{"substrates.0.billing": {"price_per_second": -1}}),
        RUN,
        ["substrates.0.billing.price_per_second"],
    ),
    "poisson without rate": (m(arrivals={"kind": "poisson"}), RUN, ["arrivals", "rate"]),
    "sync without batch": (m(policy={"mode": "sync"}), RUN, ["policy", "batch_size"]),
    "zero timeout": (m(policy={"timeout": 0}), RUN, ["policy.timeout"]),
    "negative retries": (m(policy={"retries": -1}), RUN, ["policy.retries"]),
    "negative warm pool": (m(policy={"warm_pool": -1}), RUN, ["policy.warm_pool"]),
    "negative seed": (m(seed=-1), RUN, ["seed"]),
    "zero replications": (m(replications=0), RUN, ["replications"]),
    "bogus fidelity": (m(fidelity="exact"), RUN, ["fidelity"]),
    "missing profile": (m(**{"substrates.0.profile": "nope.yaml"}), RUN, ["nope.yaml", "not found"]),
    "profile bad YAML": ({**m(**{"substrates.0.profile": "p.yaml"}), "p.yaml": "a: [1, 2"}, RUN, ["p.yaml"]),
    "profile bad field": (
        {
            **m(**{"substrates.0.profile": "p.yaml"}),
            "p.yaml": {"version": 1, "name": "p", "substrate": {"cold_start": -1}},
        },
        RUN,
        ["p.yaml", "cold_start"],
    ),
    "scenario is a list": ({"s.yaml": "- 1\n- 2\n"}, RUN, ["mapping"]),
    "empty scenario": ({"s.yaml": ""}, RUN, ["s.yaml"]),
    "YAML syntax error": ({"s.yaml": "version: 1\nworkload: {steps: [1\n"}, RUN, ["s.yaml", "line"]),
    "tab indentation": ({"s.yaml": "version: 1\n\tname: x\n"}, RUN, ["s.yaml"]),
    "NaN latency": (
        {"s.yaml": yaml.safe_dump(GOOD).replace("teardown: 0", "teardown: .nan")},
        RUN,
        ["substrates.0.teardown"],
    ),
    "string for a number": (m(**{"workload.steps": "many"}), RUN, ["workload.steps"]),
    "huge trajectories": (m(**{"workload.trajectories": 10**15}), RUN, ["workload.trajectories", "memory"]),
    "steps tail overflow": (
        m(**{"workload.steps": {"kind": "lognormal", "mu": 700, "sigma": 5}}),
        RUN,
        ["workload.steps"],
    ),
    "file too large": ({"s.yaml": "# " + "x" * (60 * 2**20) + "\n"}, RUN, ["s.yaml", "too large"]),
    "missing scenario file": ({}, ["run", "{nope.yaml}"], ["nope.yaml", "not found"]),
    "run --seed -1": (m(), ["run", "{s.yaml}", "--seed", "-1", "-o", "{out}"], ["seed"]),
    "run --fidelity bogus": (m(), ["run", "{s.yaml}", "--fidelity", "bogus", "-o", "{out}"], ["fidelity"]),
    "run --executor bogus": (m(), ["run", "{s.yaml}", "--executor", "bogus", "-o", "{out}"], ["--executor"]),
    "run --jobs 0": (m(), ["run", "{s.yaml}", "--jobs", "0", "-o", "{out}"], ["--jobs"]),
    # sweep
    "sweep no equals": (m(), SWEEP("--set", "cluster.concurrency"), ["--set", "PATH=VALUE"]),
    "sweep unknown path": (m(), SWEEP("--set", "cluster.nope=1"), ["cluster.nope"]),
    "sweep index out of range": (m(), SWEEP("--set", "substrates.9.name=x"), ["substrates.9", "index"]),
    "sweep path through a number": (m(), SWEEP("--set", "seed.x=1"), ["seed", "not a mapping"]),
    "sweep bad executor": (m(), SWEEP("--set", "seed=1,2", "--executor", "bogus"), ["--executor"]),
    "sweep wrong type": (m(), SWEEP("--set", "cluster.concurrency=abc"), ["cluster.concurrency"]),
    # plan
    "plan bogus deadline": (m(), PLAN("--deadline", "soon"), ["--deadline"]),
    "plan zero deadline": (m(), PLAN("--deadline", "0h"), ["--deadline"]),
    "plan negative budget": (m(), PLAN("--budget", "-1"), ["--budget"]),
    "plan two targets": (m(), PLAN("--deadline", "1h", "--budget", "5"), ["exactly one"]),
    "plan no target": (m(), PLAN(), ["exactly one"]),
    "plan zero sample": (m(), PLAN("--deadline", "1h", "--sample", "0"), ["--sample"]),
    "plan max-failed 2": (m(), PLAN("--deadline", "1h", "--max-failed", "2"), ["--max-failed"]),
    "plan sensitivity 1.5": (m(), PLAN("--deadline", "1h", "--sensitivity", "1.5"), ["--sensitivity"]),
    "plan negative check": (m(), PLAN("--deadline", "1h", "--check", "-1"), ["--check"]),
    "plan warm-pool words": (m(), PLAN("--deadline", "1h", "--warm-pool", "x"), ["--warm-pool"]),
    "plan zero hosts": (m(), PLAN("--deadline", "1h", "--hosts", "0"), ["--hosts"]),
    "plan steps-per-day without training": (m(), PLAN("--steps-per-day", "10"), ["training"]),
    "plan negative steps-per-day": (m(), PLAN("--steps-per-day", "-10"), ["--steps-per-day"]),
    # probe
    "probe unknown backend": ({}, ["probe", "lxc", "-o", "{p.jsonl}"], ["lxc"]),
    "probe bogus mode": ({}, ["probe", "process", "--mode", "wild", "-o", "{p.jsonl}"], ["--mode"]),
    "probe negative gap": ({}, ["probe", "process", "--gap", "-1", "-o", "{p.jsonl}"], ["--gap"]),
    "probe zero level": (
        {},
        ["probe", "process", "--concurrency", "0", "-o", "{p.jsonl}"],
        ["--concurrency"],
    ),
    "probe word level": (
        {},
        ["probe", "process", "--concurrency", "1,x", "-o", "{p.jsonl}"],
        ["--concurrency"],
    ),
    "probe a local tag on kubernetes": (
        {},
        ["probe", "kubernetes", "--image", "simrollout-busybox:local", "-o", "{p.jsonl}"],
        ["--image", "cannot pull"],
    ),
    "probe kubernetes without a cluster": (
        {},
        ["probe", "kubernetes", "-o", "{p.jsonl}"],
        ["no cluster", "KUBECONFIG"],
    ),
    "probe a local tag on ec2": (
        {},
        ["probe", "ec2", "--image", "mine:local", "-o", "{p.jsonl}"],
        ["--image"],
    ),
    # calibrate
    "calibrate missing file": (
        {},
        ["calibrate", "{nope.jsonl}", "-o", "{out.yaml}"],
        ["nope.jsonl", "not found"],
    ),
    "calibrate a directory": ({"d/x": "x"}, ["calibrate", "{d}", "-o", "{out.yaml}"], ["is a directory"]),
    "calibrate binary": ({"p.jsonl": b"\xff\xfe\x00"}, CAL, ["p.jsonl", "not UTF-8"]),
    "calibrate JSON syntax": ({"p.jsonl": '{"run_id": '}, CAL, ["p.jsonl", "line 1"]),
    "calibrate missing phase": (
        {"p.jsonl": json.dumps({k: v for k, v in RECORD.items() if k != "phase"}) + "\n"},
        CAL,
        ["line 1", "phase"],
    ),
    "calibrate negative latency": ({"p.jsonl": recs({"latency": -1})}, CAL, ["line 1", "latency"]),
    "calibrate unknown phase": ({"p.jsonl": recs({"phase": "boot"})}, CAL, ["line 1", "phase"]),
    "calibrate inf latency": (
        {"p.jsonl": recs({"latency": 1e999}).replace("Infinity", "Infinity")},
        CAL,
        ["line 1", "latency"],
    ),
    "calibrate -o a directory": (
        {"p.jsonl": recs({}), "d/x": "x"},
        ["calibrate", "{p.jsonl}", "-o", "{d}"],
        ["is a directory"],
    ),
    # validate
    "validate bad profile YAML": ({"x.yaml": "a: [1"}, ["validate", "--profile", "{x.yaml}"], ["x.yaml"]),
    "validate zero level": (
        {"x.yaml": "a: 1"},
        ["validate", "--profile", "{x.yaml}", "--concurrency", "0"],
        ["--concurrency"],
    ),
    # cleanup
    "cleanup unknown backend": ({}, ["cleanup", "lxc"], ["lxc"]),
    "cleanup bogus age": ({}, ["cleanup", "process", "--older-than", "soon"], ["--older-than"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NEW))
def test_corpus(tmp_path, name):
    check_case(tmp_path, *NEW[name])
