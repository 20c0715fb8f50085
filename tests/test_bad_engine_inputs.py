"""Bad inputs of the serving-engine model: exit 2, one paragraph naming file and field."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import make
from tests.test_bad_inputs import check_case

ENGINE = {"iteration": {"base": 0.01, "per_prefill_token": 1e-5}, "kv_capacity_tokens": 100_000}


def tok(tokens=None, engine=ENGINE, **over):
    d = make(**over)
    d["workload"].pop("llm_time")
    d["workload"]["tokens"] = tokens or {"prompt": 1000, "appended": 100, "output": 50}
    d["cluster"]["inference"] = {"engines": 2, "engine": copy.deepcopy(engine)}
    return d


def profile_without(field):
    e = copy.deepcopy(ENGINE)
    e.pop(field)
    d = tok()
    d["cluster"]["inference"] = {"engines": 2, "profile": "engine.yaml"}
    return {"s.yaml": d, "engine.yaml": {"version": 1, "name": "e", "engine": e}}


RUN = ["run", "{s.yaml}", "-o", "{out}"]
CASES = {
    "negative tokens": ({"s.yaml": tok({"prompt": -5, "appended": 100, "output": 50})}, RUN,
                        ["workload.tokens.prompt", "greater than or equal to 0"]),
    "zero output": ({"s.yaml": tok({"prompt": 5, "appended": 1, "output": 0})}, RUN, ["output", "at least 1"]),
    "kv smaller than a request": (
        {"s.yaml": tok(engine={**ENGINE, "kv_capacity_tokens": 500})}, RUN,
        ["KV cache", "500", "max_context"],
    ),
    "kv smaller than the context grows": (
        {"s.yaml": tok(**{"workload.steps": 2000})}, RUN, ["KV cache", "grows over the turns"],
    ),
    "profile missing a field": (profile_without("kv_capacity_tokens"), RUN,
                                ["engine.yaml", "kv_capacity_tokens", "missing"]),
    "profile not found": (
        {"s.yaml": {**tok(), "cluster": {"concurrency": 1, "inference": {"engines": 1, "profile": "nope.yaml"}}}},
        RUN, ["engine profile 'nope.yaml' not found"],
    ),
    "tokens without an engine": (
        {"s.yaml": {**tok(), "cluster": {"concurrency": 1, "inference": {"engines": 1}}}}, RUN,
        ["workload.tokens needs cluster.inference with an engine"],
    ),
    "tokens and llm_time": ({"s.yaml": {**tok(), "workload": {**tok()["workload"], "llm_time": 1}}}, RUN,
                            ["either 'llm_time'", "not both"]),
    "negative iteration cost": (
        {"s.yaml": tok(engine={**ENGINE, "iteration": {"base": 0.01, "per_prefill_token": -1}})}, RUN,
        ["per_prefill_token"],
    ),
    "bad routing": (
        {"s.yaml": {**tok(), "cluster": {"concurrency": 1, "inference": {"engines": 1, "engine": ENGINE,
                                                                           "routing": "random"}}}},
        RUN, ["routing"],
    ),
    "probe openai without url": ({}, ["probe", "openai", "-o", "{p.jsonl}"], ["--base-url"]),
    "probe openai bad extra": ({}, ["probe", "openai", "--base-url", "http://127.0.0.1:9", "--request-extra", "[1]"],
                               ["--request-extra", "JSON object"]),
    "probe openai one output token": ({}, ["probe", "openai", "--base-url", "http://127.0.0.1:9",
                                           "--output-tokens", "1"], ["--output-tokens"]),
    "validate engine without url": ({"e.yaml": {"version": 1, "name": "e", "engine": ENGINE}},
                                    ["validate", "--engine", "--profile", "{e.yaml}"], ["--base-url"]),
    "plan engines without a tier": ({"s.yaml": make()}, ["plan", "{s.yaml}", "--throughput", "5",
                                                          "--engines", "1,2"], ["--engines needs cluster.inference"]),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_bad_engine_input(name, tmp_path):
    files, argv, words = CASES[name]
    check_case(tmp_path, files, argv, words)
