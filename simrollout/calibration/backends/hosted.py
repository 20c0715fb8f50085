"""Hosted sandbox services through their official SDKs: Daytona, E2B, Modal.

These cannot run without the service's package and an API key; each says which is missing.
"""

from __future__ import annotations

import os

from . import BackendUnavailable, CommandFailed, require


def _need_env(what: str, *names: str) -> None:
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        raise BackendUnavailable(f"the {what} backend needs credentials: set {', '.join(missing)}.")


class DaytonaBackend:
    """Daytona: ``Daytona().create()``, ``sandbox.process.exec``, ``sandbox.fs``, ``delete``."""

    name = "daytona"
    supports_files = True

    def __init__(self):
        self.sdk = require("daytona", "daytona", "daytona")
        _need_env("daytona", "DAYTONA_API_KEY")
        self.client = self.sdk.Daytona()

    def info(self):
        return {"backend_version": getattr(self.sdk, "__version__", ""), "engine_version": "hosted"}

    def create(self, image, label):
        params = self.sdk.CreateSandboxFromImageParams(image=image, labels={"simrollout.probe": label})
        return self.client.create(params) if image else self.client.create()

    def exec(self, sandbox, command):
        r = sandbox.process.exec(command)
        if r.exit_code != 0:
            raise CommandFailed(f"exit {r.exit_code}")

    def upload(self, sandbox, path, data):
        sandbox.fs.upload_file(data, path)

    def download(self, sandbox, path):
        return sandbox.fs.download_file(path)

    def remove(self, sandbox):
        self.client.delete(sandbox)

    def sweep(self, label):
        found = self.client.list(labels={"simrollout.probe": label})
        items = getattr(found, "items", found)
        for sb in items:
            self.client.delete(sb)
        return len(items)


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
