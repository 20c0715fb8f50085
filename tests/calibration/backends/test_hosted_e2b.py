"""The E2B backend against the installed SDK: every call goes through the SDK's own methods, its
generated API client and its Connect RPC client (envd's process service) down to their shared
HTTP transport; the service's answers are the SDK's own models (api.client.models, the envd
process protobuf messages in its JSON codec, Connect's stream envelopes)."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import socket
import struct

import pytest

from .http_layer import HTTPService

_need = importlib.import_module if os.environ.get("CI") else pytest.importorskip
e2b = _need("e2b")

ENVD_VERSION = "0.4.0"


def _envelope(flags: int, data: bytes) -> bytes:
    return struct.pack(">BI", flags, len(data)) + data


class E2B:
    """Sandboxes as the service keeps them; a killed one reads 'not found'."""

    def __init__(self):
        from e2b.api.client import models

        self.m = models
        self.boxes: dict[str, dict] = {}
        self.requests: list = []
        self.commands: list[str] = []
        self.files: dict[tuple[str, str], bytes] = {}
        self.http = h = HTTPService()
        h.route("POST", "/v2/sandboxes", self.create)
        h.route("GET", "/v2/sandboxes", self.list)
        h.route("GET", "/sandboxes/([^/]+)", self.read)
        h.route("DELETE", "/sandboxes/([^/]+)", self.kill)
        h.route("POST", "/process.Process/Start", self.start)
        h.route("POST", "/files", self.write)
        h.route("GET", "/files", self.read_file)

    def create(self, call):
        req = self.m.NewSandboxV2.from_dict(call.body)  # the request parses as the SDK's own model
        self.requests.append(req)
        sid = f"sb{len(self.requests)}"
        now = dt.datetime.now(dt.timezone.utc)
        self.boxes[sid] = self.m.ListedSandbox(
            template_id=req.template_id, sandbox_id=sid, client_id="c", started_at=now,
            end_at=now + dt.timedelta(seconds=req.timeout), cpu_count=2, memory_mb=512,
            disk_size_mb=1024, state=self.m.SandboxState.RUNNING, envd_version=ENVD_VERSION,
            metadata=req.metadata,
        ).to_dict()  # fmt: skip
        made = self.m.Sandbox(template_id=req.template_id, sandbox_id=sid, client_id="c",
                              envd_version=ENVD_VERSION, domain="e2b.test")  # fmt: skip
        return 201, made.to_dict()

    def list(self, call):
        want = dict(kv.split("=", 1) for kv in call.query.get("metadata", [""])[0].split("&") if kv)
        items = [b for b in self.boxes.values() if want.items() <= b["metadata"].items()]
        return 200, [self.m.ListedSandbox.from_dict(b).to_dict() for b in items]

    def read(self, call, sid):
        if sid not in self.boxes:
            return 404, self.m.Error(code=404, message=f"sandbox {sid} not found").to_dict()
        b = self.boxes[sid]
        d = self.m.SandboxDetail(
            template_id=b["templateID"], sandbox_id=sid, client_id="c",
            started_at=dt.datetime.fromisoformat(b["startedAt"]), end_at=dt.datetime.fromisoformat(b["endAt"]),
            envd_version=ENVD_VERSION, cpu_count=2, memory_mb=512, disk_size_mb=1024,
            state=self.m.SandboxState.RUNNING, metadata=b["metadata"],
        )  # fmt: skip
        return 200, d.to_dict()

    def kill(self, call, sid):
        if self.boxes.pop(sid, None) is None:
            return 404, self.m.Error(code=404, message=f"sandbox {sid} not found").to_dict()
        return 204, b""

    def start(self, call):
        from e2b.envd.process import process_pb

        _, n = struct.unpack(">BI", call.body[:5])
        req = process_pb.StartRequest.from_json(call.body[5 : 5 + n].decode())
        command = req.process.args[-1]
        self.commands.append(command)
        code = int(command.split()[-1]) if command.startswith("exit ") else 0
        events = [{"start": {"pid": 7}}, {"end": {"exitCode": code, "exited": True,
                                                  "status": f"exit status {code}"}}]  # fmt: skip
        body = b"".join(
            _envelope(0, process_pb.StartResponse.from_json(json.dumps({"event": e})).to_json().encode())
            for e in events
        )
        return 200, body + _envelope(2, b"{}"), {"Content-Type": "application/connect+json"}

    def _sandbox(self, call) -> str:
        return call.headers["e2b-sandbox-id"]

    def write(self, call):
        form = call.form()
        ((name, data),) = form.items()
        self.files[self._sandbox(call), call.query["path"][0]] = data
        return 200, [{"name": name, "path": call.query["path"][0], "type": "file"}]

    def read_file(self, call):
        return (
            200,
            self.files[self._sandbox(call), call.query["path"][0]],
            {"Content-Type": "application/octet-stream"},
        )


@pytest.fixture
def service(monkeypatch):
    import e2b.api.client_sync as api_sync
    import e2b.envd.client_sync as envd_sync

    monkeypatch.setenv("E2B_API_KEY", "e2b_" + "0" * 40)
    s = E2B()
    for module in (api_sync, envd_sync):
        monkeypatch.setattr(module, "get_pyqwest_transport", lambda *a, **k: s.http, raising=False)
    for cache in ("_pools", "_transports", "_httpx_transports"):  # transports the SDK keeps per process
        monkeypatch.setattr(api_sync, cache, {})
    return s


def test_probe_on_e2b_records_every_phase_and_leaves_no_sandbox(service, tmp_path):
    from simrollout.calibration.backends import get_backend
    from simrollout.calibration.probe import ProbePlan, probe

    be = get_backend("e2b")
    out = tmp_path / "e2b.jsonl"
    probe(be, ProbePlan(sandboxes=2, commands=3, levels=(1, 2), image=""), out)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    bad = [(r["phase"], r["error"]) for r in recs if not r["ok"]]
    assert bad == [] and service.http.unrouted == []
    assert sum(r["phase"] == "create" for r in recs) == 4 and sum(r["phase"] == "exec" for r in recs) == 12
    assert sum(r["phase"] == "download" for r in recs) == 2  # and each returned what was uploaded
    assert recs[0]["backend_version"] == importlib.metadata.version("e2b")
    for req in service.requests:
        assert req.timeout == 3600  # the server-side limit: E2B kills it then
        assert req.metadata["simrollout.probe"] == recs[0]["run_id"]
    assert service.commands.count("true") >= 4  # each create waited for a first command
    assert service.boxes == {}


def test_a_failing_command_raises_with_its_exit_code(service):
    from simrollout.calibration.backends import CommandFailed, get_backend

    be = get_backend("e2b")
    sb = be.create("my-template", "run-x")
    assert service.requests[0].template_id == "my-template"
    with pytest.raises(CommandFailed, match="exit 4"):
        be.exec(sb, "exit 4")
    be.remove(sb)
    assert service.boxes == {}


def test_sandboxes_of_a_killed_probe_are_cleaned_up(service):
    from simrollout.calibration.backends import get_backend
    from simrollout.calibration.cleanup import sweep_stale

    be = get_backend("e2b")
    dead, mine = be.create("", "run-killed"), be.create("", "run-alive")
    service.boxes[dead.sandbox_id]["metadata"]["simrollout.owner"] = f"{socket.gethostname()}:999999"
    found, stale = sweep_stale(be)
    assert {s.id for s in found} == {dead.sandbox_id, mine.sandbox_id}
    assert [(s.id, s.run) for s in stale] == [(dead.sandbox_id, "run-killed")]
    assert set(service.boxes) == {mine.sandbox_id}
    assert be.sweep("run-alive") == 1 and service.boxes == {}
