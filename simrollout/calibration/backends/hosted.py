"""Hosted sandbox services through their official SDKs: Daytona, E2B, Modal.

These cannot run without the service's package and an API key; each says which is missing.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from importlib.metadata import PackageNotFoundError, version

from ..cleanup import TTL, Owned, owner
from . import BackendUnavailable, CommandFailed, answered, require

PROJECT, RUN = "simrollout", "simrollout.probe"  # labels: every sandbox; its probe run
CREATED, OWNER = "simrollout.created", "simrollout.owner"
READY_TIMEOUT = 300.0
POLL = 0.1


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return ""


def _labels(run: str) -> dict[str, str]:
    """The labels (tags, metadata) every probe sandbox carries."""
    return {PROJECT: "probe", RUN: run, CREATED: f"{time.time():.3f}", OWNER: owner()}


def _owned(sid: str, labels: dict[str, str], created_at=None) -> Owned:
    """A listed sandbox as cleanup sees it; the service's creation time when the label is missing."""
    created = labels.get(CREATED)
    if created is None and created_at is not None:
        stamp = (
            created_at
            if isinstance(created_at, dt.datetime)
            else dt.datetime.fromisoformat(str(created_at).replace("Z", "+00:00"))
        )
        created = stamp.timestamp()
    return Owned(sid, labels.get(RUN, ""), float(created or 0.0), labels.get(OWNER, ""))


def _need_env(what: str, *names: str) -> None:
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        raise BackendUnavailable(f"the {what} backend needs credentials: set {', '.join(missing)}.")


class DaytonaBackend:
    """Daytona: a sandbox from a snapshot (an image already built on Daytona: creating from an
    image would time an image build), ``process.exec``, ``fs``, ``delete(wait=True)``.

    Sandboxes carry the project's labels and ``ttl_minutes`` (destroyed that long after creation,
    whatever their state) and are ephemeral (deleted when they stop).
    """

    name = "daytona"
    supports_files = True
    default_image = ""  # the organisation's default snapshot

    def __init__(self):
        self.sdk = require("daytona", "daytona", "daytona")
        _need_env("daytona", "DAYTONA_API_KEY")
        self.client = self.sdk.Daytona()

    def info(self):
        return {"backend_version": _version("daytona"), "engine_version": "hosted"}

    def create(self, image, label):
        params = self.sdk.CreateSandboxFromSnapshotParams(
            snapshot=image or None,
            labels=_labels(label),
            ttl_minutes=int(TTL // 60),
            ephemeral=True,
        )
        sb = self.client.create(params, timeout=READY_TIMEOUT)
        return answered(self, sb)

    def exec(self, sandbox, command):
        r = sandbox.process.exec(command)
        if r.exit_code != 0:
            raise CommandFailed(f"exit {r.exit_code}")

    def upload(self, sandbox, path, data):
        sandbox.fs.upload_file(data, path)

    def download(self, sandbox, path):
        return sandbox.fs.download_file(path)

    def remove(self, sandbox):
        """Delete and wait until Daytona reports the sandbox destroyed."""
        self.client.delete(sandbox, timeout=READY_TIMEOUT, wait=True)

    def _listed(self, labels: dict[str, str]) -> list:
        return list(self.client.list(self.sdk.ListSandboxesQuery(labels=labels)))

    def owned(self) -> list[Owned]:
        """Every sandbox of the organisation carrying the project's label, from any run."""
        return [_owned(sb.id, sb.labels or {}, sb.created_at) for sb in self._listed({PROJECT: "probe"})]

    def remove_owned(self, s: Owned) -> None:
        self.remove(self.client.get(s.id))

    def sweep(self, label):
        found = self._listed({RUN: label})
        for sb in found:
            self.remove(sb)
        return len(found)


class E2BBackend:
    """E2B: ``Sandbox.create``, ``commands.run`` (raises on a non-zero exit), ``files``, ``kill``.

    Sandboxes carry the project's metadata and ``timeout`` = TTL: E2B kills a sandbox when its
    timeout ends, so one whose probe died stops within that limit.
    """

    name = "e2b"
    supports_files = True
    default_image = ""  # E2B's 'base' template

    def __init__(self):
        self.sdk = require("e2b", "e2b", "e2b")
        _need_env("e2b", "E2B_API_KEY")

    def info(self):
        return {"backend_version": _version("e2b"), "engine_version": "hosted"}

    def create(self, image, label):
        sb = self.sdk.Sandbox.create(template=image or None, timeout=int(TTL), metadata=_labels(label))
        return answered(self, sb)

    def exec(self, sandbox, command):
        try:
            sandbox.commands.run(command)
        except self.sdk.CommandExitException as exc:
            raise CommandFailed(f"exit {exc.exit_code}") from None

    def upload(self, sandbox, path, data):
        sandbox.files.write(path, data)

    def download(self, sandbox, path):
        return bytes(sandbox.files.read(path, format="bytes"))

    def remove(self, sandbox):
        self._kill(sandbox.sandbox_id)

    def _kill(self, sid: str) -> None:
        """Kill and wait until E2B no longer lists the sandbox as running."""
        self.sdk.Sandbox.kill(sid)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            try:
                if self.sdk.Sandbox.get_info(sid).state != self.sdk.SandboxState.RUNNING:
                    return
            except self.sdk.NotFoundException:
                return
            time.sleep(POLL)
        raise TimeoutError(f"sandbox {sid} still running {READY_TIMEOUT} s after it was killed")

    def _listed(self, metadata: dict[str, str]) -> list:
        pages = self.sdk.Sandbox.list(query=self.sdk.SandboxQuery(metadata=metadata))
        found = []
        while pages.has_next:
            found += pages.next_items()
        return found

    def owned(self) -> list[Owned]:
        """Every running sandbox of the team carrying the project's metadata, from any run."""
        return [_owned(i.sandbox_id, i.metadata, i.started_at) for i in self._listed({PROJECT: "probe"})]

    def remove_owned(self, s: Owned) -> None:
        self._kill(s.id)

    def sweep(self, label):
        found = self._listed({RUN: label})
        for info in found:
            self._kill(info.sandbox_id)
        return len(found)


class ModalBackend:
    """Modal: ``Sandbox.create(app=..., image=..., tags=..., timeout=TTL)``, ``exec``,
    ``terminate(wait=True)``.

    ``timeout`` is the server-side limit (Modal ends the sandbox then). The image is resolved
    (built or pulled by Modal) once in :meth:`prepare`, before any create is timed.
    """

    name = "modal"
    supports_files = False
    default_image = "busybox:1.36"  # pulled by Modal from Docker Hub

    def __init__(self, app_name: str = "simrollout-probe"):
        self.sdk = require("modal", "modal", "modal")
        if not (os.environ.get("MODAL_TOKEN_ID") or os.path.exists(os.path.expanduser("~/.modal.toml"))):
            raise BackendUnavailable(
                "the modal backend needs credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET "
                "or run 'modal token new'."
            )
        self.app = self.sdk.App.lookup(app_name, create_if_missing=True)
        self._images: dict[str, object] = {}

    def info(self):
        return {"backend_version": _version("modal"), "engine_version": "hosted"}

    def prepare(self, image: str):
        """Resolve the image on Modal (a build or pull the first time) outside any timed create."""
        if image not in self._images:
            img = self.sdk.Image.from_registry(image) if image else self.sdk.Image.debian_slim()
            self._images[image] = img.build(self.app)
        return self._images[image]

    def create(self, image, label):
        img = self.prepare(image)
        sb = self.sdk.Sandbox.create(app=self.app, image=img, timeout=int(TTL), tags=_labels(label))
        return answered(self, sb)

    def exec(self, sandbox, command):
        p = sandbox.exec("sh", "-c", command)
        code = p.wait()
        if code != 0:
            raise CommandFailed(f"exit {code}")

    def upload(self, sandbox, path, data):
        raise NotImplementedError

    def download(self, sandbox, path):
        raise NotImplementedError

    def remove(self, sandbox):
        """Terminate and wait until Modal reports the sandbox finished."""
        sandbox.terminate(wait=True)

    def _listed(self, tags: dict[str, str]) -> list:
        return list(self.sdk.Sandbox.list(app_id=self.app.app_id, tags=tags))

    def owned(self) -> list[Owned]:
        """Every running sandbox of the app carrying the project's tag, from any run."""
        return [_owned(sb.object_id, sb.get_tags()) for sb in self._listed({PROJECT: "probe"})]

    def remove_owned(self, s: Owned) -> None:
        self.remove(self.sdk.Sandbox.from_id(s.id))

    def sweep(self, label):
        found = self._listed({RUN: label})
        for sb in found:
            self.remove(sb)
        return len(found)
