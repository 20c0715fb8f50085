import copy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "version": 1,
    "name": "t",
    "seed": 3,
    "workload": {
        "trajectories": 100,
        "steps": 1,
        "llm_time": 0,
        "calls_per_step": 0,
        "tools": {"shell": {"weight": 1, "latency": 0}},
    },
    "substrates": [{"name": "s", "cold_start": 0, "exec_overhead": 0, "teardown": 0}],
    "cluster": {"concurrency": 1},
}


def make(**over) -> dict:
    """A minimal scenario dict with dotted-path overrides, e.g. make(**{"workload.steps": 5})."""
    d = copy.deepcopy(BASE)
    for path, value in over.items():
        node = d
        *parents, last = path.split(".")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        node[last] = value
    return d


def cli(*args) -> subprocess.CompletedProcess:
    """Run ``simrollout ARGS...`` in a fresh interpreter, capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "simrollout.cli", *map(str, args)], capture_output=True, text=True
    )


@pytest.fixture
def root() -> Path:
    return ROOT


def _docker_answers() -> str | None:
    try:
        import docker

        docker.from_env().ping()
        return None
    except Exception as exc:  # no SDK, no engine
        return f"no Docker engine answers ({exc.__class__.__name__})"


@pytest.fixture(scope="session")
def docker_engine():
    """A running Docker engine: skipped with the reason on a user's machine, required in CI."""
    import os

    reason = _docker_answers()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}; .ci/run must start dockerd")
        pytest.skip(reason)
    import docker

    client = docker.from_env()
    image = "simrollout-busybox:local"
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        if os.environ.get("CI") == "true":
            pytest.fail(f"image {image} missing; scripts/start-docker.sh builds it")
        pytest.skip(f"image {image} missing; run scripts/start-docker.sh")
    return client


LLAMA_URL = "http://127.0.0.1:8089/v1"  # scripts/start-llama-server.sh


@pytest.fixture(scope="session")
def llama_server() -> str:
    """A running llama-server with the tiny model: skipped with the reason on a user's machine,
    required in CI (.ci/run starts it)."""
    import os

    import httpx

    url = os.environ.get("SIMROLLOUT_LLAMA_URL", LLAMA_URL)
    try:
        httpx.get(url.removesuffix("/v1") + "/health", timeout=5).raise_for_status()
    except Exception as exc:
        reason = f"no llama-server answers at {url} ({type(exc).__name__}); run scripts/start-llama-server.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    return url


SERVICES = ("docker_engine", "llama_server")  # fixtures of real services: their tests are slow


def pytest_collection_modifyitems(config, items):
    """The quick tier (``-m "not slow"``) leaves out the tests marked slow (over about 2 s on 2
    cores) and every test of a real service (a Docker engine, a llama.cpp server)."""
    for item in items:
        if item.get_closest_marker("docker") or any(f in getattr(item, "fixturenames", ()) for f in SERVICES):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _pilot_cache_folder(tmp_path_factory, monkeypatch):
    """Serving pilots kept on disk (simrollout.run.pilot_cache) go to a folder of each test's own."""
    monkeypatch.setenv("SIMROLLOUT_CACHE", str(tmp_path_factory.mktemp("pilots")))
    monkeypatch.delenv("SIMROLLOUT_NO_CACHE", raising=False)
