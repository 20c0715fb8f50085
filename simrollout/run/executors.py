"""Where cells run: in this process (``serial``), in local processes (``local``, all cores by
default), or as tasks on a Ray cluster (``ray``). Same seeds, same numbers on every executor."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

from .. import numba_cache
from ..errors import InputError
from ..scenario import Scenario
from ..sim.route import resolved_engine
from ..sim.workload_draws import check_memory
from . import stages
from .runner import (
    CellKey,
    RunResult,
    assemble,
    cell_keys,
    needs_pilot,
    pilot_for,
    pilot_key,
    remember,
    run_cell,
    work_for,
)
from .trajectory_files import sink_for

EXECUTORS = ("local", "serial", "ray")
_TICK = 4096  # trajectories between progress reports

# What forked workers inherit: the scenarios and the progress queue.
_SHARED: dict = {}


def run_scenario(
    scn: Scenario,
    jobs: int | None = None,
    keep_records: bool = True,
    progress: Callable[[int, int], None] | None = None,
    executor: str = "local",
    address: str | None = None,
    records_dir=None,
) -> RunResult:
    """Simulate every cell of ``scn``; see :func:`run_many`."""
    return run_many([scn], executor, jobs, keep_records, progress, address, records_dir)[0]


def _cell(scn: Scenario, key: CellKey, keep: bool, records_dir, progress=None):
    sink = sink_for(records_dir, scn, key)
    try:
        return run_cell(scn, key, keep, progress=progress, sink=sink)
    finally:
        if sink is not None:
            sink.close()


def _local_task(i: int, key: CellKey, keep: bool, records_dir):
    q = _SHARED.get("queue")
    res = _cell(_SHARED["scenarios"][i], key, keep, records_dir, q.put if q is not None else None)
    if q is not None:
        q.put(_SHARED["scenarios"][i].trajectories % _TICK)
    return i, key, res


def run_many(
    scenarios: list[Scenario],
    executor: str = "local",
    jobs: int | None = None,
    keep_records: bool = True,
    progress: Callable[[int, int], None] | None = None,
    address: str | None = None,
    records_dir: Path | None = None,
) -> list[RunResult]:
    """Run every cell of every scenario; ``progress(done, total)`` counts trajectories.

    ``records_dir``: each cell streams its per-trajectory records to a Parquet file there."""
    if executor not in EXECUTORS:
        raise InputError(f"--executor: expected one of {list(EXECUTORS)}, got '{executor}'.")
    if jobs is not None and jobs < 1:
        raise InputError(f"--jobs: expected at least 1 process, got {jobs}.")
    for s in scenarios:
        check_memory(s)
    tasks = [(i, k) for i, s in enumerate(scenarios) for k in cell_keys(s)]
    total = sum(scenarios[i].trajectories for i, _ in tasks)
    cores = max(1, jobs or os.cpu_count() or 1)
    jobs = max(1, min(cores, len(tasks)))
    if executor == "ray":
        out = _run_ray(scenarios, tasks, keep_records, progress, total, address, records_dir)
    elif executor == "serial" or jobs == 1:
        # one cell: its workload drawn (and its pilot run) on every core, a compiled cell's loop
        # taking the chunks as they come
        pool = _prepare(scenarios, tasks, cores, stream=len(tasks) == 1) if executor != "serial" else None
        done = [0]

        def tick(k: int) -> None:
            done[0] += k
            if progress is not None:
                progress(done[0], total)

        stages.enter("cells", total)
        try:
            out = [(i, k, _cell(scenarios[i], k, keep_records, records_dir, tick)) for i, k in tasks]
        except BaseException:
            if pool is not None:
                _stop(pool)
            raise
        if pool is not None:
            pool.shutdown()
    else:
        out = _run_local(scenarios, tasks, keep_records, progress, total, jobs, records_dir)
    per: list[list] = [[] for _ in scenarios]
    for i, key, res in out:
        per[i].append((key, res))
    return [assemble(s, r) for s, r in zip(scenarios, per)]


def _run_local(scenarios, tasks, keep, progress, total, jobs, records_dir):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    _SHARED.update(scenarios=scenarios, queue=q)
    _prepare(scenarios, tasks, jobs)
    stages.enter("cells", total)
    done = 0
    pool = ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_ignore_interrupts)
    try:
        # the longest first (then no long cell starts last while the other workers idle); the
        # results keep the tasks' order
        order = sorted(range(len(tasks)), key=lambda t: -_cost(scenarios[tasks[t][0]], tasks[t][1]))
        futures = [None] * len(tasks)
        for t in order:
            futures[t] = pool.submit(_local_task, *tasks[t], keep, records_dir)
        while not all(f.done() for f in futures):
            try:
                done += q.get(timeout=0.2)
                if progress is not None:
                    progress(done, total)
            except queue.Empty:
                pass
        out = [f.result() for f in futures]
        pool.shutdown()
        return out
    except BaseException:
        _stop(pool)  # Ctrl-C, SIGTERM or a failed cell: end the workers now, not after their cells
        raise
    finally:
        _SHARED.clear()


def _stop(pool: Executor) -> None:
    """End the workers now, and drop any workload they left half drawn."""
    for proc in list(getattr(pool, "_processes", {}).values()):
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    _forget_unfinished()


def _cost(scn: Scenario, key: CellKey) -> float:
    """A cell's work, roughly: its steps, and a serving pilot's by its concurrency."""
    steps = scn.trajectories * scn.workload.steps.mean()
    return steps + (key.concurrency * 1000.0 if scn.workload.tokens is not None else 0.0)


def _prepare(scenarios: list[Scenario], tasks, jobs: int, stream: bool = False) -> Executor | None:
    """Before the cells run (forked workers inherit both): draw each distinct workload once and
    run each serving pilot, in ``jobs`` processes at once — the pilots first, the workloads'
    chunks filling in around them (a pilot alone would leave a core idle). ``stream`` (one
    compiled cell, run in this process): return once the pilot ran, the workload's chunks still
    being drawn by the pool returned, threads of this process (the loop takes the chunks as they
    come; shut it down after)."""
    pilots = {}  # what determines a pilot (configurations can share one): the first cell of it
    for i, key in tasks:
        if needs_pilot(scenarios[i]):
            pilots.setdefault(pilot_key(scenarios[i], key), (i, key))
    stream = stream and all(resolved_engine(scenarios[i]).compiled for i, _ in tasks)
    if jobs == 1 or not (pilots or stream):
        stages.enter("draws")
        _draw_all(scenarios, tasks, jobs)
        return None
    if pilots:
        stages.enter("pilots", len(pilots))
    else:
        stages.enter("draws")
    if stream:  # threads: the draws' compiled and numpy passes let go of the GIL, and the cell's
        # loop too, so one process holds the run (forked workers would each hold their own view
        # of every page this one has)
        pool = ThreadPoolExecutor(jobs, thread_name_prefix="draws")
    else:
        pool = ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork"), initializer=_ignore_interrupts)
    try:
        compiling = None if stream else _compile_first(pool, scenarios, tasks)
        running = [pool.submit(pilot_for, scenarios[i], key) for i, key in pilots.values()]
        _draw_all(scenarios, tasks, jobs, pool, background=stream)
        for k, f in enumerate(running):
            remember(f.result())
            stages.done(k + 1)
        if compiling is not None and compiling.exception() is None:  # (else the cells compile it and say why)
            numba_cache.COMPILED["seconds"] = compiling.result()
        if stream:
            return pool
        pool.shutdown()
        return None
    except BaseException:
        _stop(pool)
        raise


def _compile_first(pool: ProcessPoolExecutor, scenarios, tasks):
    """On a fresh install, the compiled engine's loop compiled by one of the pool's processes
    while the other runs the pilots and draws (its future), into numba's cache, from which each
    cell process then loads it: compiled once, where each cell process would compile the same
    loop at once (about 56 s of CPU each). None when no cell uses it or it is cached already."""
    compiled = [scenarios[i] for i, _ in tasks if resolved_engine(scenarios[i]).compiled]
    tokens = any(s.training is not None and s.workload.tokens is not None for s in compiled)
    if not compiled or numba_cache.loop_cached(tokens):
        return None
    return pool.submit(_compile_loop, any(s.training is not None for s in compiled), tokens)


def _compile_loop(training: bool, tokens: bool) -> float:
    from ..sim.compiled import compile_loop

    return compile_loop(training=training, tokens=tokens)


def _forget_unfinished() -> None:
    """Drop the cached workloads a stopped pool left half drawn (their threads ended first: a
    later fork must not copy one holding a lock)."""
    from . import runner

    for key, work in list(runner._WORK.items()):
        if work.filling is not None and not work.filling.complete:
            work.filling.failed(RuntimeError("the run was stopped"))  # wakes a thread waiting for room
            if work.filling.thread is not None:
                work.filling.thread.join(timeout=5.0)
            runner._WORK.pop(key)


def _draw_all(scenarios: list[Scenario], tasks, jobs: int, pool=None, background: bool = False) -> None:
    """Draw each distinct workload once, in ``jobs`` processes (or ``pool``, in the ``background``),
    before the cells run (forked workers inherit it)."""
    for i, key in tasks:
        s = scenarios[i]
        sub = s.substrates[key.substrate]
        work_for(s, key.replication, resolved_engine(s).draws_steps(s), jobs, sub, pool, background)


def _ignore_interrupts() -> None:
    """Workers leave Ctrl-C to the parent, which ends them (SIGTERM ends a worker at once)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _ray_cell(data: dict, key: CellKey, keep: bool, records_dir):
    return _cell(Scenario.model_validate(data), key, keep, records_dir)


def _run_ray(scenarios, tasks, keep, progress, total, address, records_dir):
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install 'simrollout[ray]'.") from None
    stages.enter("cells", total)
    started = False
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
        started = True
    try:
        remote = ray.remote(_ray_cell)
        data = [s.model_dump(mode="json", by_alias=True, exclude_none=True) for s in scenarios]
        refs = {remote.remote(data[i], k, keep, records_dir): (i, k) for i, k in tasks}
        out, done, pending = [], 0, list(refs)
        try:
            while pending:
                # short waits give Python back the control, so Ctrl-C and SIGTERM are seen promptly
                try:
                    ready, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                except SystemError as exc:  # Ctrl-C's handler raised inside Ray's compiled wait
                    if exc.__context__ is not None and not isinstance(exc.__context__, Exception):
                        raise exc.__context__ from None
                    raise
                if not ready:
                    continue
                i, k = refs[ready[0]]
                out.append((i, k, ray.get(ready[0])))
                done += scenarios[i].trajectories
                if progress is not None:
                    progress(done, total)
        except BaseException:
            for ref in pending:  # interrupted or failed: stop the cells still running
                ray.cancel(ref, force=True)
            raise
        order = {ik: n for n, ik in enumerate(tasks)}
        return sorted(out, key=lambda t: order[(t[0], t[1])])
    finally:
        if started and address is None:
            mine = _ray_processes()
            ray.shutdown()
            _reap(mine)


def _ray_processes() -> list:
    """The local Ray node's processes this run started (raylet, GCS, agents, workers)."""
    try:
        import psutil

        procs = psutil.Process().children(recursive=True)
        return [p for p in procs if "ray" in " ".join(p.cmdline()[:2]).lower() or p.name().startswith("ray")]
    except Exception:  # psutil missing, or a process gone while listed
        return []


def _reap(procs: list, grace: float = 5.0) -> None:
    """Ray's agents exit on their own once their raylet is gone, but not always: an interrupt
    during their start-up left them running. Whatever is left after ``grace`` seconds is killed."""
    if not procs:
        return
    import psutil

    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
