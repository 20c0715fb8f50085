"""Local subprocesses: always available; the baseline (no isolation, no image)."""

from __future__ import annotations

import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import CommandFailed


class ProcessBackend:
    name = "process"
    supports_files = True

    def info(self) -> dict[str, str]:
        return {"backend_version": platform.python_version(), "engine_version": platform.release()}

    def create(self, image: str, label: str) -> Path:
        work = Path(tempfile.mkdtemp(prefix=f"simrollout-{label}-"))
        self.exec(work, "true")  # ready when a first command runs
        return work

    def exec(self, sandbox: Path, command: str) -> None:
        r = subprocess.run(["sh", "-c", command], cwd=sandbox, capture_output=True)
        if r.returncode != 0:
            raise CommandFailed(f"exit {r.returncode}: {r.stderr[-200:]!r}")

    def upload(self, sandbox: Path, path: str, data: bytes) -> None:
        (sandbox / path).write_bytes(data)

    def download(self, sandbox: Path, path: str) -> bytes:
        return (sandbox / path).read_bytes()

    def remove(self, sandbox: Path) -> None:
        shutil.rmtree(sandbox, ignore_errors=True)

    def sweep(self, label: str) -> int:
        gone = 0
        for p in Path(tempfile.gettempdir()).glob(f"simrollout-{label}-*"):
            shutil.rmtree(p, ignore_errors=True)
            gone += 1
        return gone
