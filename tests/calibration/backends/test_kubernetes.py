"""The Kubernetes backend against the installed official client: every call goes through the
client's own API methods, argument checks, URL building and (de)serialisation; the cluster's
answers are the client's own models (V1Pod, V1PodList, V1Status), and exec goes through its
websocket client (channels, the error channel's exit status)."""

from __future__ import annotations

import importlib
import json
import os
import select
import socket
import types

import pytest

from .http_layer import HTTPService

_need = importlib.import_module if os.environ.get("CI") else pytest.importorskip
k8s = _need("kubernetes")

NS = "/api/v1/namespaces/default/pods"


class Cluster:
    """Pods as the API server keeps them: Pending on the first read, then Running; a deleted pod
    is still listed for one read (terminating), then gone."""

    def __init__(self):
        self.api = k8s.client.ApiClient()
        self.pods: dict[str, dict] = {}
        self.reads: dict[str, int] = {}
        self.deleted: dict[str, int] = {}
        self.http = HTTPService()
        self.http.route("POST", NS, self.create)
        self.http.route("GET", NS, self.list)
        self.http.route("GET", NS + "/([^/]+)", self.read)
        self.http.route("DELETE", NS + "/([^/]+)", self.delete)
        self.http.route("GET", "/version/?", self.version)
        self.execs: list[list[str]] = []

    def model(self, data: dict, kind: str):
        return self.api.deserialize(types.SimpleNamespace(data=json.dumps(data)), kind)

    def dump(self, obj) -> dict:
        return self.api.sanitize_for_serialization(obj)

    def create(self, call):
        pod = self.model(call.body, "V1Pod")  # the request parses as the client's own model
        pod.metadata.creation_timestamp = __import__("datetime").datetime.now(
            __import__("datetime").timezone.utc
        )
        pod.status = k8s.client.V1PodStatus(phase="Pending")
        self.pods[pod.metadata.name] = self.dump(pod)
        return 201, self.pods[pod.metadata.name]

    def read(self, call, name):
        if name not in self.pods:
            return 404, self.dump(k8s.client.V1Status(status="Failure", reason="NotFound", code=404))
        if name in self.deleted:
            self.deleted[name] -= 1
            if self.deleted[name] < 0:
                del self.pods[name]
                return self.read(call, name)
        self.reads[name] = self.reads.get(name, 0) + 1
        if self.reads[name] > 1:
            self.pods[name]["status"]["phase"] = "Running"
        return 200, self.pods[name]

    def delete(self, call, name):
        if name not in self.pods:
            return 404, self.dump(k8s.client.V1Status(status="Failure", reason="NotFound", code=404))
        self.deleted[name] = 1
        return 200, self.pods[name]

    def list(self, call):
        selector = call.query.get("labelSelector", [""])[0]
        key, _, value = selector.partition("=")
        items = [p for n, p in self.pods.items() if n not in self.deleted or self.deleted[n] >= 0]
        items = [p for p in items if key in p["metadata"].get("labels", {})
                 and (not value or p["metadata"]["labels"][key] == value)]  # fmt: skip
        return 200, self.dump(self.model({"items": items, "metadata": {}}, "V1PodList"))

    def version(self, call):
        return 200, self.dump(k8s.client.VersionInfo(
            git_version="v1.31.0", build_date="", compiler="", git_commit="", git_tree_state="",
            go_version="", major="1", minor="31", platform="linux/amd64"))  # fmt: skip

    def websocket(self, configuration, url, headers=None):
        from urllib.parse import parse_qs, urlsplit

        parts = urlsplit(url)
        assert parts.path.startswith(NS + "/") and parts.path.endswith("/exec"), parts.path
        command = parse_qs(parts.query)["command"]
        self.execs.append(command)
        code = int(command[-1].split()[-1]) if command[-1].startswith("exit ") else 0
        if code == 0:
            status = k8s.client.V1Status(status="Success", metadata=k8s.client.V1ListMeta())
        else:
            cause = k8s.client.V1StatusCause(reason="ExitCode", message=str(code))
            status = k8s.client.V1Status(
                status="Failure", reason="NonZeroExitCode", details=k8s.client.V1StatusDetails(causes=[cause])
            )
        return _Socket([b"\x01", b"\x03" + json.dumps(self.dump(status)).encode()])


class _Socket:
    """The websocket the client reads its exec frames from (channel byte + payload)."""

    subprotocol = "v4.channel.k8s.io"

    def __init__(self, frames):
        self.frames = list(frames)
        self.sock, self._peer = socket.socketpair()
        self._peer.send(b"x")  # always readable: the client polls before each frame
        self.connected = True

    def recv_data_frame(self, control_frame=True):
        from websocket import ABNF

        if not self.frames:
            return ABNF.OPCODE_CLOSE, types.SimpleNamespace(data=b"")
        return ABNF.OPCODE_BINARY, types.SimpleNamespace(data=self.frames.pop(0))

    def getheaders(self):
        return {}

    def close(self, **kw):
        self.connected = False
        self.sock.close()
        self._peer.close()


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": "https://k8s.test:6443", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "t", "user": {"token": "secret"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }))  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(cfg))
    c = Cluster()
    c.http.patch_urllib3(monkeypatch)
    monkeypatch.setattr("kubernetes.stream.ws_client.create_websocket", c.websocket)
    monkeypatch.setattr("simrollout.calibration.backends.kubernetes.POLL", 0.0)
    assert select  # the client polls the socket with select.poll
    return c


def test_probe_on_kubernetes_records_every_phase_and_leaves_no_pod(cluster, tmp_path):
    from simrollout.calibration.backends import get_backend
    from simrollout.calibration.probe import ProbePlan, probe

    be = get_backend("kubernetes")
    out = tmp_path / "k8s.jsonl"
    probe(be, ProbePlan(sandboxes=2, commands=3, levels=(1, 2), image="busybox:1.36"), out)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["ok"] for r in recs), [(r["phase"], r["error"]) for r in recs if not r["ok"]][:2]
    assert sum(r["phase"] == "create" for r in recs) == 4 and sum(r["phase"] == "exec" for r in recs) == 12
    assert recs[0]["engine_version"] == "v1.31.0" and recs[0]["backend_version"] == k8s.__version__
    assert cluster.http.unrouted == []
    created = cluster.http.made("POST", NS)
    assert len(created) == 4
    for call in created:
        pod = call.body
        assert pod["spec"]["activeDeadlineSeconds"] == 3600  # the server-side limit
        assert pod["spec"]["containers"][0]["image"] == "busybox:1.36"
        assert set(pod["metadata"]["annotations"]) == {"simrollout/created", "simrollout/owner"}
        assert pod["metadata"]["labels"]["simrollout-probe"] == recs[0]["run_id"]
    # create waited for Running and a first command; teardown waited until the pod was gone
    assert cluster.execs[0] == ["sh", "-c", "true"] and len(cluster.execs) == 4 + 12
    assert cluster.pods == {}


def test_a_failing_command_raises_with_its_exit_code(cluster):
    from simrollout.calibration.backends import CommandFailed, get_backend

    be = get_backend("kubernetes")
    pod = be.create("busybox:1.36", "run-x")
    with pytest.raises(CommandFailed, match="exit 3"):
        be.exec(pod, "exit 3")
    be.remove(pod)
    assert cluster.pods == {}


def test_pods_of_a_killed_probe_are_cleaned_up(cluster):
    from simrollout.calibration.backends import get_backend
    from simrollout.calibration.cleanup import sweep_stale

    be = get_backend("kubernetes")
    dead, mine = be.create("busybox:1.36", "run-killed"), be.create("busybox:1.36", "run-alive")
    cluster.pods[dead]["metadata"]["annotations"]["simrollout/owner"] = f"{socket.gethostname()}:999999"
    found, stale = sweep_stale(be)
    assert {s.id for s in found} == {dead, mine}
    assert [(s.id, s.run) for s in stale] == [(dead, "run-killed")]
    assert set(cluster.pods) == {mine}
    be.remove(mine)
    assert cluster.pods == {}
