"""report.html rendered by headless Chromium: the page is not blank, its tables carry the summary's
numbers, its plots are the folder's PNGs inline, and it names its inputs and their provenance."""

import base64
import re
import shutil
import subprocess

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from simrollout.run import html_report
from simrollout.run.executors import run_scenario
from simrollout.run.report import TABLE, write_results
from simrollout.run.screen import value_text
from simrollout.scenario import load_scenario, scenario_from_dict
from tests.conftest import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install chromium)"
)


def chromium(tmp_path, url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2000", *args, url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    data = load_scenario(ROOT / "scenarios" / "small.yaml").model_dump(by_alias=True, exclude_none=True)
    data["workload"]["trajectories"] = 300
    scn = scenario_from_dict(data, ROOT / "scenarios" / "small.yaml")
    out = tmp_path_factory.mktemp("run")
    write_results(run_scenario(scn, executor="serial", keep_records=False), out)
    return out


@pytest.mark.slow
@needs_chromium
def test_chromium_renders_the_tables_and_the_inline_plots(folder, tmp_path):
    url = (folder / "report.html").resolve().as_uri()
    shot = tmp_path / "shot.png"
    r = chromium(tmp_path, url, f"--screenshot={shot}")
    assert shot.is_file(), r.stderr
    pixels = mpimg.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2000, 1280)
    assert pixels.std() > 0.1  # not a blank page
    header = np.abs(pixels - np.array([0x2B, 0x57, 0x97]) / 255).max(axis=2) < 0.02
    assert header.sum() > 1280 * 10  # the tables' header rows, in their colour
    dom = chromium(tmp_path, url, "--dump-dom").stdout
    summary = pd.read_csv(folder / "summary.csv")
    for key, _, fmt in TABLE[:9]:
        for v in summary[key]:
            assert f">{value_text(v, fmt)}<" in dom, key
    images = re.findall(r'<img src="data:image/png;base64,([^"]+)" alt="([^"]+)"', dom)
    pngs = sorted(p.name for p in folder.glob("*.png"))
    assert sorted(name for _, name in images) == pngs and len(pngs) >= 5
    for data, name in images:  # each plot inline, byte for byte
        assert base64.b64decode(data) == (folder / name).read_bytes()
    assert not re.search(r'(src|href)="(?!data:)', dom)  # self-contained: nothing fetched
    for fact in ("scenario file", "small.yaml", "fidelity", "step (auto:", "seed", "simrollout"):
        assert fact in dom


def test_the_inputs_name_each_profile_and_its_provenance():
    scn = load_scenario(ROOT / "scenarios" / "1m_150step.yaml")
    facts = dict(html_report.input_facts(scn))
    assert facts["scenario file"].endswith("1m_150step.yaml") and facts["seed"] == str(scn.seed)
    daytona = facts["substrate hosted: profile"]
    assert daytona.startswith("../calibration/profiles/daytona.yaml")
    assert "computesdk.com/benchmarks" in daytona  # the profile's provenance, as it gives it
    engine = facts["inference engine: profile"]
    assert "llama3.1-8b-h100-vllm.yaml" in engine and "InferenceBench" in engine


def test_a_band_renders_under_its_value():
    rows = pd.DataFrame({"substrate": ["docker"], "concurrency": [64], "cost_usd": [1234.0],
                         "cost_usd_lo": [1000.0], "cost_usd_hi": [1500.0]})  # fmt: skip
    cols = [
        ("substrate", "substrate", "{}"),
        ("concurrency", "conc.", "{:,d}"),
        ("cost_usd", "cost $", "{:,.0f}"),
    ]
    page = html_report.render(
        html_report.Report("t <&>", [("seed", "1")], [html_report.Section("h", cols, rows)])
    )
    assert '1,234<br><span class="band">[1,000-1,500]</span>' in page
    assert "<title>t &lt;&amp;&gt;</title>" in page  # text is escaped
