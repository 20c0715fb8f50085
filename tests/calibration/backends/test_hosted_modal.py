"""The Modal backend against the installed SDK: every call goes through the SDK's own client, its
gRPC stubs and grpclib over HTTP/2 to a local server built on the SDK's own generated service
base (modal_proto.api_grpc.ModalClientBase) answering with its own messages (api_pb2). A method
the SDK calls that the server does not answer fails the test (UNIMPLEMENTED)."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import socket
import threading

import pytest

_need = importlib.import_module if os.environ.get("CI") else pytest.importorskip
modal = _need("modal")
grpclib = _need("grpclib")


class Modal:
    """Apps, images and sandboxes as the service keeps them; exec answers exit status from the
    command (``exit N`` exits N)."""

    def __init__(self):
        from modal_proto import api_pb2, task_command_router_pb2

        self.pb, self.rpb = api_pb2, task_command_router_pb2
        self.port = 0
        self.sandboxes: dict[str, dict] = {}  # id -> {"tags": ..., "request": ..., "done": bool}
        self.execs: dict[str, tuple[str, int]] = {}  # exec id -> (command, exit code)
        self.unimplemented: list[str] = []
        self.images = 0

    # the methods the SDK needs; every other one answers UNIMPLEMENTED and is recorded
    @staticmethod
    def token() -> str:
        """A JWT as the SDK reads it (only its expiry)."""
        import base64
        import time

        def part(d):
            return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")

        return f"{part({'alg': 'none'})}.{part({'exp': time.time() + 3600})}.sig"

    async def AuthTokenGet(self, stream):
        await stream.recv_message()
        await stream.send_message(self.pb.AuthTokenGetResponse(token=self.token()))

    async def EnvironmentGetOrCreate(self, stream):
        await stream.recv_message()
        settings = self.pb.EnvironmentSettings(image_builder_version="2025.06")
        meta = self.pb.EnvironmentMetadata(name="main", settings=settings)
        await stream.send_message(
            self.pb.EnvironmentGetOrCreateResponse(environment_id="en-1", metadata=meta)
        )

    async def AppGetOrCreate(self, stream):
        await stream.recv_message()
        await stream.send_message(self.pb.AppGetOrCreateResponse(app_id="ap-1"))

    async def ImageGetOrCreate(self, stream):
        await stream.recv_message()
        self.images += 1
        result = self.pb.GenericResult(status=self.pb.GenericResult.GENERIC_STATUS_SUCCESS)
        await stream.send_message(self.pb.ImageGetOrCreateResponse(image_id="im-1", result=result))

    async def SandboxCreateV2(self, stream):
        req = await stream.recv_message()
        sid = (
            f"sb-v2x{len(self.sandboxes) + 1}"  # not the V1 id shape (22 characters): the SDK treats it as V2
        )
        self.sandboxes[sid] = {
            "request": req,
            "tags": {t.tag_name: t.tag_value for t in req.tags},
            "done": False,
        }
        access = self.pb.CommandRouterAccess(url=f"http://127.0.0.1:{self.port}", jwt=self.token())
        await stream.send_message(self.pb.SandboxCreateV2Response(
            sandbox_id=sid, task_id=f"ta-{sid}V", command_router_access=access))  # fmt: skip

    async def SandboxGetCommandRouterAccess(self, stream):
        await stream.recv_message()
        access = self.pb.SandboxGetCommandRouterAccessResponse(
            url=f"http://127.0.0.1:{self.port}", jwt=self.token()
        )
        await stream.send_message(access)

    # the task command router (the sandbox's worker), served here too
    async def TaskExecStart(self, stream):
        req = await stream.recv_message()
        command = list(req.command_args)[-1]
        self.execs[req.exec_id] = (command, int(command.split()[-1]) if command.startswith("exit ") else 0)
        await stream.send_message(self.rpb.TaskExecStartResponse())

    async def TaskExecWait(self, stream):
        req = await stream.recv_message()
        await stream.send_message(self.rpb.TaskExecWaitResponse(code=self.execs[req.exec_id][1]))

    TaskExecPoll = TaskExecWait

    async def TaskExecStdioRead(self, stream):
        await stream.recv_message()  # no output: the stream ends

    async def SandboxTagsSet(self, stream):
        req = await stream.recv_message()
        self.sandboxes[req.sandbox_id]["tags"] = {t.tag_name: t.tag_value for t in req.tags}
        await stream.send_message(self.pb.Empty())

    async def SandboxTagsGet(self, stream):
        req = await stream.recv_message()
        tags = [
            self.pb.SandboxTag(tag_name=k, tag_value=v)
            for k, v in self.sandboxes[req.sandbox_id]["tags"].items()
        ]
        await stream.send_message(self.pb.SandboxTagsGetResponse(tags=tags))

    async def SandboxGetTaskId(self, stream):
        req = await stream.recv_message()
        await stream.send_message(self.pb.SandboxGetTaskIdResponse(task_id=f"ta-{req.sandbox_id}"))

    async def SandboxTerminate(self, stream):
        req = await stream.recv_message()
        self.sandboxes[req.sandbox_id]["done"] = True
        await stream.send_message(self.pb.SandboxTerminateResponse())

    async def SandboxWait(self, stream):
        req = await stream.recv_message()
        done = self.sandboxes[req.sandbox_id]["done"]
        result = (
            self.pb.GenericResult(status=self.pb.GenericResult.GENERIC_STATUS_TERMINATED) if done else None
        )
        await stream.send_message(self.pb.SandboxWaitResponse(result=result))

    async def SandboxList(self, stream):
        req = await stream.recv_message()
        want = {t.tag_name: t.tag_value for t in req.tags}
        found = [self.pb.SandboxInfo(id=sid, created_at=1.0) for sid, s in self.sandboxes.items()
                 if not s["done"] and want.items() <= s["tags"].items() and not req.before_timestamp]  # fmt: skip
        await stream.send_message(self.pb.SandboxListResponse(sandboxes=found))

    # the SDK's V2 methods that take the same messages
    SandboxListV2, SandboxTagsGetV2, SandboxTagsSetV2 = SandboxList, SandboxTagsGet, SandboxTagsSet
    SandboxTerminateV2, SandboxWaitV2, SandboxGetTaskIdV2 = SandboxTerminate, SandboxWait, SandboxGetTaskId

    def servicers(self):
        from modal_proto import api_grpc, task_command_router_grpc

        return [
            self._servicer(api_grpc.ModalClientBase),
            self._servicer(task_command_router_grpc.TaskCommandRouterBase),
        ]

    def _servicer(self, base):
        def unimplemented(name):
            async def handler(_, stream):
                await stream.recv_message()
                self.unimplemented.append(name)
                raise grpclib.exceptions.GRPCError(grpclib.const.Status.UNIMPLEMENTED, name)

            return handler

        methods = {n: unimplemented(n) for n in base.__abstractmethods__}
        methods.update({n: (lambda f: lambda _, stream: f(stream))(getattr(self, n))
                        for n in methods if hasattr(self, n)})  # fmt: skip
        return type("Servicer", (base,), methods)()


@pytest.fixture
def service(monkeypatch):
    from grpclib.server import Server

    s = Modal()
    loop = asyncio.new_event_loop()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    s.port = port
    started = threading.Event()

    def serve():
        asyncio.set_event_loop(loop)
        server = Server(s.servicers())
        loop.run_until_complete(server.start("127.0.0.1", port))
        started.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    assert started.wait(10)
    monkeypatch.setenv("MODAL_SERVER_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    monkeypatch.setattr(modal.client._Client, "_client_from_env", None)  # connect to this server
    yield s
    loop.call_soon_threadsafe(loop.stop)


def test_probe_on_modal_records_every_phase_and_leaves_no_sandbox(service, tmp_path):
    from simrollout.calibration.backends import get_backend
    from simrollout.calibration.probe import ProbePlan, probe

    be = get_backend("modal")
    out = tmp_path / "modal.jsonl"
    probe(be, ProbePlan(sandboxes=2, commands=3, levels=(1, 2), image="busybox:1.36"), out)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    bad = [(r["phase"], r["error"]) for r in recs if not r["ok"]]
    assert service.unimplemented == []
    assert bad == []
    assert sum(r["phase"] == "create" for r in recs) == 4 and sum(r["phase"] == "exec" for r in recs) == 12
    assert recs[0]["backend_version"] == importlib.metadata.version("modal")
    assert service.images == 1  # resolved once, before any create was timed
    for s in service.sandboxes.values():
        assert s["request"].definition.timeout_secs == 3600  # the server-side limit
        assert s["tags"]["simrollout.probe"] == recs[0]["run_id"]
        assert s["done"]  # terminated, and waited for
    assert [c for c, _ in service.execs.values()].count("true") == 4 + 12  # a first command per create


def test_a_failing_command_raises_with_its_exit_code(service):
    from simrollout.calibration.backends import CommandFailed, get_backend

    be = get_backend("modal")
    sb = be.create("busybox:1.36", "run-x")
    with pytest.raises(CommandFailed, match="exit 5"):
        be.exec(sb, "exit 5")
    be.remove(sb)
    assert all(s["done"] for s in service.sandboxes.values())


def test_sandboxes_of_a_killed_probe_are_cleaned_up(service):
    from simrollout.calibration.backends import get_backend
    from simrollout.calibration.cleanup import sweep_stale

    be = get_backend("modal")
    dead, mine = be.create("busybox:1.36", "run-killed"), be.create("busybox:1.36", "run-alive")
    service.sandboxes[dead.object_id]["tags"]["simrollout.owner"] = f"{socket.gethostname()}:999999"
    found, stale = sweep_stale(be)
    assert {s.id for s in found} == {dead.object_id, mine.object_id}
    assert [(s.id, s.run) for s in stale] == [(dead.object_id, "run-killed")]
    assert not service.sandboxes[mine.object_id]["done"] and service.sandboxes[dead.object_id]["done"]
    assert be.sweep("run-alive") == 1 and service.sandboxes[mine.object_id]["done"]
