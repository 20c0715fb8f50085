"""Time every phase of real sandboxes' lives and append one JSONL record per timed phase.

Records are flushed as they come, so an interrupted probe keeps all it measured; every sandbox a
probe creates is removed on success, on error and on Ctrl-C (and a final sweep by the run's label
catches any that were being created at that moment).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import SubstrateError
from .backends import Backend

PHASES = ("create", "exec", "upload", "download", "teardown", "reset", "pull", "tool")
MODES = ("sequential", "staggered", "burst")
THINK_DRAWS = ("fixed", "exponential")
# concurrency levels a probe covers by default: dense, since creates happen near a level's count
LEVELS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
PROBE_LEVELS = ",".join(map(str, LEVELS))
REFERENCE = 6  # sandboxes per reference block of ``simrollout probe`` (at its first level)


@dataclass
class ProbeRecord:
    run_id: str
    backend: str
    backend_version: str
    engine_version: str
    host: str
    image: str
    phase: str  # create | exec | upload | download | teardown | reset | pull
    start: float  # unix time, s
    latency: float  # s
    concurrency: int
    mode: str
    ok: bool
    error: str | None  # exception class when not ok
    sandbox: int
    command: str | None = None
    bytes: int | None = None  # pull: the task image archive's size
    think: float = 0.0  # exec: seconds its sandbox waited before it (ProbePlan.think)
    reference: bool = False  # a reference block's record (drift; left out of the fit)
    block: int | None = None  # which reference block: 0 = the start, the last = the end


class CorruptTransfer(RuntimeError):
    """A download returned other bytes than the upload wrote."""


def _same(sent: bytes, got: bytes) -> bytes:
    if got != sent:
        raise CorruptTransfer(f"downloaded {len(got)} bytes differ from the {len(sent)} uploaded")
    return got


class RecordWriter:
    """Append-only JSONL, one line per record, flushed immediately; thread-safe."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", buffering=1)
        self._lock = threading.Lock()
        self.count = 0

    def write(self, rec: ProbeRecord) -> None:
        from ..redact import scrub

        line = json.dumps(scrub(asdict(rec)))
        with self._lock:
            self._f.write(line + "\n")
            self._f.flush()
            self.count += 1

    def close(self) -> None:
        self._f.close()


@dataclass
class ProbePlan:
    sandboxes: int = 0  # lifecycles per concurrency level; 0: max(32, 2 x level)
    commands: int = 10  # exec round trips per sandbox
    levels: tuple[int, ...] = LEVELS
    mode: str = "sequential"
    gap: float = 0.1  # seconds between starts in staggered mode
    image: str = "simrollout-busybox:local"
    command: str = "true"
    files: bool = True  # time a small upload and download where the backend has them
    reset: str | None = None  # time this command as a sandbox reset (reuse within a task)
    image_mb: int = 0  # time loading a task image of the image plus this many MB (docker)
    pulls: int = 5  # task image loads, at the first level, one at a time
    think: float = 0.0  # seconds each sandbox waits before each command (an agent's LLM turn)
    # "exponential": each wait drawn with mean ``think`` (sandboxes started together drift apart,
    # as a rollout's do); "fixed": every wait ``think`` (their commands stay in step and collide)
    think_draw: str = "fixed"
    seed: int = 0  # the drawn waits: the same plan waits the same
    tool_speed: bool = False  # time the command set of calibration/tool_speed.py in one sandbox
    # reference blocks (the drift, simrollout.calibration.drift): this many sandboxes at the first
    # level and one fill of the top level (at least this many), at the start, between ``middle``
    # + 1 equal parts of the levels and at the end; 0 (here): none; ``simrollout probe``: REFERENCE
    reference: int = 0
    middle: int = 1

    def __post_init__(self) -> None:
        if self.think_draw not in THINK_DRAWS:
            raise ValueError(f"think_draw: expected one of {list(THINK_DRAWS)}, got '{self.think_draw}'")

    def waits(self, level: int, idx: int) -> list[float]:
        """The waits before each of sandbox ``idx``'s commands at ``level``."""
        if self.think_draw == "fixed" or not self.think:
            return [self.think] * self.commands
        import numpy as np  # here, not at module level: ``simrollout --help`` starts without numpy

        rng = np.random.default_rng((self.seed, level, idx))
        return rng.exponential(self.think, self.commands).round(6).tolist()

    def count(self, level: int) -> int:
        """Lifecycles at ``level``: enough to fill it twice and give 32 samples of each phase."""
        return self.sandboxes or max(32, 2 * level)

    def schedule(self) -> list[tuple[int, int, int | None]]:
        """The probe's order: ``(level, lifecycles, reference block or None)``, the reference
        blocks (first level, then top level) at the start, between equal parts of the levels and
        at the end."""
        main = [(c, self.count(c), None) for c in self.levels]
        if not self.reference:
            return main
        import numpy as np

        ref_levels = list(dict.fromkeys((self.levels[0], max(self.levels))))
        parts = np.array_split(np.arange(len(main)), self.middle + 1)
        size = {c: self.reference if c == self.levels[0] else max(self.reference, c) for c in ref_levels}
        out: list[tuple[int, int, int | None]] = []
        for b, part in enumerate(parts):
            out += [(c, size[c], b) for c in ref_levels]
            out += [main[k] for k in part]
        return out + [(c, size[c], len(parts)) for c in ref_levels]


def probe(
    backend: Backend,
    plan: ProbePlan,
    out: Path,
    on_record: Callable[[ProbeRecord], None] | None = None,
    on_sweep: Callable[[int], None] | None = None,
) -> str:
    """Run the plan; returns the run id. Records go to ``out`` as they are measured. First, the
    stale sandboxes of earlier runs (a probe killed hard) are removed; ``on_sweep`` gets their
    count."""
    if hasattr(backend, "prepare"):  # check or resolve the image once, before any create is timed
        backend.prepare(plan.image)
    from .cleanup import sweep_stale

    _, removed = sweep_stale(backend)
    if on_sweep:
        on_sweep(len(removed))
    run_id = uuid.uuid4().hex[:12]
    info = backend.info()
    base = dict(
        run_id=run_id,
        backend=backend.name,
        host=socket.gethostname(),
        image=plan.image,
        mode=plan.mode,
        backend_version=info.get("backend_version", ""),
        engine_version=info.get("engine_version", ""),
    )
    writer = RecordWriter(out)
    stop = threading.Event()
    live: dict[int, object] = {}
    lock = threading.Lock()

    def timed(phase, level, idx, fn, command=None, size=None, think=0.0, block=None):
        t0, w0 = time.time(), time.perf_counter()
        err = None
        try:
            result = fn()
        except Exception as exc:  # recorded, never lost
            result, err = None, exc
        rec = ProbeRecord(
            **base,
            phase=phase,
            start=t0,
            latency=time.perf_counter() - w0,
            concurrency=level,
            ok=err is None,
            error=None if err is None else type(err).__name__,
            sandbox=idx,
            command=command,
            bytes=size,
            think=think,
            reference=block is not None,
            block=block,
        )
        writer.write(rec)
        if on_record:
            on_record(rec)
        return result, err

    def lifecycle(level: int, idx: int, block: int | None = None) -> None:
        if stop.is_set():
            return
        box, err = timed("create", level, idx, lambda: backend.create(plan.image, run_id), block=block)
        if err is not None:
            return
        with lock:
            live[id(box)] = box
        try:
            for wait in plan.waits(level, idx):
                if wait:
                    stop.wait(wait)
                if stop.is_set():
                    break
                timed("exec", level, idx, lambda: backend.exec(box, plan.command), plan.command,
                      think=wait, block=block)  # fmt: skip
            # file transfers are timed at the first level only: the model has no such operation,
            # so under load they would only inflate the contention of the others
            first = level == plan.levels[0] and block is None
            if plan.files and backend.supports_files and first and not stop.is_set():
                data, path = os.urandom(4096), "/tmp/simrollout.bin"
                timed("upload", level, idx, lambda: backend.upload(box, path, data))
                timed("download", level, idx, lambda: _same(data, backend.download(box, path)))
            if plan.tool_speed and idx == 0 and first and not stop.is_set():
                from .tool_speed import run_set

                run_set(
                    lambda label, fn: timed("tool", level, idx, fn, label), lambda c: backend.exec(box, c)
                )
            if plan.reset and first and not stop.is_set():
                timed("reset", level, idx, lambda: backend.exec(box, plan.reset), plan.reset)
        finally:
            timed("teardown", level, idx, lambda: backend.remove(box), block=block)
            with lock:
                live.pop(id(box), None)

    def pulls(level: int) -> None:
        """Task image loads from a local archive, one at a time (the backend's pull link)."""
        if not (plan.image_mb and hasattr(backend, "pull")):
            return
        with tempfile.TemporaryDirectory(prefix="simrollout-image-") as folder:
            archive, size = backend.image_archive(plan.image, plan.image_mb, Path(folder))
            for k in range(plan.pulls):
                if stop.is_set():
                    break
                ids, _ = timed("pull", level, k, lambda: backend.pull(archive), size=size)
                backend.drop_images(ids or [])

    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        for level, count, block in plan.schedule():
            with ThreadPoolExecutor(level) as pool:
                futures = []
                try:
                    for idx in range(count):
                        if plan.mode == "staggered" and idx:
                            time.sleep(plan.gap)
                        elif plan.mode == "burst" and idx and idx % level == 0:
                            for f in futures[-level:]:  # waves of `level` released together
                                f.result()
                        futures.append(pool.submit(lifecycle, level, idx, block))
                    for f in futures:
                        f.result()
                    if level == plan.levels[0] and block is None:
                        pulls(level)
                except BaseException:
                    stop.set()  # running lifecycles stop between operations and tear down
                    for f in futures:
                        f.cancel()
                    raise
    finally:
        stop.set()
        # workers notice `stop` between operations; those mid-create register, then tear down
        with lock:
            leftovers = list(live.values())
        for box in leftovers:
            try:
                backend.remove(box)
            except Exception:
                pass
        try:
            backend.sweep(run_id)
        except Exception as exc:  # the engine stopped answering: say what is left, no traceback
            raise SubstrateError(
                f"the {getattr(backend, 'name', 'backend')} engine did not answer while removing this "
                f"probe's sandboxes ({type(exc).__name__}: {exc}). The records measured so far are in "
                f"{out}; sandboxes of run {run_id} may be left: remove them with `simrollout cleanup "
                f"{getattr(backend, 'name', '')}` once the engine answers again."
            ) from None
        finally:
            writer.close()
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, previous)
    return run_id


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def read_records(paths: list[Path]) -> list[dict]:
    """Read JSONL probe records; a malformed line is an InputError naming file and line."""
    from ..errors import InputError, read_text

    out = []
    optional = ("command", "bytes", "think", "reference", "block")
    required = {f for f in ProbeRecord.__dataclass_fields__ if f not in optional}
    for path in paths:
        for n, line in enumerate(read_text(path, "JSONL file of probe records").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}: line {n} is not valid JSON ({exc.msg}).") from None
            if not isinstance(rec, dict):
                raise InputError(
                    f"{path}: line {n} is {line.strip()[:40]!r}; expected a JSON object (a probe record)."
                )
            missing = required - set(rec)
            if missing:
                raise InputError(
                    f"{path}: line {n}: probe record lacks field(s) {sorted(missing)}; expected the "
                    "fields written by 'simrollout probe'."
                )
            if rec["phase"] not in PHASES + ("generate",):
                raise InputError(
                    f"{path}: line {n}: field 'phase' is {rec['phase']!r}; expected one of "
                    f"{list(PHASES) + ['generate']}."
                )
            lat = rec["latency"]
            if lat is not None and (isinstance(lat, bool) or not isinstance(lat, int | float)):
                raise InputError(
                    f"{path}: line {n}: field 'latency' is {lat!r}; expected seconds (a number)."
                )
            rec["_file"], rec["_line"] = str(path), n
            out.append(rec)
    return out
