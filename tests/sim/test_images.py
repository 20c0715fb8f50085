"""Task images (a per-host LRU cache and pull link) and sandbox reuse within a task, pinned to
known answers, in both fidelities."""

import numpy as np
import pytest

from simrollout.run.executors import run_scenario
from simrollout.scenario import scenario_from_dict
from tests.conftest import make

GB_PER_S = 1024.0  # pull_mb_s at which one GB takes one second


def images(count, size, samples=1, **over):
    return make(**{
        "workload.images": {"count": count, "size_gb": size, "samples": samples},
        "substrates.0.image_cache": {"pull_mb_s": GB_PER_S, "cache_gb": over.pop("cache_gb", 100.0)},
        **over,
    })  # fmt: skip


def records(d):
    res = run_scenario(scenario_from_dict(d), jobs=1, keep_records=True)
    return next(iter(res.records.values())), res.summary.iloc[0]


@pytest.mark.parametrize("fidelity", ["step", "trajectory"])
def test_a_task_image_is_pulled_once_per_host_then_cached(fidelity):
    # 4 trajectories, 2 samples per task, 2 images of 2 GB; one at a time on one host
    rec, s = records(images(2, 2.0, samples=2, **{"workload.trajectories": 4, "fidelity": fidelity,
                                                    "substrates.0.cold_start": 0.5}))  # fmt: skip
    # task 0 (image 0): pull 2 s + create; its second sample: create only; then image 1 likewise
    assert rec.cold.tolist() == pytest.approx([2.5, 0.5, 2.5, 0.5])
    assert s.image_pulls == 2 and s.image_pulled_gb == pytest.approx(4.0)
    assert s.image_hit_rate == pytest.approx(0.5)


def test_pulls_on_one_host_queue_on_its_link():
    # 3 different images of 1 GB started together on one host: ready after 1, 2 and 3 s
    rec, s = records(images(3, 1.0, **{"workload.trajectories": 3, "cluster.concurrency": 3}))
    assert sorted(rec.cold.tolist()) == pytest.approx([1.0, 2.0, 3.0])
    assert s.image_wait_hours * 3600 == pytest.approx(6.0)


def test_a_sandbox_of_an_image_being_pulled_waits_for_that_pull():
    # 2 samples of one task start together: one transfer, both wait for it
    rec, s = records(images(1, 3.0, samples=2, **{"workload.trajectories": 2, "cluster.concurrency": 2}))
    assert rec.cold.tolist() == pytest.approx([3.0, 3.0])
    assert s.image_pulls == 1


def test_the_least_recently_used_image_is_evicted():
    # a cache that holds one 1 GB image, alternating images: every create pulls
    rec, s = records(images(2, 1.0, cache_gb=1.5, **{"workload.trajectories": 6}))
    assert rec.cold.tolist() == pytest.approx([1.0] * 6)
    assert s.image_pulls == 6 and s.image_evictions == 5
    # a cache that holds both: two pulls, then hits
    rec, s = records(images(2, 1.0, cache_gb=2.5, **{"workload.trajectories": 6}))
    assert rec.cold.tolist() == pytest.approx([1.0, 1.0, 0, 0, 0, 0])


def test_placement_prefers_a_host_that_holds_the_image():
    d = images(2, 1.0, samples=1, **{"workload.trajectories": 40, "cluster.concurrency": 2,
                                      "substrates.0.capacity": {"hosts": 2, "sandboxes_per_host": 4},
                                      "workload.tools.shell.latency": 1.0, "workload.steps": 1,
                                      "workload.calls_per_step": 1})  # fmt: skip
    _, s = records(d)
    # each host keeps pulling only what it holds once the images are placed: 2 pulls in all
    assert s.image_pulls == 2


def test_without_an_image_cache_images_are_always_ready():
    d = make(**{"workload.images": {"count": 3, "size_gb": 5.0}, "substrates.0.cold_start": 0.25,
                "workload.trajectories": 6})  # fmt: skip
    rec, s = records(d)
    assert rec.cold.tolist() == pytest.approx([0.25] * 6)
    assert "image_pulls" not in s.index


@pytest.mark.parametrize("fidelity", ["step", "trajectory"])
def test_reuse_serves_the_next_samples_of_a_task_after_a_reset(fidelity):
    d = make(**{"workload.trajectories": 8, "workload.images": {"count": 2, "size_gb": 1.0, "samples": 4},
                "substrates.0.cold_start": 2.0, "substrates.0.teardown": 1.0,
                "substrates.0.reset": 0.25, "policy.reuse": True, "fidelity": fidelity})  # fmt: skip
    rec, s = records(d)
    # per task: one create (2 s), then three resets (0.25 s); one teardown per task
    assert rec.cold.tolist() == pytest.approx([2.0, 0.25, 0.25, 0.25] * 2)
    assert rec.warm.tolist() == [False, True, True, True] * 2
    assert s.sandboxes_reused == 6
    assert rec.end.max() == pytest.approx(2 * (2.0 + 3 * 0.25 + 1.0))
    # the same run without reuse: 8 creates and 8 teardowns
    d["policy"]["reuse"] = False
    rec2, _ = records(d)
    assert rec2.end.max() == pytest.approx(8 * 3.0) and not rec2.warm.any()


def test_reuse_is_idle_when_the_samples_of_a_task_run_together():
    # concurrency >= G: every sample of a task has started before the first ends; nothing parks
    d = make(**{"workload.trajectories": 8, "workload.images": {"count": 2, "size_gb": 1.0, "samples": 4},
                "substrates.0.reset": 0.25, "policy.reuse": True, "cluster.concurrency": 8})  # fmt: skip
    _, s = records(d)
    assert s.sandboxes_reused == 0


def test_same_seed_same_numbers_with_images_and_reuse():
    d = images(50, {"kind": "lognormal", "median": 0.4, "p99": 2.0}, samples=4, cache_gb=3.0, **{
        "workload.trajectories": 400, "cluster.concurrency": 6, "workload.steps": 3,
        "workload.llm_time": {"kind": "lognormal", "median": 1.0, "p99": 5.0},
        "substrates.0.capacity": {"hosts": 3, "sandboxes_per_host": 8},
        "substrates.0.reset": {"kind": "lognormal", "median": 0.2, "p99": 1.0}, "policy.reuse": True})  # fmt: skip
    a, sa = records(d)
    b, sb = records(d)
    assert np.array_equal(a.end, b.end) and sa.image_pulls == sb.image_pulls > 0
    assert sa.sandboxes_reused > 0


def test_a_warm_start_is_waited_once_in_both_fidelities():
    # regression: the trajectory engine waited a deferred warm start twice (ends 3, 5, 8, 10)
    ends = {}
    for fid in ("step", "trajectory"):
        d = make(**{"workload.trajectories": 4, "substrates.0.warm_start": 1.0, "substrates.0.cold_start": 3.0,
                    "policy.warm_pool": 1, "fidelity": fid})  # fmt: skip
        ends[fid] = records(d)[0].end.tolist()
    assert ends["step"] == ends["trajectory"] == pytest.approx([3.0, 4.0, 7.0, 8.0])


@pytest.mark.parametrize("fidelity", ["step", "trajectory"])
def test_a_warm_pool_with_task_images_prefetches_the_sandboxes_of_later_trajectories(fidelity):
    # one at a time, create 2 s, image 1 GB at 1 GB/s; the pool creates trajectory i + 1's sandbox
    # (with its image) when trajectory i starts
    d = images(4, 1.0, **{"workload.trajectories": 4, "substrates.0.cold_start": 2.0,
                          "workload.tools.shell.latency": 5.0, "workload.calls_per_step": 1,
                          "policy.warm_pool": 1, "fidelity": fidelity})  # fmt: skip
    rec, s = records(d)
    # the first creates its own (1 s pull + 2 s); each later one finds its sandbox ready
    assert rec.cold.tolist() == pytest.approx([3.0, 0.0, 0.0, 0.0])
    assert rec.warm.tolist() == [False, True, True, True]
    assert rec.end.tolist() == pytest.approx([8.0, 13.0, 18.0, 23.0])
    # the first prefetch shares the host's link with the first pull (ready at 4 s, claimed at 8 s);
    # the others are ready 3 s after their predecessor started and claimed 5 s after: 4 + 2 + 2 s idle
    assert s.warm_pool_idle_hours * 3600 == pytest.approx(8.0)


def test_a_prefetch_still_being_created_is_waited_for():
    # the body (0.5 s) is shorter than the prefetch (1 s pull + 2 s create). The first prefetch
    # pulls after the first trajectory's own pull on the host's link: ready at 4 s, its trajectory
    # starts at 3.5 s and waits 0.5 s; the next prefetch starts at 3.5 s, ready at 6.5 s, waited 2 s
    d = images(4, 1.0, **{"workload.trajectories": 3, "substrates.0.cold_start": 2.0,
                          "workload.tools.shell.latency": 0.5, "workload.calls_per_step": 1,
                          "policy.warm_pool": 1})  # fmt: skip
    rec, _ = records(d)
    assert rec.cold.tolist() == pytest.approx([3.0, 0.5, 2.0])
    assert rec.warm.tolist() == [False, True, True]
