"""What the verbs print: piped tables no wider than COLUMNS (120 without it) with every headline
number whole, the summary alone on stdout with --format json|csv (the same as the results folder's
files), nothing with --quiet, and a clear error for an unknown format."""

import io
import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from simrollout.run.report import TABLE
from simrollout.run.screen import value_text
from tests.conftest import ROOT
from tests.run.test_screen import parse


def small(tmp_path, trajectories: int = 300) -> str:
    data = yaml.safe_load((ROOT / "scenarios" / "small.yaml").read_text())
    data["workload"]["trajectories"] = trajectories
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def simrollout(*args, columns: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "simrollout.cli", *map(str, args)], capture_output=True,
                          text=True, env=env)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("columns", ["120", "80"])
def test_a_piped_run_fits_columns_with_every_headline_number_whole(tmp_path, columns):
    out = tmp_path / "out"
    r = simrollout("run", small(tmp_path), "-o", out, "-j", "1", "--no-records", columns=columns)
    assert r.returncode == 0, r.stderr
    width = int(columns)
    assert max(map(len, r.stdout.splitlines())) <= width
    assert "…" not in r.stdout
    summary = pd.read_csv(out / "summary.csv")
    shown = [c for c in TABLE if c[0] not in ("cancelled", "retries")]
    tables = parse(r.stdout)
    for _, row in summary.iterrows():
        mine: dict[str, str] = {}
        for c in tables:
            if c["substrate"] == row.substrate and c["conc."] == f"{row.concurrency:,d}":
                mine.update(c)
        for key, head, fmt in shown:
            assert mine[head] == value_text(row[key], fmt), (key, mine.get(head))
            if key != "substrate":
                number = float(mine[head].replace(",", "").rstrip("%"))
                scale = 100 if mine[head].endswith("%") else 1
                assert number == pytest.approx(row[key] * scale, abs=0.51, rel=0.005)


@pytest.mark.slow
def test_format_json_and_csv_are_the_results_folders_summary(tmp_path):
    scn = small(tmp_path)
    r = simrollout("run", scn, "-o", tmp_path / "j", "-j", "1", "--no-records", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # stdout holds the JSON document and nothing else
    assert doc == json.loads((tmp_path / "j" / "summary.json").read_text())
    assert [s["substrate"] for s in doc["summary"]] == ["docker", "docker", "hosted", "hosted"]
    assert "wrote" in r.stderr and "wrote" not in r.stdout
    r = simrollout("run", scn, "-o", tmp_path / "c", "-j", "1", "--no-records", "--format", "csv")
    assert r.returncode == 0, r.stderr
    got = pd.read_csv(io.StringIO(r.stdout))
    pd.testing.assert_frame_equal(got, pd.read_csv(tmp_path / "c" / "summary.csv"))
    # the same seed, the same numbers (JSON keeps fewer digits than CSV)
    expected = [s["worker_hours"] for s in doc["summary"]]
    assert got.worker_hours.to_list() == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
def test_quiet_prints_nothing_and_still_writes_the_folder(tmp_path):
    r = simrollout("run", small(tmp_path), "-o", tmp_path / "q", "-j", "1", "--no-records", "--quiet")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    assert len(pd.read_csv(tmp_path / "q" / "summary.csv")) == 4
    assert (tmp_path / "q" / "report.html").stat().st_size > 10_000


@pytest.mark.slow
def test_an_unknown_format_is_one_clear_error(tmp_path):
    r = simrollout("run", small(tmp_path), "--format", "xml")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == "error: --format: expected one of table, json, csv, got 'xml'."
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_a_sweep_and_a_plan_write_their_tables_as_csv_and_json(tmp_path):
    scn = small(tmp_path, 200)
    r = simrollout("sweep", scn, "--set", "cluster.concurrency=32,64", "-o", tmp_path / "s", "-j", "1",
                   "--format", "csv")  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = pd.read_csv(io.StringIO(r.stdout))
    pd.testing.assert_frame_equal(got, pd.read_csv(tmp_path / "s" / "sweep.csv"))
    assert sorted(got.concurrency) == [32, 32, 64, 64]
    assert (tmp_path / "s" / "report.html").is_file()
    r = simrollout("plan", scn, "--deadline", "48h", "--concurrency", "32,64", "--sample", "200", "--check",
                   "0", "-j", "1", "-o", tmp_path / "plan.csv", "--format", "json")  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    rows = json.loads(r.stdout)
    table = pd.read_csv(tmp_path / "plan.csv")
    assert [(x["substrate"], x["concurrency"]) for x in rows] == list(zip(table.substrate, table.concurrency))
    assert [x["cost_usd"] for x in rows] == pytest.approx(table.cost_usd.to_list())
    assert (tmp_path / "plan.html").read_text().count("<tr>") >= len(table)


@pytest.mark.slow
def test_a_piped_sweep_table_fits_and_names_its_variable(tmp_path):
    r = simrollout("sweep", small(tmp_path, 200), "--set", "cluster.inference.engines=4,8", "-o",
                   tmp_path / "s", "-j", "1", columns="80")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert max(map(len, r.stdout.splitlines())) <= 80 and "…" not in r.stdout
    cells = parse(r.stdout)
    sweep = pd.read_csv(tmp_path / "s" / "sweep.csv")
    engines = sorted({c["engines"] for c in cells})
    assert engines == ["4", "8"] and len(sweep) == 8
    costs = sorted(c["cost $"] for c in cells if "cost $" in c)
    assert costs == sorted(f"{v:,.0f}" for v in sweep.cost_usd)
    assert (tmp_path / "s" / "sweep_cluster.inference.engines.png").is_file()
