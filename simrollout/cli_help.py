"""Help that reads well, for every command and option of the ``simrollout`` app, whoever adds them.

Typer keeps a docstring's line breaks in a group's list of commands, and prints reStructuredText
markup as it is. :class:`TidyGroup` (the app's group class) rewraps every command's and option's
help into paragraphs before Typer renders it, prints ``name`` as 'name', and shows a flag's
default ('off') as Typer shows other options' defaults.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from typer.core import TyperGroup, TyperOption

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
