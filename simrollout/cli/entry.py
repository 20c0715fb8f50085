"""The ``simrollout`` app (its group tidies every command's help) and its entry point: input errors
become one paragraph on stderr and exit code 2; Ctrl-C and SIGTERM stop where the program stands."""

from __future__ import annotations

import sys

import typer

from ..errors import InputError, SubstrateError
from .options import TidyGroup, err

app = typer.Typer(
    cls=TidyGroup,  # every command's and option's help rewrapped and its defaults shown (cli.options)
    add_completion=False,
    no_args_is_help=True,
    help="Simulate coding-agent RL rollouts: probe -> calibrate -> run -> sweep/plan -> validate.",
)


@app.callback()
def _root() -> None:
    """Simulate coding-agent RL rollouts: probe -> calibrate -> run -> sweep/plan -> validate."""


class Interrupted(BaseException):
    """Ctrl-C (code 130) or SIGTERM (143), raised where the program stands so cleanups run."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


_PENDING: list[int] = []  # interrupts received: one raised where Python cannot propagate it
# (a finalizer, a callback that swallows exceptions) is raised again at the next progress tick


def _interrupt(signum, frame):
    import signal

    code = 143 if signum == signal.SIGTERM else 130
    _PENDING.append(code)
    raise Interrupted(code)


def _ticker(bar, task):
    """A progress callback for ``bar`` that raises a pending interrupt again."""

    def tick(done: int, total: int) -> None:
        if _PENDING:
            raise Interrupted(_PENDING[-1])
        bar.update(task, completed=done, total=total)

    return tick


def _reuse_large_blocks() -> None:
    """glibc serves each block over 32 MiB with its own fresh pages and returns them when freed,
    so every chunk of a workload faults its arrays in again (a tenth of a run's CPU time). Serve
    blocks up to 1 GiB from the heap, kept for the next chunk (forked workers inherit it). Not
    glibc: nothing changes."""
    import ctypes
    import ctypes.util

    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    if mallopt(m_mmap_threshold, 1 << 30):  # refused (an older glibc's limit): leave both as they are
        mallopt(m_trim_threshold, 1 << 30)


def main() -> None:
    """Entry point: input errors become one paragraph on stderr and exit code 2; Ctrl-C exits
    130 and SIGTERM 143, with one line (results folders are only replaced by complete runs)."""
    import signal

    _reuse_large_blocks()

    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        app()
    except Interrupted as exc:
        import os

        err.print("interrupted: nothing half-written; earlier results are as they were")
        sys.stdout.flush()
        sys.stderr.flush()
        # everything was cleaned up on the way out (workers ended, partial output removed); skip
        # the interpreter's exit hooks, which race with the process pool just torn down
        os._exit(exc.code)
    except (InputError, SubstrateError) as exc:
        from rich.markup import escape

        from ..redact import scrub

        err.print(f"[red]error:[/red] {escape(scrub(str(exc)))}", highlight=False, soft_wrap=True)
        sys.exit(2 if isinstance(exc, InputError) else 1)
