import copy
import os
import resource
import subprocess
import sys
import time
from fnmatch import fnmatch
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


def shipped_files(folder: str, pattern: str) -> set[str]:
    """The names of the files under ``folder`` that git tracks (a user's own files beside them are
    not shipped); outside a git checkout, every file there."""
    got = subprocess.run(["git", "ls-files", "--", folder], cwd=ROOT, capture_output=True, text=True)
    if got.returncode == 0 and got.stdout.strip():
        paths = [Path(p) for p in got.stdout.splitlines()]
        return {p.name for p in paths if p.parent == Path(folder) and fnmatch(p.name, pattern)}
    return {p.name for p in (ROOT / folder).glob(pattern)}


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


SERVICES = (
    "docker_engine",
    "llama_server",
    "keyed_server",
)  # fixtures of real services: their tests are slow


def pytest_collection_modifyitems(config, items):
    """The quick tier (``-m "not slow"``) leaves out the tests marked slow (over about 2 s on 2
    cores) and every test of a real service (a Docker engine, a llama.cpp server)."""
    for item in items:
        if item.get_closest_marker("docker") or any(f in getattr(item, "fixturenames", ()) for f in SERVICES):
            item.add_marker(pytest.mark.slow)


# CPU time per test (this process's and its finished children's): unlike wall time it barely grows
# when other work loads the machine, so it decides what the quick tier may hold.
QUICK_CPU_S = 2.0  # a test over this, measured on an idle machine, is marked slow
BUDGET_FACTOR = 5  # in CI an unmarked test fails past QUICK_CPU_S x this (load alone cannot reach it)
_COMPILE_S = [0.0]  # numba compilation, charged to nobody: a cold cache pays it once per session


def _cpu_seconds() -> float:
    """This process's CPU, its reaped children's, and its live (or not yet reaped) descendants'
    so far: a process pool shut down without waiting is charged to the test that ran it."""
    import psutil

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            t = proc.cpu_times()
            live += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:  # ended meanwhile: counted once reaped
            pass
    return time.process_time() + children.ru_utime + children.ru_stime + live


def _budget() -> float | None:
    """CPU seconds an unmarked test may take: ``SIMROLLOUT_TEST_BUDGET`` (seconds), else in CI
    ``QUICK_CPU_S x BUDGET_FACTOR``; None: no check."""
    given = os.environ.get("SIMROLLOUT_TEST_BUDGET", "")
    if given not in ("", "0"):
        return float(given)
    return QUICK_CPU_S * BUDGET_FACTOR if os.environ.get("CI") == "true" else None


def _budget_on() -> bool:
    return _budget() is not None


WARM_UP = (
    "from simrollout.run.executors import run_scenario; from simrollout.scenario import scenario_from_dict; "
    "from simrollout.validation.fidelity import Row, build; "
    "run_scenario(scenario_from_dict({**build(Row('async', 'host', 'timeouts'), 200, 5, 16), "
    "'fidelity': 'compiled'}), jobs=1, keep_records=False)"
)


def pytest_sessionstart(session):
    """With the budget on, the compiled engine is compiled (or loaded from numba's cache) before the
    first test, in a process of its own: a test's subprocesses, whose compiling the listener below
    cannot see, then load it like any run after the first."""
    if _budget_on() and os.environ.get("SIMROLLOUT_TEST_WARM", "1") != "0":
        subprocess.run([sys.executable, "-c", WARM_UP], check=True, capture_output=True)


def pytest_collection_finish(session):
    """numba's compiling timed once the test modules have imported it (nothing to time otherwise)."""
    if "numba" not in sys.modules or not (_budget_on() or os.environ.get("SIMROLLOUT_TEST_TIMES")):
        return
    from numba.core import event

    class _CompileTime(event.Listener):  # compiles nest (a function compiles its callees)
        depth, t0 = 0, 0.0

        def on_start(self, ev):
            self.depth += 1
            if self.depth == 1:
                self.t0 = time.process_time()

        def on_end(self, ev):
            self.depth -= 1
            if self.depth == 0:
                _COMPILE_S[0] += time.process_time() - self.t0

    event.register("numba:compile", _CompileTime())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item._cpu0, item._compile0 = _cpu_seconds(), _COMPILE_S[0]
    yield
    times = os.environ.get("SIMROLLOUT_TEST_TIMES")
    if times:
        with open(times, "a") as f:
            f.write(f"{item.nodeid}\t{getattr(item, '_cpu_s', 0.0):.3f}\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The test's CPU seconds through setup and call (numba compiling excluded); with a budget, an
    unmarked test past it fails: mark it slow or make it cheaper."""
    outcome = yield
    report = outcome.get_result()
    if call.when != "call":
        return
    item._cpu_s = _cpu_seconds() - item._cpu0 - (_COMPILE_S[0] - item._compile0)
    limit = _budget()
    if limit is not None and report.passed and not item.get_closest_marker("slow") and item._cpu_s > limit:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {item._cpu_s:.2f} s of CPU, past the quick tier's budget of {limit:g} s "
            f"(a test over about {QUICK_CPU_S:g} s is marked slow): mark it @pytest.mark.slow or make it cheaper"
        )


@pytest.fixture(autouse=True)
def _pilot_cache_folder(tmp_path_factory, monkeypatch):
    """Serving pilots kept on disk (simrollout.run.pilot_cache) go to a folder of each test's own."""
    monkeypatch.setenv("SIMROLLOUT_CACHE", str(tmp_path_factory.mktemp("pilots")))
    monkeypatch.delenv("SIMROLLOUT_NO_CACHE", raising=False)
