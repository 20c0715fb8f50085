"""Local subprocesses: always available; the baseline (no isolation, no image)."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from ..cleanup import Owned
from . import CommandFailed


class ProcessBackend:
    name = "process"
    default_image = "simrollout-busybox:local"  # ignored: a process needs no image
    supports_files = True

    def info(self) -> dict[str, str]:
        return {"backend_version": platform.python_version(), "engine_version": platform.release()}

    def create(self, image: str, label: str) -> Path:
        # the folder's name carries the run, the creation time and the owning process
        work = Path(tempfile.mkdtemp(prefix=f"simrollout-{label}-{int(time.time())}-{os.getpid()}-"))
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

    def owned(self) -> list[Owned]:
        """Every sandbox folder of the project's, from any run."""
        out = []
        for p in Path(tempfile.gettempdir()).glob("simrollout-*"):
            parts = p.name.split("-")  # simrollout-<run>-<created>-<pid>-<random>
            if not p.is_dir() or len(parts) < 3:
                continue
            if len(parts) >= 5 and parts[-3].isdigit() and parts[-2].isdigit():
                run, owner = "-".join(parts[1:-3]), f"{socket.gethostname()}:{parts[-2]}"
                out.append(Owned(str(p), run, float(parts[-3]), owner))
            else:  # named by an older version: no owner recorded
                out.append(Owned(str(p), "-".join(parts[1:-1]), p.stat().st_mtime, ""))
        return out

    def remove_owned(self, s: Owned) -> None:
        shutil.rmtree(s.id, ignore_errors=True)

    def sweep(self, label: str) -> int:
        gone = 0
        for p in Path(tempfile.gettempdir()).glob(f"simrollout-{label}-*"):
            shutil.rmtree(p, ignore_errors=True)
            gone += 1
        return gone
