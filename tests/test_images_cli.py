"""Task images and reuse through the CLI verbs: run, sweep and plan on scenarios/task_images.yaml."""

import pandas as pd
import pytest
import yaml

from tests.conftest import cli


def small(tmp_path, root, **policy):
    d = yaml.safe_load((root / "scenarios/task_images.yaml").read_text())
    for sub in d["substrates"]:
        sub["profile"] = str(root / "calibration/profiles/docker-host.yaml")
    d["workload"]["trajectories"] = 400
    d["workload"]["steps"] = 5
    d["workload"]["images"]["count"] = 10  # each image comes back: the cache matters
    d["cluster"]["concurrency"] = 32
    d["policy"].update(policy)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


@pytest.mark.slow
def test_run_reports_image_pulls_and_reuse(tmp_path, root):
    p = small(tmp_path, root, reuse=True)
    d = yaml.safe_load(p.read_text())
    d["workload"]["images"]["samples"] = 64  # more samples of a task than slots: sandboxes are reused
    p.write_text(yaml.safe_dump(d))
    r = cli("run", p, "--out", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    s = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert (s.image_pulls > 0).all() and (s.sandboxes_reused > 0).all()
    # the bigger cache never pulls more
    by = s.set_index("substrate")
    assert by.loc["docker-cache-200g", "image_pulls"] <= by.loc["docker-cache-20g", "image_pulls"]


@pytest.mark.slow
def test_sweep_over_the_image_cache(tmp_path, root):
    p = small(tmp_path, root)
    r = cli("sweep", p, "--set", "substrates.0.image_cache.cache_gb=1,50", "--out", tmp_path / "sw")
    assert r.returncode == 0, r.stderr
    sw = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    one = sw[sw.substrate == "docker-cache-20g"].set_index("substrates.0.image_cache.cache_gb")
    assert one.loc[1, "worker_hours"] > one.loc[50, "worker_hours"]  # a 1 GB cache pulls again and again


@pytest.mark.slow
def test_plan_with_images_searches_warm_pools(tmp_path, root):
    p = small(tmp_path, root)
    r = cli(
        "plan", p, "--deadline", "30d", "--concurrency", "16,32", "--check", "0", "--out", tmp_path / "pl"
    )
    assert r.returncode == 0, r.stderr
    r = cli("plan", p, "--deadline", "30d", "--concurrency", "16", "--warm-pool", "0,8", "--check", "0",
            "--out", tmp_path / "plan.csv")  # fmt: skip
    assert r.returncode == 0, r.stderr  # a warm pool with task images prefetches their sandboxes
    pl = pd.read_csv(tmp_path / "plan.csv")
    assert set(pl.warm_pool) == {0, 8}
