"""Credentials never reach a record, a profile, a validation record, a log line or an error.

:func:`scrub` is the one function every writer and printer passes its text through: it replaces
the value of every credential variable (the API keys the probes and the SDK backends read, and any
variable named with ``--api-key-env``) with ``***`` and drops the user and password of any URL
(``https://user:pass@host`` becomes ``https://host``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .errors import InputError

# the variables holding credentials that simrollout or the SDKs it drives read
SECRET_VARIABLES = (
    "OPENAI_API_KEY",
    "DAYTONA_API_KEY",
    "E2B_API_KEY",
    "MODAL_TOKEN_ID",
    "MODAL_TOKEN_SECRET",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)
MASK = "***"
MIN_SECRET = 4  # a shorter value would mask ordinary text; no real key is that short
_named: set[str] = set()  # variables named at run time (--api-key-env)
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@'\"]*@")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def secret_values() -> list[str]:
    """The values of the credential variables set now, longest first."""
    names = (*SECRET_VARIABLES, *sorted(_named))
    values = {os.environ.get(n, "") for n in names}
    return sorted((v for v in values if len(v) >= MIN_SECRET), key=len, reverse=True)


def scrub(obj):
    """``obj`` (text, or mappings and lists of it) without credentials."""
    if isinstance(obj, str):
        text = _USERINFO.sub(r"\g<scheme>", obj)
        for value in secret_values():
            text = text.replace(value, MASK)
        return text
    if isinstance(obj, dict):
        return {scrub(k): scrub(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(scrub(v) for v in obj)
    return obj


def scrub_folder(folder: Path) -> None:
    """Every text file under ``folder`` scrubbed in place (binary files hold no text we wrote)."""
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        clean = scrub(text)
        if clean != text:
            path.write_text(clean, encoding="utf-8")


def strip_url(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its user and password, and those (for basic authentication), if any."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc)), (parts.username or "", parts.password or "")


def api_key(variable: str | None) -> str | None:
    """The API key in ``variable`` (``--api-key-env``), else in OPENAI_API_KEY if set; its
    variable is scrubbed from then on. Naming a variable that is not set is an input error."""
    if variable is not None and not _NAME.fullmatch(variable):
        raise InputError(
            "--api-key-env: expected the name of an environment variable (letters, digits and _) that "
            "holds the key, not the key itself (the value given is not shown)."
        )
    name = variable or "OPENAI_API_KEY"
    _named.add(name)
    value = os.environ.get(name, "")
    if variable is not None and not value:
        raise InputError(f"--api-key-env {name}: the variable {name} is not set; export the API key in it.")
    return value or None
