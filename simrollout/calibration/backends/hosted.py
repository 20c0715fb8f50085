"""Hosted sandbox services through their official SDKs: Daytona, E2B, Modal.

These cannot run without the service's package and an API key; each says which is missing.
"""

from __future__ import annotations

import datetime as dt
import os
from importlib.metadata import PackageNotFoundError, version

from ..cleanup import TTL, Owned, owner
from . import BackendUnavailable, CommandFailed, require

PROJECT, RUN = "simrollout", "simrollout.probe"  # labels: every sandbox; its probe run
CREATED, OWNER = "simrollout.created", "simrollout.owner"
READY_TIMEOUT = 300.0


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return ""


def _labels(run: str) -> dict[str, str]:
    """The labels (tags, metadata) every probe sandbox carries."""
    import time

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
        try:
            self.exec(sb, "true")  # ready when a first command answers
        except BaseException:
            self.remove(sb)
            raise
        return sb

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
    """E2B: ``Sandbox.create()``, ``sandbox.commands.run``, ``sandbox.files``, ``kill``."""

    name = "e2b"
    supports_files = True

    def __init__(self):
        self.sdk = require("e2b", "e2b", "e2b")
        _need_env("e2b", "E2B_API_KEY")

    def info(self):
        return {"backend_version": getattr(self.sdk, "__version__", ""), "engine_version": "hosted"}

    def create(self, image, label):
        kw = {"metadata": {"simrollout.probe": label}}
        return self.sdk.Sandbox.create(template=image, **kw) if image else self.sdk.Sandbox.create(**kw)

    def exec(self, sandbox, command):
        r = sandbox.commands.run(command)
        if r.exit_code != 0:
            raise CommandFailed(f"exit {r.exit_code}")

    def upload(self, sandbox, path, data):
        sandbox.files.write(path, data)

    def download(self, sandbox, path):
        return sandbox.files.read(path, format="bytes")

    def remove(self, sandbox):
        sandbox.kill()

    def sweep(self, label):
        return 0  # sandboxes die at their timeout; every created one is killed explicitly


class ModalBackend:
    """Modal: ``modal.Sandbox.create(app=...)``, ``sandbox.exec``, ``terminate``."""

    name = "modal"
    supports_files = False

    def __init__(self, app_name: str = "simrollout-probe"):
        self.sdk = require("modal", "modal", "modal")
        if not (os.environ.get("MODAL_TOKEN_ID") or os.path.exists(os.path.expanduser("~/.modal.toml"))):
            raise BackendUnavailable(
                "the modal backend needs credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET "
                "or run 'modal token new'."
            )
        self.app = self.sdk.App.lookup(app_name, create_if_missing=True)

    def info(self):
        return {"backend_version": getattr(self.sdk, "__version__", ""), "engine_version": "hosted"}

    def create(self, image, label):
        img = self.sdk.Image.from_registry(image) if image else self.sdk.Image.debian_slim()
        sb = self.sdk.Sandbox.create(app=self.app, image=img, timeout=600)
        sb.set_tags({"simrollout.probe": label})
        self.exec(sb, "true")
        return sb

    def exec(self, sandbox, command):
        p = sandbox.exec("sh", "-c", command)
        p.wait()
        if p.returncode != 0:
            raise CommandFailed(f"exit {p.returncode}")

    def upload(self, sandbox, path, data):
        raise NotImplementedError

    def download(self, sandbox, path):
        raise NotImplementedError

    def remove(self, sandbox):
        sandbox.terminate()

    def sweep(self, label):
        found = list(self.sdk.Sandbox.list(app_id=self.app.app_id, tags={"simrollout.probe": label}))
        for sb in found:
            sb.terminate()
        return len(found)
