"""A sweep's plots read back from their figures: against concurrency (the knee marked), against
any other swept number (linear or log as the values spread) or word (evenly spaced), each axis
labelled with the variable's path, and the bands where the sweep has them."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from simrollout.run import plots, sweep_plots
from simrollout.scenario import load_scenario, scenario_from_dict
from simrollout.whatif.sweeps import sweep
from tests.conftest import ROOT
from tests.run.test_plots import bars, errorbars, note, with_bands


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def small(trajectories: int = 400, levels=None):
    scn = load_scenario(ROOT / "scenarios" / "small.yaml")
    d = scn.model_dump(by_alias=True, exclude_none=True)
    d["workload"]["trajectories"] = trajectories
    if levels is not None:
        d["cluster"]["concurrency"] = levels
    return scenario_from_dict(d, "small")


@pytest.fixture(scope="module")
def swept():
    return sweep(small(), {"cluster.concurrency": [16, 64, 256]}, executor="serial")


@pytest.mark.slow
def test_sweep_tax_and_cost_against_concurrency_are_the_sweeps_rows(swept, tmp_path):
    for what in ("tax", "cost"):
        fig = sweep_plots.sweep_panels_figure(swept, what)
        panels = [ax for ax in fig.axes if ax.get_visible()]
        assert [ax.get_title() for ax in panels] == ["docker", "hosted"]
        for ax in panels:
            g = swept[swept.substrate == ax.get_title()].sort_values("concurrency")
            assert [t.get_text() for t in ax.get_xticklabels()] == [f"{c:,d}" for c in g.concurrency]
            got = bars(ax)
            if what == "tax":
                for c, *_ in plots.TAX_PARTS:
                    np.testing.assert_allclose(got[plots.TAX_LABEL[c]][1], g[c])
            else:
                np.testing.assert_allclose(sum(h for _, h in got.values()), g.cost_usd)
    wait = swept[swept.substrate == "hosted"].sort_values("concurrency").tax_wait_s.to_numpy()
    assert wait[-1] > wait[0]  # the quota and the create rate bind as concurrency grows
    lines = sweep_plots.sweep_lines_figure(swept).axes
    for ax, col in zip(lines, ("trajectories_per_hour", "duration_p99", "makespan_hours")):
        for ln in ax.get_lines():
            if ln.get_gid() == "knee":
                continue
            g = swept[swept.substrate == ln.get_label()].sort_values("concurrency")
            np.testing.assert_allclose(ln.get_ydata(), g[col])
    best = bars(sweep_plots.sweep_substrates_figure(swept).axes[0])["worker-hours"][1]
    cheapest = swept.loc[swept.groupby("substrate", sort=False).cost_usd.idxmin()]
    np.testing.assert_allclose(best, cheapest.worker_hours)
    names = {p.name for p in sweep_plots.plot_sweep(swept, tmp_path)}
    assert names == {"sweep_concurrency.png", "sweep_tax.png", "sweep_cost.png", "sweep_substrates.png"}


def test_sweep_bands_show_where_the_sweep_has_them(swept):
    s = with_bands(swept, ["cost_usd", "makespan_hours"], "docker", "public figures")
    fig = sweep_plots.sweep_panels_figure(s, "cost")
    docker, hosted = [ax for ax in fig.axes if ax.get_visible()]
    g = s[s.substrate == "docker"].sort_values("concurrency")
    np.testing.assert_allclose(errorbars(docker)["cost_usd"][:, 3], 1.15 * g.cost_usd)
    assert "cost_usd" not in errorbars(hosted)
    assert "no band: hosted at 16, hosted at 64, hosted at 256 (public figures)" in note(fig)
    eb = errorbars(sweep_plots.sweep_lines_figure(s).axes[2])["makespan_hours"]
    np.testing.assert_allclose(eb[:, 1], 0.9 * g.makespan_hours)


@pytest.mark.slow
def test_a_sweep_of_engines_plots_against_the_engine_count_without_a_knee(tmp_path):
    df = sweep(small(200, [64]), {"cluster.inference.engines": [2, 8, 32]}, executor="serial")
    fig = sweep_plots.sweep_lines_figure(df, ["cluster.inference.engines"])
    for ax, col in zip(fig.axes[:3], ("trajectories_per_hour", "duration_p99", "makespan_hours")):
        assert ax.get_xlabel() == "cluster.inference.engines"
        assert ax.get_xscale() == "log"  # 2 to 32: powers of two over a 16x spread
        assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "8", "32"]
        lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        assert [ln.get_label() for ln in lines] == ["docker", "hosted"]
        for ln in lines:
            g = df[df.substrate == ln.get_label()].sort_values("cluster.inference.engines")
            np.testing.assert_allclose(ln.get_xdata(), [2, 8, 32])
            np.testing.assert_allclose(ln.get_ydata(), g[col])
        assert not [ln for ln in ax.get_lines() if ln.get_gid() == "knee"]
    assert "knee" not in fig.axes[0].get_ylabel()
    hours = df.sort_values("cluster.inference.engines").groupby("substrate").makespan_hours.apply(list)
    assert all(h[0] > h[-1] for h in hours)  # 2 engines slow every turn down: the sweep is not flat
    panels = [ax for ax in sweep_plots.sweep_panels_figure(df, "cost").axes if ax.get_visible()]
    assert [t.get_text() for t in panels[0].get_xticklabels()] == ["2", "8", "32"]
    names = {p.name for p in sweep_plots.plot_sweep(df, tmp_path, ["cluster.inference.engines"])}
    assert "sweep_cluster.inference.engines.png" in names and "sweep_concurrency.png" not in names


def test_words_are_evenly_spaced_and_numbers_on_a_linear_axis_when_close(swept):
    df = swept.assign(**{"policy.mode": swept.concurrency.map({16: "sync", 64: "async", 256: "batch"})})
    ax = sweep_plots.sweep_lines_figure(df, ["policy.mode"]).axes[0]
    assert ax.get_xlabel() == "policy.mode" and ax.get_xscale() == "linear"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["sync", "async", "batch"]
    assert sorted({float(x) for ln in ax.get_lines() for x in ln.get_xdata()}) == [0.0, 1.0, 2.0]
    near = swept.assign(**{"policy.retries": swept.concurrency.map({16: 1, 64: 2, 256: 3})})
    ax = sweep_plots.sweep_lines_figure(near, ["policy.retries"]).axes[1]
    assert ax.get_xscale() == "linear" and ax.get_xlabel() == "policy.retries"


def test_a_second_variable_makes_lines_of_its_own(swept):
    df = swept.assign(**{"cluster.inference.engines": 8})
    two = df.assign(**{"cluster.inference.engines": 16}, makespan_hours=df.makespan_hours / 2)
    both = pd.concat([df, two], ignore_index=True)
    ax = sweep_plots.sweep_lines_figure(both, ["cluster.concurrency", "cluster.inference.engines"]).axes[2]
    labels = [ln.get_label() for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert labels == ["docker, engines=8", "hosted, engines=8", "docker, engines=16", "hosted, engines=16"]
    ys = {ln.get_label(): ln.get_ydata() for ln in ax.get_lines()}
    np.testing.assert_allclose(ys["docker, engines=16"], ys["docker, engines=8"] / 2)
    assert ax.get_xlabel() == "concurrency (cluster.concurrency)"
