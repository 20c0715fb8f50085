"""What a verb prints: its tables (``--format table``, the default), its summary alone on stdout
as JSON or CSV (``--format json|csv``: messages go to stderr), or nothing but errors (``--quiet``)."""

from __future__ import annotations

from dataclasses import dataclass

import typer

from ..errors import InputError

FORMATS = ("table", "json", "csv")

FORMAT_HELP = "What stdout gets: table (the tables), json or csv (the summary alone; messages go to stderr)."
QUIET_HELP = "Print nothing but errors (the results folder is written as always)."


@dataclass(frozen=True)
class OutputMode:
    format: str = "table"
    quiet: bool = False

    @property
    def tables(self) -> bool:
        """Whether the tables go to stdout."""
        return self.format == "table" and not self.quiet

    def say(self, text: str) -> None:
        """A message: on stdout beside the tables, on stderr beside JSON or CSV, never when quiet."""
        if self.quiet:
            return
        if self.format == "table":  # wrapped to the screen like the tables
            from ..run.screen import screen_console

            screen_console().print(text, markup=False, overflow="fold")
        else:
            typer.echo(text, err=True)

    def data(self, text: str) -> None:
        """The summary as JSON or CSV on stdout (nothing with ``table``, or when quiet)."""
        if self.format != "table" and not self.quiet:
            typer.echo(text.rstrip("\n"))


def output_mode(fmt: str, quiet: bool) -> OutputMode:
    """The mode of ``--format`` and ``--quiet``; an unknown format is an input error."""
    if fmt not in FORMATS:
        raise InputError(f"--format: expected one of {', '.join(FORMATS)}, got '{fmt}'.")
    return OutputMode(fmt, quiet)
