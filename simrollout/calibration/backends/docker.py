"""The Docker Engine through the official Python SDK (docker-py)."""

from __future__ import annotations

import io
import tarfile
import time

from ..cleanup import TTL, Owned, owner
from . import BackendUnavailable, CommandFailed, answered, require

LABEL = "simrollout.probe"  # the run; beside it the creation time and the owning process
CREATED, OWNER = "simrollout.created", "simrollout.owner"


class DockerBackend:
    name = "docker"
    default_image = "simrollout-busybox:local"  # built by scripts/start-docker.sh
    supports_files = True

    def __init__(self, network: str = "none"):
        docker = require("docker", "docker", "docker")
        try:
            self.client = docker.from_env(max_pool_size=512)
            self.client.ping()
        except Exception as exc:  # docker.errors.DockerException and connection errors
            raise BackendUnavailable(
                f"no Docker engine answers ({exc.__class__.__name__}); start dockerd or set "
                "DOCKER_HOST (on Debian: scripts/start-docker.sh)."
            ) from None
        self.network = network
        self._docker = docker

    def info(self) -> dict[str, str]:
        v = self.client.version()
        return {"backend_version": self._docker.__version__, "engine_version": v.get("Version", "")}

    def create(self, image: str, label: str):
        # the container ends and removes itself after TTL: a probe that never comes back stops
        # holding it within that limit
        c = self.client.containers.run(
            image,
            command=["/bin/sleep", str(int(TTL))],
            detach=True,
            auto_remove=True,
            network_mode=self.network,
            labels={LABEL: label, CREATED: f"{time.time():.3f}", OWNER: owner()},
        )
        return answered(self, c)

    def exec(self, sandbox, command: str) -> None:
        code, out = sandbox.exec_run(["/bin/sh", "-c", command])
        if code != 0:
            raise CommandFailed(f"exit {code}: {out[-200:]!r}")

    def upload(self, sandbox, path: str, data: bytes) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(path.rsplit("/", 1)[-1])
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        sandbox.put_archive(path.rsplit("/", 1)[0] or "/", buf.getvalue())

    def download(self, sandbox, path: str) -> bytes:
        stream, _ = sandbox.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            return tar.extractfile(tar.getmembers()[0]).read()

    def remove(self, sandbox) -> None:
        try:
            sandbox.remove(force=True)
        except self._docker.errors.NotFound:
            pass  # already gone (it removes itself when it stops)
        except self._docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise

    def owned(self) -> list[Owned]:
        """Every container carrying the project's label, from any run. The listing is sparse (no
        inspect per container), so a container that removes itself meanwhile is not an error."""
        out = []
        for c in self.client.containers.list(all=True, sparse=True, filters={"label": LABEL}):
            labels = c.attrs.get("Labels") or {}
            created = labels.get(CREATED, c.attrs.get("Created", 0))  # older versions: the engine's time
            out.append(Owned(c.id, labels.get(LABEL, ""), float(created), labels.get(OWNER, "")))
        return out

    def remove_owned(self, s: Owned) -> None:
        try:
            self.remove(self.client.containers.get(s.id))
        except self._docker.errors.NotFound:
            pass

    def sweep(self, label: str) -> int:
        found = self.client.containers.list(all=True, sparse=True, filters={"label": f"{LABEL}={label}"})
        for c in found:
            try:
                c.remove(force=True)
            except self._docker.errors.NotFound:
                pass
        return len(found)
