"""Sandbox backends behind one small interface, loaded lazily by name.

A backend creates a sandbox (returning once its first command has answered), executes commands in
it, optionally moves files, and removes it (returning once the sandbox is gone). Every sandbox
carries the project's label, its run, creation time and owner, and the service's own time limit
where there is one (docs/calibration.md, "What each phase measures"). Backends whose client
library or credentials are missing raise :class:`BackendUnavailable` with what to install or set.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from ...errors import InputError


class BackendUnavailable(InputError):
    """The backend's client library, engine or credentials are missing."""


class Backend(Protocol):
    name: str
    supports_files: bool
    default_image: str  # one that exists where the backend runs ("": the service's default)

    def info(self) -> dict[str, str]: ...
    def create(self, image: str, label: str) -> Any: ...
    def exec(self, sandbox: Any, command: str) -> None: ...
    def upload(self, sandbox: Any, path: str, data: bytes) -> None: ...
    def download(self, sandbox: Any, path: str) -> bytes: ...
    def remove(self, sandbox: Any) -> None: ...
    def sweep(self, label: str) -> int: ...
    def owned(self) -> list: ...  # every sandbox with the project's label (cleanup.Owned)
    def remove_owned(self, sandbox) -> None: ...


BACKENDS = {
    "process": "simrollout.calibration.backends.process:ProcessBackend",
    "docker": "simrollout.calibration.backends.docker:DockerBackend",
    "kubernetes": "simrollout.calibration.backends.kubernetes:KubernetesBackend",
    "daytona": "simrollout.calibration.backends.hosted:DaytonaBackend",
    "e2b": "simrollout.calibration.backends.hosted:E2BBackend",
    "modal": "simrollout.calibration.backends.hosted:ModalBackend",
    "ec2": "simrollout.calibration.backends.ec2:EC2Backend",
}


def get_backend(name: str, **options) -> Backend:
    if name not in BACKENDS:
        raise InputError(f"unknown backend '{name}'; expected one of {sorted(BACKENDS)}.")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)(**options)


def require(module: str, extra: str, what: str):
    """Import an optional SDK or explain how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise BackendUnavailable(
            f"the {what} backend needs the '{module}' package: pip install 'simrollout[{extra}]'."
        ) from None


class CommandFailed(RuntimeError):
    """A command in a sandbox exited non-zero."""


def answered(backend, sandbox):
    """End a create: the sandbox is ready once a first command has answered; one that never
    answers is removed before the error goes on."""
    try:
        backend.exec(sandbox, "true")
    except BaseException:
        backend.remove(sandbox)
        raise
    return sandbox
