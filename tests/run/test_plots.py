"""The plots read back from their figures' artists and held to the summary they were drawn from:
bars, stacks, curves, the timeout mark, error bars from bands, and the note where a band is absent."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from simrollout.run import plots
from simrollout.run.executors import run_scenario
from simrollout.run.report import write_results
from simrollout.run.runner import CDF_LEVELS
from simrollout.scenario import load_scenario, scenario_from_dict
from simrollout.sim.metrics import TAX
from simrollout.whatif.sweeps import base_dict
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def result():
    scn = load_scenario(ROOT / "scenarios" / "small.yaml")
    return run_scenario(scn, jobs=1, keep_records=False)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def bars(ax) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each labelled bar series of ``ax``: (bottoms, heights)."""
    out = {}
    for c in ax.containers:
        if c.__class__.__name__ == "BarContainer":
            out[c.get_label()] = (np.array([p.get_y() for p in c]), np.array([p.get_height() for p in c]))
    return out


def errorbars(ax) -> dict[str, np.ndarray]:
    """Each band's error bars on ``ax``: one row (x0, lo, x1, hi) per bar, by metric."""
    out = {}
    for c in ax.containers:
        if c.__class__.__name__ == "ErrorbarContainer" and c.get_label().startswith("_band "):
            rows = [[s[0][0], s[0][1], s[1][0], s[1][1]] for s in c.lines[2][0].get_segments()]
            out.setdefault(c.get_label().split(" ", 1)[1], []).extend(rows)
    return {m: np.array(rows) for m, rows in out.items()}


def note(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts if t.get_gid() == "band-note")


def with_bands(summary: pd.DataFrame, metrics: list[str], banded: str, why_not: str) -> pd.DataFrame:
    """``summary`` as ``run --uncertainty`` writes it: ``M_lo``/``M_hi`` (here 0.9 / 1.15 x M) where
    substrate ``banded`` has a band, NaN with ``band`` saying why for the others."""
    s = summary.copy()
    has = s.substrate == banded
    for m in metrics:
        s[f"{m}_lo"] = np.where(has, 0.9 * s[m], np.nan)
        s[f"{m}_hi"] = np.where(has, 1.15 * s[m], np.nan)
    s["band"] = np.where(has, "bootstrap: 20 refits", why_not)
    return s


@pytest.mark.slow
def test_tax_bars_are_the_summarys_phases_and_sum_to_worker_hours(result):
    s = result.summary
    fig = plots.tax_figure(s, "t")
    tax, worker = fig.axes[:2]
    got, label = bars(tax), plots.TAX_LABEL
    assert list(got) == [label[c] for c, *_ in plots.TAX_PARTS]
    bottom = np.zeros(len(s))
    for c, *_ in plots.TAX_PARTS:  # stacked in this order, each part on the one below
        np.testing.assert_allclose(got[label[c]][0], bottom)
        np.testing.assert_allclose(got[label[c]][1], s[c])
        bottom += s[c].to_numpy()
    assert s.tax_exec_overhead_s.gt(0).all() and s.tax_wait_s[s.substrate == "hosted"].gt(0).all()
    w = bars(worker)
    top = sum(w[label[c]][1] for c, *_ in plots.WORKER_PARTS)
    np.testing.assert_allclose(top, s.worker_hours * 3600 / s.trajectories, rtol=1e-9)
    assert label["tax_wait_s"] not in w  # the wait is not worker time
    names = [t.get_text() for t in tax.get_xticklabels()]
    assert names == [f"{a}\n{c:,d}" for a, c in zip(s.substrate, s.concurrency)]
    assert "no band" in note(fig) and "run without --uncertainty" in note(fig)


def test_cost_bars_stack_sandbox_and_gpu_dollars_to_the_cost_with_worker_hours_beside(result):
    s = result.summary
    fig = plots.cost_figure(s, "t")
    cost, worker = fig.axes[:2]
    got = bars(cost)
    assert list(got) == ["sandbox $", "GPU $ (inference)"]
    np.testing.assert_allclose(got["sandbox $"][1], s.sandbox_cost_usd)
    np.testing.assert_allclose(got["GPU $ (inference)"][0], s.sandbox_cost_usd)
    np.testing.assert_allclose(got["sandbox $"][1] + got["GPU $ (inference)"][1], s.cost_usd)
    np.testing.assert_allclose(bars(worker)["worker-hours"][1], s.worker_hours)


@pytest.mark.slow
def test_cost_splits_out_the_trainer_with_a_training_loop():
    scn = load_scenario(ROOT / "scenarios" / "grpo_async.yaml")
    d = base_dict(scn)
    d["training"]["steps"] = 3
    d["workload"]["trajectories"] = 1500
    res = run_scenario(scenario_from_dict(d, "grpo_async"), jobs=1, keep_records=False)
    s = res.summary
    assert (s.trainer_cost_usd > 0).all()
    got = bars(plots.cost_figure(s, "t").axes[0])
    np.testing.assert_allclose(got["trainer $"][1], s.trainer_cost_usd)
    np.testing.assert_allclose(got["GPU $ (inference)"][1] + got["trainer $"][1], s.gpu_cost_usd)
    np.testing.assert_allclose(got["trainer $"][0] + got["trainer $"][1], s.cost_usd)


def test_cdfs_are_the_summarys_percentiles_and_the_duration_cdf_marks_the_timeout(result):
    scn, s = result.scenario, result.summary
    top = s[s.concurrency == scn.cluster.levels[-1]].set_index("substrate")
    for which in ("cold_start", "duration"):
        ax = plots.cdf_figure(result, which).axes[0]
        assert ax.get_xscale() == "log"
        curves = {ln.get_label(): ln for ln in ax.get_lines() if ln.get_gid() != "timeout"}
        assert set(curves) == set(top.index)
        for name, ln in curves.items():
            x, y = ln.get_xdata(), ln.get_ydata()
            for q, col in ((0.5, f"{which}_p50"), (0.99, f"{which}_p99")):
                assert x[np.isclose(y, q)][0] == pytest.approx(top.loc[name, col], rel=1e-12)
            assert np.all(np.diff(x) >= 0) and np.isin(y, CDF_LEVELS).all()
        timeout = [ln for ln in ax.get_lines() if ln.get_gid() == "timeout"]
        assert len(timeout) == (which == "duration")
    (mark,) = [ln for ln in ax.get_lines() if ln.get_gid() == "timeout"]
    assert mark.get_xdata()[0] == scn.policy.timeout == 1800
    # the spread the duration CDF hides: hosted's cold start p50 is ~2.8x docker's
    assert top.loc["hosted", "cold_start_p50"] > 2 * top.loc["docker", "cold_start_p50"]


def test_bands_draw_error_bars_where_the_summary_has_them_and_the_note_says_where_not(result):
    metrics = ["worker_hours", "cost_usd", "cold_start_p50", "duration_p50", "duration_p99"]
    s = with_bands(result.summary, metrics, "docker", "public figures")
    has = (s.substrate == "docker").to_numpy()
    per = 3600 / s.trajectories.to_numpy()

    fig = plots.tax_figure(s, "t")
    eb = errorbars(fig.axes[1])["worker_seconds_per_trajectory"]
    assert len(eb) == has.sum()
    np.testing.assert_allclose(eb[:, 0], np.flatnonzero(has))
    np.testing.assert_allclose(eb[:, 1], (0.9 * s.worker_hours * per)[has])
    np.testing.assert_allclose(eb[:, 3], (1.15 * s.worker_hours * per)[has])
    assert "no band: hosted at 64, hosted at 128 (public figures)" in note(fig)
    assert "error bars: 5th-95th percentile (bootstrap: 20 refits)" in note(fig)

    fig = plots.cost_figure(s, "t")
    for ax, m in zip(fig.axes, ("cost_usd", "worker_hours")):
        eb = errorbars(ax)[m]
        np.testing.assert_allclose(eb[:, [1, 3]], np.column_stack([0.9 * s[m], 1.15 * s[m]])[has])

    for which, q in (("cold_start", 0.5), ("duration", 0.99)):
        fig = plots.cdf_figure(result, which, s)
        m = f"{which}_p{round(q * 100)}"
        top = s[s.concurrency == s.concurrency.max()]
        eb = errorbars(fig.axes[0])[m]  # horizontal: (lo, q, hi, q)
        t = top[top.substrate == "docker"].iloc[0]
        np.testing.assert_allclose(eb, [[0.9 * t[m], q, 1.15 * t[m], q]])
        assert "no band: hosted (public figures)" in note(fig)

    fig = plots.levels_figure(s)
    eb = errorbars(fig.axes[1])["duration_p99"]
    np.testing.assert_allclose(eb[:, 0], s.concurrency[has])
    np.testing.assert_allclose(eb[:, 3], 1.15 * s.duration_p99[has])
    assert "trajectories_per_hour" not in errorbars(fig.axes[0])  # no band for throughput
    assert "no band for trajectories_per_hour" in note(fig)  # a metric without a band anywhere


def test_a_phases_own_band_sits_at_the_top_of_its_part(result):
    s = with_bands(result.summary, ["tax_exec_overhead_s"], "hosted", "public figures")
    ax = plots.tax_figure(s, "t").axes[0]
    eb = errorbars(ax)["tax_exec_overhead_s"]
    hosted = s[s.substrate == "hosted"]
    np.testing.assert_allclose(eb[:, 1], hosted.tax_cold_start_s + 0.9 * hosted.tax_exec_overhead_s)
    np.testing.assert_allclose(eb[:, 3], hosted.tax_cold_start_s + 1.15 * hosted.tax_exec_overhead_s)


def test_replications_draw_their_confidence_intervals(result):
    s = result.summary.assign(worker_hours_ci95=result.summary.worker_hours * 0.05)
    fig = plots.cost_figure(s, "t")
    eb = errorbars(fig.axes[1])["worker_hours"]
    np.testing.assert_allclose(eb[:, 1], 0.95 * s.worker_hours)
    assert "95% CI over replications" in note(fig)


@pytest.mark.slow
def test_the_run_writes_every_plot(result, tmp_path):
    written = {p.name for p in write_results(result, tmp_path)}
    pngs = {"tax.png", "worker_hours_cost.png", "cold_start_cdf.png", "duration_cdf.png", "concurrency.png"}
    assert pngs <= written
    assert all((tmp_path / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert set(TAX) <= set(summary.columns)
    np.testing.assert_allclose(summary[list(TAX)], result.summary[list(TAX)])


def test_training_steps_name_each_area_by_its_phase_once():
    from tests.sim.test_training import scenario

    res = run_scenario(scenario({"steps": 6, "task_spread": 0.5}), executor="serial")
    fig = plots.steps_figure(res)
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [label for _, label, _ in plots.STEP_PHASES]
    assert legend[:2] == ["generation (until the trained samples' mean end)", "waiting for the last group"]
    assert not ax.texts  # no per-step annotation: the legend names the areas
    areas = {c.get_gid(): c.get_paths()[0].vertices for c in ax.collections}
    assert list(areas) == ["generation_s", "last_group_s", "train_s", "sync_s"]
    steps = res.steps[res.steps.replication == 0]
    np.testing.assert_allclose(areas["sync_s"][:, 1].max(), steps.step_s.max())  # the stack's top: the step
    np.testing.assert_allclose(areas["generation_s"][:, 1].max(), steps.generation_s.max())


def test_knee_is_where_throughput_stops_growing():
    assert plots.knee([16, 32, 64, 128, 256], [10, 19, 35, 38, 38.5]) == 64
    assert plots.knee([64, 16, 32], [5, 4, 4.6], share=0.9) == 32  # unsorted input, 0.9 x 5 = 4.5


def test_figures_drawn_beside_each_other_are_all_written_and_a_childs_failure_is_redrawn(
    tmp_path, monkeypatch
):
    import os

    from simrollout.run.plots import _draw_all

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    parent = os.getpid()

    def draw(name: str, fail_in_child: bool = False):
        def go():
            if fail_in_child and os.getpid() != parent:
                raise RuntimeError("a figure that fails in the forked process")
            (tmp_path / name).write_text(str(os.getpid()))

        return go

    _draw_all([draw("a"), draw("b"), draw("c"), draw("d")])
    writers = {n: int((tmp_path / n).read_text()) for n in "abcd"}
    assert writers["a"] == writers["c"] == parent  # every other figure here, the rest in the child
    assert writers["b"] == writers["d"] != parent
    _draw_all([draw("e"), draw("f", fail_in_child=True)])
    assert int((tmp_path / "f").read_text()) == parent  # the child failed: drawn here instead
