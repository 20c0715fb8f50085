"""A launch script's settings as a shell would expand them: its variable assignments (``NAME=...``,
``: "${NAME:=default}"``, bash arrays), then every argument of its commands, with ``${VAR}``,
``${VAR:-default}`` and ``$((arithmetic))`` expanded. Nothing is run."""

from __future__ import annotations

import ast
import operator
import re
import shlex

_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_DEFAULT = re.compile(r'^:\s+"?\$\{([A-Za-z_][A-Za-z0-9_]*):=(.*)\}"?\s*(?:#.*)?$')
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.USub: operator.neg, ast.UAdd: operator.pos}  # fmt: skip


def _arith(expr: str, env: dict[str, str]) -> str:
    """``$(( expr ))``: integers, + - * / %, names as variables (unset: 0), as bash computes it."""
    expr = re.sub(r"\$?\b([A-Za-z_][A-Za-z0-9_]*)\b", lambda m: env.get(m.group(1), "0") or "0", expr)

    def ev(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError(expr)

    try:
        return str(ev(ast.parse(expr.strip().replace("/", "//"), mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError):
        return f"$(({expr}))"


def _close(text: str, i: int, open_: str, close: str) -> int:
    """Index of the bracket closing the one at ``i`` (or the end of ``text``)."""
    depth = 0
    for j in range(i, len(text)):
        depth += (text[j] == open_) - (text[j] == close)
        if depth == 0:
            return j
    return len(text)


def expand(text: str, env: dict[str, str]) -> str:
    """``text`` with its variables and arithmetic expanded (an unknown variable: its default, or empty)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$((", i):
            j = _close(text, i + 1, "(", ")")
            out.append(_arith(expand(text[i + 3 : j - 1], env), env))
            i = j + 1
        elif text.startswith("${", i):
            j = _close(text, i + 1, "{", "}")
            m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[@\])?(?::?[-=](.*))?$", text[i + 2 : j], re.S)
            if m and env.get(m.group(1), "") != "":
                out.append(env[m.group(1)])
            elif m and m.group(2) is not None:
                out.append(expand(m.group(2), env))
            i = j + 1
        elif m := re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)", text[i:]):
            out.append(env.get(m.group(1), ""))
            i += m.end()
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _words(line: str, env: dict[str, str]) -> list[str]:
    try:
        return shlex.split(expand(line, env), comments=True)
    except ValueError:
        return []


def read_script(text: str) -> tuple[dict[str, str], list[str]]:
    """``(variables, arguments)``: the variables the script sets and the words of its command lines
    (assignments excluded), in order."""
    env: dict[str, str] = {}
    args: list[str] = []
    lines = text.replace("\\\n", " ").splitlines()
    k = 0
    while k < len(lines):
        line = lines[k].strip()
        k += 1
        if not line or line.startswith("#"):
            continue
        if m := _DEFAULT.match(line):
            env.setdefault(m.group(1), expand(m.group(2).strip('"'), env))
            continue
        if m := _ASSIGN.match(line):
            name, value = m.groups()
            if value.startswith("(") and ")" not in value:  # a bash array over several lines
                body = [value[1:]]
                while k < len(lines) and not lines[k].strip().startswith(")"):
                    body.append(lines[k])
                    k += 1
                k += 1
                # each line on its own: a comment ends its line, not the array
                env[name] = " ".join(shlex.quote(w) for part in body for w in _words(part, env))
            else:
                words = _words(value.strip("()") if value.startswith("(") else value, env)
                env[name] = " ".join(words) if value.startswith("(") else (words[0] if words else "")
            continue
        args.extend(w for w in _words(line, env) if not _ASSIGN.match(w) or "." in w.split("=")[0])
    return env, args
