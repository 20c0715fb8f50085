"""Sandboxes left by a probe killed hard (SIGKILL) are found by their label and removed by the
cleanup verb or by the next probe: zero left."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from simrollout.calibration.backends import get_backend
from simrollout.calibration.cleanup import Owned, sweep_stale
from tests.conftest import cli


def _start_probe(backend: str, out: Path, think: float = 0.0) -> subprocess.Popen:
    """A probe of 64 sandboxes x 20 commands at 8 in flight; ``think`` paces each command, so a
    fast backend still holds sandboxes when the test kills it (at least 20 x think per sandbox)."""
    return subprocess.Popen(
        [sys.executable, "-m", "simrollout.cli", "probe", backend, "--sandboxes", "64", "--commands", "20",
         "--concurrency", "8", "--think", str(think), "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _kill_when_created(proc, out: Path, owned, wait: float) -> int:
    """SIGKILL the probe at a random moment once it holds sandboxes; how many it left."""
    deadline = time.monotonic() + 60
    while not owned() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(wait)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return _settled(owned)


def _settled(owned, quiet: float = 2.0, limit: float = 60.0) -> int:
    """How many sandboxes are left once the count stops changing: creates the dead probe sent
    before the kill still complete on the engine's side."""
    count, since, deadline = len(owned()), time.monotonic(), time.monotonic() + limit
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.2)
        now = len(owned())
        if now != count:
            count, since = now, time.monotonic()
    return count


def test_owned_sandboxes_of_a_dead_owner_are_stale_and_old_ones_too():
    import os

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = __import__("socket").gethostname()
    now = time.time()
    assert Owned("a", "r", now, f"{host}:{dead.pid}").stale(max_age=3600)
    assert not Owned("b", "r", now, f"{host}:{os.getpid()}").stale(max_age=3600)  # alive: kept
    assert not Owned("c", "r", now - 60, "elsewhere:1").stale(max_age=3600)  # can't tell, young
    assert Owned("d", "r", now - 7200, "elsewhere:1").stale(max_age=3600)


@pytest.mark.slow
@pytest.mark.parametrize("moment", [0.0, 0.3, 1.0])
def test_process_probe_killed_hard_leaves_folders_that_the_next_probe_removes(tmp_path, moment):
    be = get_backend("process")
    mine = lambda: [s for s in be.owned() if s.id.startswith(tempfile.gettempdir())]  # noqa: E731
    proc = _start_probe("process", tmp_path / "p.jsonl", think=0.2)  # else it can end before the kill
    left = _kill_when_created(
        proc, tmp_path / "p.jsonl", lambda: [s for s in mine() if s.owner.endswith(f":{proc.pid}")], moment
    )
    assert left >= 1  # the hard kill left sandboxes behind
    r = cli(
        "probe",
        "process",
        "--sandboxes",
        "1",
        "--commands",
        "1",
        "--concurrency",
        "1",
        "-o",
        tmp_path / "q.jsonl",
    )
    assert r.returncode == 0, r.stderr
    assert "removed" in r.stderr and "stale sandbox" in r.stderr
    assert [s for s in mine() if s.owner.endswith(f":{proc.pid}")] == []


@pytest.mark.docker
def test_docker_probe_killed_hard_leaves_containers_that_cleanup_removes(docker_engine, tmp_path):
    be = get_backend("docker")
    for attempt in range(3):
        proc = _start_probe("docker", tmp_path / f"d{attempt}.jsonl")
        mine = lambda pid=proc.pid: [s for s in be.owned() if s.owner.endswith(f":{pid}")]  # noqa: E731
        left = _kill_when_created(proc, tmp_path / "d.jsonl", mine, random.Random(attempt).uniform(0, 2))
        assert left >= 1
        listed = cli("cleanup", "docker", "--dry-run")
        assert listed.returncode == 0 and "would remove" in listed.stdout and "owner gone" in listed.stdout
        assert len(mine()) == left  # a dry run removes nothing
        r = cli("cleanup", "docker")
        assert r.returncode == 0, r.stderr
        assert mine() == []
    # every probe container has a server-side limit: it ends and removes itself
    c = docker_engine.containers.run(
        "simrollout-busybox:local", ["/bin/sleep", "1"], detach=True, auto_remove=True
    )
    time.sleep(3)
    assert c.id not in {x.id for x in docker_engine.containers.list(all=True, sparse=True)}


@pytest.mark.slow
def test_cleanup_refuses_a_backend_it_cannot_list(tmp_path):
    r = cli("cleanup", "nope")
    assert r.returncode == 2 and "expected one of" in r.stderr


def test_sweep_stale_dry_run_lists_without_removing():
    class Fake:
        def __init__(self):
            self.items = [Owned("x", "r", 0.0, "elsewhere:1"), Owned("y", "r", time.time(), "elsewhere:2")]
            self.removed = []

        def owned(self):
            return list(self.items)

        def remove_owned(self, s):
            self.removed.append(s.id)

    f = Fake()
    found, stale = sweep_stale(f, max_age=3600, dry_run=True)
    assert [s.id for s in stale] == ["x"] and f.removed == []
    sweep_stale(f, max_age=3600)
    assert f.removed == ["x"]
