"""What every verb shares: the error console, help that reads well, its options parsed (levels,
JSON request fields, the results folder, an OpenAI-compatible server and its key) and the
progress bar.

Typer keeps a docstring's line breaks in a group's list of commands, and prints reStructuredText
markup as it is. :class:`TidyGroup` (the app's group class) rewraps every command's and option's
help into paragraphs before Typer renders it, prints ``name`` as 'name', and shows a flag's
default ('off') as Typer shows other options' defaults.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from rich.console import Console
from typer.core import TyperGroup, TyperOption

from ..errors import InputError

err = Console(stderr=True)

_RST = re.compile(r"``([^`]+)``")


def reflow(text: str | None) -> str | None:
    """Paragraphs (blank-line separated) as single lines; ``x`` as 'x'."""
    if not text:
        return text
    paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n")]
    return _RST.sub(r"'\1'", "\n\n".join(p for p in paragraphs if p))


def tidy(cmd: Any) -> Any:
    """``cmd`` with its help and its options' help reflowed and its flags' default shown."""
    if getattr(cmd, "_tidy", False):
        return cmd
    cmd.help, cmd.short_help = reflow(cmd.help), reflow(cmd.short_help)
    for p in cmd.params:
        p.help = reflow(getattr(p, "help", None))
        flag_off = isinstance(p, TyperOption) and p.is_flag and not p.secondary_opts and p.default is False
        if flag_off and p.name != "help":
            p.show_default = "off"
    cmd._tidy = True
    return cmd


class TidyGroup(TyperGroup):
    """The app's group: every command it hands out (to run or to list) is tidied first."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        return tidy(cmd) if cmd is not None else None

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.help = reflow(self.help)
        super().format_help(ctx, formatter)


def _out_folder(out: Path) -> None:
    """Refuse, before anything is simulated, a results folder that cannot be created."""
    from ..outputs import writable_folder

    writable_folder(out, "--out")


NO_CACHE_HELP = (
    "Run every serving pilot again instead of reusing the ones kept in the cache folder "
    "(also: SIMROLLOUT_NO_CACHE=1; docs/performance.md)."
)


def _cache(no_cache: bool) -> None:
    """``--no-cache``: serving pilots are neither read from nor written to the cache folder."""
    if no_cache:
        from ..run import pilot_cache

        pilot_cache.disable()


def _progress_bar(quiet: bool = False, *, console: Console | None = None, get_time=None):
    """The progress line on stderr: the stage (``pilots``, ``draws``, ``cells``, ``outputs``;
    :mod:`simrollout.run.stages`), its share done, the time taken and an estimate of the time left
    in the stage (shown on a terminal only, never with ``quiet``)."""
    from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    from ..run import stages

    class TimeLeft(ProgressColumn):
        def render(self, task) -> Text:
            if task.total is None or task.finished:
                return Text("")
            left = task.time_remaining
            if left is None:
                return Text("estimating the time left")
            m, sec = divmod(int(round(left)), 60)
            return Text(f"about {m}m {sec:02d}s left" if m else f"about {sec}s left")

    class StageProgress(Progress):
        def __enter__(self):
            super().__enter__()
            self._listen = stages.listening(self._stage)
            self._listen.__enter__()
            return self

        def __exit__(self, *exc):
            self._listen.__exit__(*exc)
            return super().__exit__(*exc)

        def _stage(self, stage: str, done: int, total: int | None) -> None:
            if not self.tasks:
                return
            task = self.tasks[-1].id
            if done == 0:
                self.reset(task, total=total, description=stage)
                self.refresh()
            else:
                self.update(task, completed=done)

    console = console or err
    return StageProgress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        TimeLeft(),
        console=console,
        transient=True,
        disable=quiet or not console.is_terminal,
        get_time=get_time,
    )


def _server(base_url: str, model: str, api_key_env: str | None):
    """The OpenAI-compatible server, with the API key of ``--api-key-env`` (simrollout.redact)."""
    from ..calibration.engine_probe import Server
    from ..redact import api_key

    return Server(base_url, model, api_key=api_key(api_key_env), key_variable=api_key_env or "OPENAI_API_KEY")


def _levels(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(c) for c in text.split(","))
        assert values and all(c > 0 for c in values)
    except (ValueError, AssertionError):
        raise InputError(f"{option}: expected positive integers like 1,8,32, got '{text}'.") from None
    return values


def _json_option(text: str, option: str) -> dict:
    import json

    try:
        value = json.loads(text)
        assert isinstance(value, dict)
    except (ValueError, AssertionError):
        raise InputError(f"{option}: expected a JSON object of request fields, got {text!r}.") from None
    return value
