"""The schema-derived fuzzer: every field of the scenario, the substrate profile and the engine
profile (tests/schema_cases.py) given a wrong type, out of range, inf, NaN, empty, huge, missing
and an unknown key next to it. A case the schema makes invalid is one InputError: one paragraph
that starts with the file and names the field (or its section), raised with no warning; a case
the schema lets through is accepted or refused the same way. In process for all, through the CLI
for a sample."""

from __future__ import annotations

import copy
import random
import re
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from simrollout import distributions as D
from simrollout.errors import InputError
from simrollout.scenario import Engine, Scenario, Substrate, load_scenario, scenario_from_dict
from tests.conftest import cli
from tests.schema_cases import DELETE, DIST_EXAMPLES, Case, apply, model_cases

TOOL = {"weight": 1, "latency": {"kind": "lognormal", "median": 0.5, "p99": 4.0}}
SUBSTRATE = {
    "name": "box",
    "cold_start": {"kind": "lognormal", "median": 0.2, "p99": 1.0},
    "warm_start": 0.05,
    "exec_overhead": 0.05,
    "teardown": 0.1,
    "failures": {"create": 0.01, "exec": {1: 0.001, 8: 0.01}, "teardown": 0.0},
    "create_rate": 20,
    "capacity": {"hosts": 2, "sandboxes_per_host": 16},
    "contention": {"create": 0.1, "exec": {1: 1.0, 8: 2.0}, "teardown": 0.05, "scope": "host",
                   "weights": {"create": {"exec": 0.5}}, "shared": True},
    "billing": {"price_per_second": 0.0001, "minimum_seconds": 10},
    "image_cache": {"pull_mb_s": 50, "cache_gb": 20},
    "reset": 0.2,
}  # fmt: skip
# every section of the scenario, in two scenarios (some sections exclude each other)
TIME = {
    "version": 1, "name": "fuzz", "seed": 1, "replications": 1, "fidelity": "auto",
    "workload": {"trajectories": 50, "steps": 4, "llm_time": 1.0, "calls_per_step": 1,
                 "tools": {"shell": TOOL}, "setup": 0.5, "reward": 0.2,
                 "images": {"count": 4, "size_gb": 0.5, "samples": 2}, "max_turns": 10, "tool_timeout": 30},
    "substrates": [SUBSTRATE],
    "cluster": {"concurrency": [4, 8], "inference": {"engines": 2, "slowdown": 0.05, "price_per_hour": 2.0},
                "clients": 2},
    "policy": {"mode": "async", "timeout": 600, "retries": 1, "retry_backoff": 0.5, "warm_pool": 2},
    "arrivals": {"kind": "poisson", "rate": 2.0},
}  # fmt: skip
ENGINE = {
    "iteration": {"base": 0.01, "per_prefill_token": 1e-5, "per_prefill_attention": 1e-9, "per_decode": 1e-4,
                  "per_context_token": 1e-8},
    "kv_capacity_tokens": 200_000, "max_batch_tokens": 4096, "max_running": 64, "gpus": 1, "overhead": 0.001,
}  # fmt: skip
TOKENS = {
    **{k: v for k, v in TIME.items() if k not in ("arrivals", "policy")},
    "workload": {"steps": 4, "tokens": {"prompt": 500, "appended": 50, "output": 20, "max_context": 8000},
                 "tools": {"shell": TOOL}},
    "substrates": [{**SUBSTRATE, "capacity": {"quota": 32}}],
    "cluster": {"concurrency": 8, "inference": {"engines": 2, "engine": ENGINE, "routing": "sticky",
                                                 "prefix_cache": True}},
    "policy": {"reuse": True},
    "training": {"prompts_per_step": 2, "samples_per_prompt": 4, "steps": 3, "mode": "one_step_off",
                 "max_staleness": 1, "partial_rollouts": True, "train_time": {"kind": "linear", "intercept": 5,
                                                                              "per_step": 0.1},
                 "weight_sync_time": 1.0, "placement": "disaggregated", "trainer": {"gpus": 2, "price_per_hour": 3},
                 "task_spread": 0.2, "over_sampling": 0.5, "leftover": "carry",
                 "dynamic_sampling": {"alpha": 2, "beta": 2}, "on_failure": "retry", "retries": 1},
}  # fmt: skip
PROFILE = {"version": 1, "name": "box", "provenance": {"method": "fuzz"},
           "substrate": {k: v for k, v in SUBSTRATE.items() if k != "name"}}  # fmt: skip
ENGINE_PROFILE = {"version": 1, "name": "engine", "provenance": {}, "engine": ENGINE}


def _profile_scenario(profile: str, engine: str) -> dict:
    d = copy.deepcopy(TOKENS)
    d["substrates"] = [{"profile": profile}]
    d["cluster"]["inference"] = {"engines": 2, "profile": engine}
    return d


BASES = {"time": TIME, "tokens": TOKENS}


def all_cases() -> list[Case]:
    out = [replace(c, file=f"scenario[{name}]", edits=[("base", name), *c.edits])
           for name, base in BASES.items() for c in model_cases(Scenario, base, (), "scenario", [])]  # fmt: skip
    # a profile's substrate is the scenario's Substrate model, whose distributions' own fields the
    # scenario cases fuzz kind by kind: here every field once (depth 1), to check the file is named
    subs = [
        c
        for c in model_cases(Substrate, PROFILE["substrate"], ("substrate",), "profile", [], depth=1)
        if c.path[1:2] not in (("name",), ("profile",))
    ]  # set by the profile's own name; a scenario's
    engines = list(model_cases(Engine, ENGINE, ("engine",), "engine", []))
    top = []
    for f, section in (("profile", "substrate"), ("engine", "engine")):
        top += [
            Case(f, (k,), "missing", [((k,), DELETE)], "invalid", "required")
            for k in ("version", "name", section)
        ]
        top += [Case(f, ("version",), "out of range", [(("version",), 2)], "invalid", "Literal[1]"),
                Case(f, ("provenance",), "wrong type", [(("provenance",), "abc")], "invalid", "a mapping"),
                Case(f, (section,), "wrong type", [((section,), "abc")], "invalid", "a mapping")]  # fmt: skip
    return out + subs + engines + top


CASES = all_cases()


def _write(tmp: Path, case: Case) -> tuple[Path, Path]:
    """The case's files; returns (the scenario to load, the file the error must name)."""
    edits = list(case.edits)
    if case.file.startswith("scenario"):
        base = BASES[edits.pop(0)[1]]
        data = apply(base, edits)
        path = tmp / "s.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False, width=1000))
        return path, path
    prof, eng = copy.deepcopy(PROFILE), copy.deepcopy(ENGINE_PROFILE)
    if case.file == "profile":
        prof = apply(prof, edits)
    else:
        eng = apply(eng, edits)
    (tmp / "p.yaml").write_text(yaml.safe_dump(prof, sort_keys=False, width=1000))
    (tmp / "e.yaml").write_text(yaml.safe_dump(eng, sort_keys=False, width=1000))
    scn = tmp / "s.yaml"
    scn.write_text(yaml.safe_dump(_profile_scenario("p.yaml", "e.yaml"), sort_keys=False))
    return scn, tmp / ("p.yaml" if case.file == "profile" else "e.yaml")


def _names_field(msg: str, case: Case) -> bool:
    """The message names the field, or its section (a check across a section's fields)."""
    path = case.path
    wanted = [".".join(map(str, path[:k])) for k in range(len(path), max(len(path) - 3, 0), -1)]
    return any(re.search(rf"(?<![\w.]){re.escape(w)}(?!\w)", msg) for w in wanted if w)


def check(case: Case, tmp: Path) -> str:
    """Load the case: an InputError naming file and field, or (where the schema allows) a scenario."""
    if case.file.startswith("scenario"):  # in process: the mapping as the YAML would give it
        edits = list(case.edits)
        data, named = apply(BASES[edits.pop(0)[1]], edits), tmp / "s.yaml"
        load = lambda: scenario_from_dict(data, named)  # noqa: E731
    else:
        scn, named = _write(tmp, case)
        load = lambda: load_scenario(scn)  # noqa: E731
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            load()
    except InputError as exc:
        msg = str(exc)
        # a value the profile's schema allows may still be refused by the scenario using it
        files = (str(named),) if case.expect == "invalid" else (str(named), str(tmp / "s.yaml"))
        assert msg.startswith(files), f"{case.id}: does not start with {named}: {msg}"
        assert "\n" not in msg.strip(), f"{case.id}: not one paragraph: {msg}"
        assert _names_field(msg, case), f"{case.id}: does not name {case.dotted}: {msg}"
        return "refused"
    assert case.expect == "maybe", f"{case.id}: accepted, but the schema says {case.why}"
    return "accepted"


_FIELDS: dict[str, list[Case]] = {}
for _c in CASES:
    _FIELDS.setdefault(f"{_c.file}:{'.'.join(map(str, _c.path[:3]))}", []).append(_c)


@pytest.mark.slow
@pytest.mark.parametrize("group", list(_FIELDS))
def test_every_field_refuses_bad_values_with_one_paragraph(group, tmp_path):
    outcomes = {c.id: check(c, tmp_path) for c in _FIELDS[group]}
    assert outcomes


def test_the_cases_cover_every_section_and_kind():
    """Every section is reached (a section missing from the bases would go unfuzzed) and every
    distribution kind has an example."""
    paths = {c.path[:2] for c in CASES if c.file.startswith("scenario")}
    for section in ("training", "workload", "substrates", "cluster", "policy", "arrivals"):
        assert (section,) in {p[:1] for p in paths}
    reached = {c.dotted for c in CASES}
    for dotted in ("training.trainer.gpus", "training.dynamic_sampling.alpha", "workload.tokens.max_context",
                   "workload.images.size_gb", "substrates.0.image_cache.pull_mb_s", "policy.reuse",
                   "substrates.0.contention.scope", "substrates.0.contention.weights.create.exec",
                   "cluster.inference.engine.iteration.per_decode", "engine.kv_capacity_tokens",
                   "substrate.cold_start", "substrates.0.cold_start.quantiles", "workload.steps.samples"):  # fmt: skip
        assert dotted in reached, dotted
    kinds = {m.model_fields["kind"].default for m in D.Dist.__origin__.__args__}
    assert kinds == set(DIST_EXAMPLES)
    assert len(CASES) > 2000


# through the CLI: a sample of the invalid cases, a fresh process each (a few dozen: they are slow)
SAMPLE = random.Random(33).sample([c for c in CASES if c.expect == "invalid"], 24)


@pytest.mark.slow
@pytest.mark.parametrize("case", SAMPLE, ids=[c.id for c in SAMPLE])
def test_a_sample_through_the_cli_exits_2_with_one_paragraph(case, tmp_path):
    scn, named = _write(tmp_path, case)
    r = cli("run", scn, "-o", tmp_path / "out")
    assert r.returncode == 2, (case.id, r.stdout[-300:], r.stderr[-800:])
    assert "Traceback" not in r.stderr and "Warning:" not in r.stderr
    msg = " ".join(r.stderr.split())
    assert msg.startswith(f"error: {named}"), msg
    assert _names_field(msg, case), msg
    assert not (tmp_path / "out").exists()
