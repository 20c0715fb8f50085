"""The Daytona backend against the installed SDK: every call goes through the SDK's own methods,
validation, request serialisation and its OpenAPI clients' deserialisation; the service's answers
are the SDK's own models (daytona_api_client.Sandbox, ListSandboxesResponse, the toolbox's
ExecuteResponse)."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import socket

import pytest

from .http_layer import HTTPService

_need = importlib.import_module if os.environ.get("CI") else pytest.importorskip
daytona = _need("daytona")
api = _need("daytona_api_client")
toolbox = _need("daytona_toolbox_api_client")

API, PROXY = "https://daytona.test/api", "https://proxy.daytona.test/toolbox"


class Daytona:
    """Sandboxes as the service keeps them: 'starting' when created, 'started' on the next read;
    a deleted one reads 'destroying' once, then 404."""

    def __init__(self):
        self.boxes: dict[str, dict] = {}
        self.deleting: set[str] = set()
        self.commands: list[str] = []
        self.http = h = HTTPService()
        h.route("POST", "/api/sandbox", self.create)
        h.route("GET", "/api/sandbox", self.list)
        h.route("GET", "/api/sandbox/paginated", self.list)
        h.route("GET", "/api/sandbox/([^/]+)", self.read)
        h.route("DELETE", "/api/sandbox/([^/]+)", self.delete)
        h.route("GET", "/api/sandbox/([^/]+)/toolbox-proxy-url", self.proxy)
        h.route("POST", "/toolbox/([^/]+)/process/execute", self.execute)
        h.route("POST", "/toolbox/([^/]+)/files/bulk-upload", self.upload)
        h.route("POST", "/toolbox/([^/]+)/files/bulk-download", self.download)
        self.files: dict[tuple[str, str], bytes] = {}

    def create(self, call):
        req = api.CreateSandbox.from_dict(call.body)  # the request parses as the SDK's own model
        sid = f"sb-{len(self.boxes) + len(self.deleting) + 1}"
        now = dt.datetime.now(dt.timezone.utc).isoformat()
        box = api.Sandbox(
            id=sid, organization_id="org", name=sid, user="daytona", env={}, labels=req.labels,
            public=False, network_block_all=False, kvm=False, target="us", cpu=1, gpu=0, memory=1, disk=3,
            state="starting", snapshot=req.snapshot or "default", created_at=now, updated_at=now,
            auto_delete_interval=req.auto_delete_interval, toolbox_proxy_url=PROXY,
        )  # fmt: skip
        self.boxes[sid] = api.Sandbox.from_dict(box.to_dict()).to_dict()  # as the SDK reads it
        self.requests = getattr(self, "requests", []) + [req]
        return 200, self.boxes[sid]

    def read(self, call, sid):
        if sid not in self.boxes:
            return 404, {"statusCode": 404, "message": f"Sandbox {sid} not found"}
        box = self.boxes[sid]
        if sid in self.deleting:
            if box["state"] == "destroying":
                del self.boxes[sid]
                return self.read(call, sid)
            box["state"] = "destroying"
        elif box["state"] == "starting":
            box["state"] = "started"
        return 200, box

    def delete(self, call, sid):
        if sid not in self.boxes:
            return 404, {"statusCode": 404, "message": f"Sandbox {sid} not found"}
        self.deleting.add(sid)
        return 200, self.boxes[sid]

    def list(self, call):
        want = json.loads(call.query.get("labels", ["{}"])[0])
        items = [b for b in self.boxes.values() if want.items() <= b["labels"].items()]
        page = api.ListSandboxesResponse.from_dict({"items": items, "nextCursor": None})
        return 200, page.to_dict()

    def upload(self, call, sid):
        form = call.form()
        self.files[sid, form["files[0].path"].decode()] = form["files[0].file"]
        return 200, b""

    def download(self, call, sid):
        from urllib3.filepost import encode_multipart_formdata

        req = toolbox.FilesDownloadRequest.from_dict(call.body)
        parts = [("file", (p, self.files[sid, p], "application/octet-stream")) for p in req.paths]
        body, ctype = encode_multipart_formdata(parts)
        return 200, body, {"Content-Type": ctype}

    def proxy(self, call, sid):
        return 200, {"url": PROXY}

    def execute(self, call, sid):
        req = toolbox.ExecuteRequest.from_dict(call.body)
        self.commands.append(req.command)
        code = int(req.command.split()[-1]) if req.command.startswith("exit ") else 0
        return 200, toolbox.ExecuteResponse(exit_code=code, result="").to_dict()


@pytest.fixture
def service(monkeypatch):
    monkeypatch.setenv("DAYTONA_API_KEY", "secret")
    monkeypatch.setenv("DAYTONA_API_URL", API)
    d = Daytona()
    d.http.patch_urllib3(monkeypatch)
    d.http.patch_httpx(monkeypatch)
    return d


def _routed(service):
    """Requests to the sandbox API or the toolbox that no route answered (the SDK's background
    event connection is left to fail: the SDK then polls)."""
    return [c for c in service.http.unrouted if c.path.startswith(("/api/sandbox", "/toolbox"))]


@pytest.mark.slow
def test_probe_on_daytona_records_every_phase_and_leaves_no_sandbox(service, tmp_path):
    from simrollout.calibration.backends import get_backend
    from simrollout.calibration.probe import ProbePlan, probe

    be = get_backend("daytona")
    out = tmp_path / "daytona.jsonl"
    probe(be, ProbePlan(sandboxes=2, commands=3, levels=(1, 2), image="", mode="sequential"), out)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    bad = [(r["phase"], r["error"]) for r in recs if not r["ok"]]
    assert bad == [] and _routed(service) == []
    assert sum(r["phase"] == "create" for r in recs) == 4 and sum(r["phase"] == "exec" for r in recs) == 12
    assert recs[0]["backend_version"] == importlib.metadata.version("daytona")
    for req in service.requests:
        assert req.ttl_minutes == 60 and req.auto_delete_interval == 0  # server-side limits
        assert req.build_info is None  # never an image build inside "create"
        assert req.labels["simrollout.probe"] == recs[0]["run_id"]
    assert service.commands.count("true") >= 4  # each create waited for a first command
    assert service.boxes == {}  # teardown waited until each sandbox was destroyed


def test_a_failing_command_raises(service):
    from simrollout.calibration.backends import CommandFailed, get_backend

    be = get_backend("daytona")
    sb = be.create("my-snapshot", "run-x")
    assert service.requests[0].snapshot == "my-snapshot"
    with pytest.raises(CommandFailed, match="exit 2"):
        be.exec(sb, "exit 2")
    be.remove(sb)
    assert service.boxes == {}


@pytest.mark.slow
def test_sandboxes_of_a_killed_probe_are_cleaned_up(service):
    from simrollout.calibration.backends import get_backend
    from simrollout.calibration.cleanup import sweep_stale

    be = get_backend("daytona")
    dead, mine = be.create("", "run-killed"), be.create("", "run-alive")
    service.boxes[dead.id]["labels"]["simrollout.owner"] = f"{socket.gethostname()}:999999"
    found, stale = sweep_stale(be)
    assert {s.id for s in found} == {dead.id, mine.id}
    assert [(s.id, s.run) for s in stale] == [(dead.id, "run-killed")]
    assert set(service.boxes) == {mine.id}
    assert be.sweep("run-alive") == 1 and service.boxes == {}
