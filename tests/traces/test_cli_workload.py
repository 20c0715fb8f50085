"""``simrollout workload``: characterisation, workload section with provenance, plot; errors."""

from __future__ import annotations

import pytest
import yaml

from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from tests.conftest import cli

from .conftest import SAMPLE, ZERO


@pytest.mark.slow
def test_workload_verb_writes_section_and_plot(traces, tmp_path):
    _, (path,) = traces["tracelab"]
    out = tmp_path / "wl.yaml"
    r = cli("workload", "tracelab", str(path), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "prefix-cache hit" in r.stdout and "tool latency, shell" in r.stdout and "fits:" in r.stdout
    assert "human-paced gaps" in r.stdout and "(excluded from the workload)" in r.stdout
    doc = yaml.safe_load(out.read_text())
    prov = doc["provenance"]
    assert prov["files"] == [path.name] and prov["trajectories"] == 60 and prov["skipped"] == {}
    assert prov["dates"][0].startswith("2026-06-01")
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert doc["fits"]["llm_time"]["family"]
    # a scenario imports it; a field beside import overrides the imported one
    scn = scenario_from_dict({"version": 1, "workload": {"import": str(out), "trajectories": 50, "max_turns": 3},
                              "substrates": ZERO, "cluster": {"concurrency": 2}}, tmp_path / "s.yaml")  # fmt: skip
    assert scn.workload.max_turns == 3 and scn.workload.steps.kind == "discrete"
    assert run_scenario(scn).summary["duration_p50"].iloc[0] > 0
    tok = scenario_from_dict(
        {"version": 1, "workload": {"import": str(out), "trajectories": 20, "llm": "tokens"}, "substrates": ZERO,
         "cluster": {"concurrency": 2, "inference": {"engines": 1, "profile": str(
             SAMPLE.parents[4] / "calibration/engines/llama3.1-8b-h100-vllm.yaml")}}}, tmp_path / "s.yaml")  # fmt: skip
    assert tok.workload.tokens is not None and tok.workload.llm_time is None


@pytest.mark.slow
def test_bad_trace_exit_2_nothing_written(traces, tmp_path):
    _, (path,) = traces["tracelab"]
    lines = path.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:5] + [lines[5][:30]] + lines[6:]) + "\n")
    out = tmp_path / "wl.yaml"
    out.write_text("earlier: kept\n")
    r = cli("workload", "tracelab", str(bad), "-o", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{bad}: line 6" in " ".join(r.stderr.split()) and "--on-bad skip" in r.stderr
    assert out.read_text() == "earlier: kept\n" and not out.with_suffix(".png").exists()
    r = cli("workload", "tracelab", str(bad), "-o", str(out), "--on-bad", "skip")
    assert r.returncode == 0, r.stderr
    assert "skipped: bad_json 1" in r.stdout
    assert yaml.safe_load(out.read_text())["provenance"]["skipped"]["bad_json"]["count"] == 1
    r = cli("workload", "nosuch", str(bad), "-o", str(out))
    assert r.returncode == 2 and "'nosuch': expected tracelab, atif, verifiers" in r.stderr


def _quiet(r) -> bool:
    """Nothing on stderr but, at most, the small-sample warning of a fit from a few trajectories."""
    from simrollout.cli.workload import MIN_TRAJECTORIES, small_sample

    said = " ".join(r.stderr.split())
    return said == "" or said in {" ".join(small_sample(n).split()) for n in range(1, MIN_TRAJECTORIES)}


@pytest.mark.slow
def test_real_files_import_quietly_with_tool_latency(tmp_path):
    """SWE-agent (no tokens to plot: no empty legend) and verifiers' per-rollout layout; nothing
    on stderr but the small-sample warning (a handful of real files), and --tool-latency recorded
    in the provenance and used."""
    from .test_real_files import files

    out = tmp_path / "swe.yaml"
    r = cli("workload", "swe-agent", *files("swe-agent", "[!p]*.traj"), "-o", out)
    assert r.returncode == 0 and _quiet(r), r.stderr
    assert "no LLM time" in r.stdout
    r = cli("workload", "swe-agent", *files("swe-agent", "pre-0.7*.traj"), "-o", out)
    assert r.returncode == 2 and "--tool-latency SECONDS" in r.stderr and "?." not in r.stderr
    r = cli("workload", "swe-agent", *files("swe-agent", "*.traj"), "-o", out, "--tool-latency", "1.5")
    assert r.returncode == 0 and _quiet(r), r.stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["provenance"]["tool_latency"] == 1.5 and doc["provenance"]["trajectories"] == 3
    out = tmp_path / "v.yaml"
    r = cli("workload", "verifiers", *files("verifiers", "*.jsonl"), "-o", out, "--on-bad", "skip")
    assert r.returncode == 0 and _quiet(r), r.stderr
    assert "skipped: no_timing 4" in r.stdout and "written before verifiers timed rollouts" in r.stdout
    r = cli("workload", "atif", *files("atif", "*.json"), "-o", tmp_path / "a.yaml")
    assert r.returncode == 0 and _quiet(r), r.stderr
    assert "as read: steps reordered 0, steps merged 0" in r.stdout
