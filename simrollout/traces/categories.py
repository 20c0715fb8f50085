"""Tool names to the simulator's categories: shell, read, edit, search, test, web (else other).

The names are TraceLab's tool sets (Claude Code and Codex) folded into six categories; shell
command lines (SWE-agent, mini-swe-agent, a Codex ``exec_command``) go by their first word. A
user map (``--tool-map name=category,...`` or a YAML mapping) overrides both.
"""

from __future__ import annotations

import re

CATEGORIES = ("shell", "read", "edit", "search", "test", "web", "other")

NAMES = {
    "shell": (
        "Bash",
        "BashOutput",
        "KillBash",
        "KillShell",
        "exec",
        "exec_command",
        "write_stdin",
        "shell_command",
        "shell",
        "send_input",
        "mcp__ide__executeCode",
        "bash",
        "execute_bash",
    ),
    "edit": (
        "Edit",
        "Write",
        "MultiEdit",
        "NotebookEdit",
        "apply_patch",
        "str_replace_editor_edit",
        "edit",
        "write_file",
        "create",
    ),
    "read": (
        "Read",
        "LS",
        "view_image",
        "read_file",
        "view",
        "open",
        "list_directory",
        "goto",
        "scroll_up",
        "scroll_down",
    ),
    "search": ("Grep", "Glob", "ToolSearch", "search_dir", "search_file", "find_file", "grep", "glob"),
    "web": ("WebFetch", "WebSearch", "web_search", "web_fetch", "fetch"),
    "test": ("run_tests", "pytest"),
}
_BY_NAME = {n: c for c, names in NAMES.items() for n in names}

# first word of a shell command line
WORDS = {
    "read": ("cat", "head", "tail", "less", "more", "ls", "tree", "wc", "nl", "file", "stat", "pwd"),
    "search": ("grep", "rg", "find", "ag", "ack", "fd", "locate", "git-grep"),
    "edit": ("sed -i", "patch", "tee", "touch", "mv", "cp", "rm", "mkdir", "apply_patch"),
    "test": (
        "pytest",
        "tox",
        "nox",
        "unittest",
        "go test",
        "cargo test",
        "npm test",
        "make test",
        "python -m pytest",
        "python3 -m pytest",
        "python -m unittest",
    ),
    "web": ("curl", "wget"),
}


def command_category(line: str) -> str:
    """A shell command line's category by its first words (``cd x &&`` prefixes dropped)."""
    text = line.strip()
    text = re.sub(r"^(cd\s+\S+\s*(&&|;)\s*)+", "", text)
    if re.search(r"(^|\s)(cat|echo|printf)\b[^|]*(>|<<)", text):
        return "edit"  # a heredoc or a redirect writes a file
    for cat in ("test", "edit", "search", "read", "web"):
        for word in WORDS[cat]:
            if text == word or text.startswith(word + " "):
                return cat
    return "shell"


def category(name: str, command: str | None = None, override: dict[str, str] | None = None) -> str:
    """The category of a tool ``name`` (called with a shell ``command`` line, if known)."""
    if override and name in override:
        return override[name]
    if name == "str_replace_editor" and command:  # SWE-agent's editor: its sub-command decides
        sub = command.split()[1] if len(command.split()) > 1 else ""
        return "read" if sub == "view" else "edit"
    cat = _BY_NAME.get(name)
    if cat == "shell" and command:
        return command_category(command)
    if cat is None and command:
        return command_category(command)
    return cat or "other"


def parse_map(text: str | dict | None) -> dict[str, str]:
    """``name=category,...`` (or a mapping) checked against :data:`CATEGORIES`."""
    from ..errors import InputError

    if not text:
        return {}
    pairs = text.items() if isinstance(text, dict) else (p.split("=", 1) for p in str(text).split(",") if p)
    out = {}
    for pair in pairs:
        if len(pair) != 2 or pair[1] not in CATEGORIES:
            raise InputError(
                f"--tool-map: expected name=category pairs with a category in {list(CATEGORIES)}, "
                f"got '{'='.join(pair)}'."
            )
        out[str(pair[0]).strip()] = pair[1]
    return out
