"""The Docker Engine through the official Python SDK (docker-py)."""

from __future__ import annotations

import io
import tarfile
import time
import uuid
from pathlib import Path

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

    # ------------------------------------------------------------ task images
    def image_archive(self, image: str, mb: int, folder: Path) -> tuple[Path, int]:
        """A task image: ``image`` plus a layer of ``mb`` MB of random data, saved to an archive in
        ``folder`` and removed from the engine (untimed). Returns the archive and its bytes."""
        c = self.client.containers.run(
            image,
            command=["/bin/sh", "-c", f"dd if=/dev/urandom of=/task.bin bs=1048576 count={mb} 2>/dev/null"],
            detach=True,
            network_mode=self.network,
            labels={LABEL: "task-image", CREATED: f"{time.time():.3f}", OWNER: owner()},
        )
        try:
            c.wait(timeout=600)
            img = c.commit(repository="simrollout-task", tag=uuid.uuid4().hex[:10])
        finally:
            c.remove(force=True)
        path = folder / "task-image.tar"
        with open(path, "wb") as f:
            for chunk in img.save(named=True):
                f.write(chunk)
        self.client.images.remove(img.id, force=True)
        return path, path.stat().st_size

    def pull(self, archive: Path) -> list[str]:
        """Load a task image from its archive: a pull without the network (timed). Returns its ids."""
        with open(archive, "rb") as f:
            return [im.id for im in self.client.images.load(f)]

    def drop_images(self, ids: list[str]) -> None:
        """Remove loaded task images, so the next pull starts from none (untimed)."""
        for i in ids:
            try:
                self.client.images.remove(i, force=True)
            except self._docker.errors.NotFound:
                pass

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
