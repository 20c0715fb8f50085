"""Kubernetes pods through the official client.

create: pod submitted -> Running -> a first ``true`` answers; exec: a no-op's round trip through
the exec websocket; teardown: delete, then poll until the pod is gone (its slot free). Every pod
carries the run's label, its creation time and owner (annotations), and
``activeDeadlineSeconds`` = :data:`~simrollout.calibration.cleanup.TTL`, so the cluster kills a
pod whose probe died.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

from ..cleanup import TTL, Owned, owner
from . import BackendUnavailable, CommandFailed, answered, require

LABEL = "simrollout-probe"
CREATED, OWNER = "simrollout/created", "simrollout/owner"
DEFAULT_IMAGE = "busybox:1.36"  # on Docker Hub, which clusters pull from by default
POLL = 0.05


class KubernetesBackend:
    name = "kubernetes"
    supports_files = False
    default_image = DEFAULT_IMAGE

    def __init__(self, namespace: str = "default", ready_timeout: float = 300.0):
        k8s = require("kubernetes", "kubernetes", "kubernetes")
        try:
            k8s.config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
        except Exception as exc:
            try:
                k8s.config.load_incluster_config()
            except Exception:
                raise BackendUnavailable(
                    f"the kubernetes backend found no cluster ({exc}): set KUBECONFIG to a kubeconfig "
                    "file or run inside a pod."
                ) from None
        self.k8s, self.ns, self.timeout = k8s, namespace, ready_timeout
        self.api = k8s.client.CoreV1Api()
        self._local = threading.local()

    def info(self):
        v = self.k8s.client.VersionApi().get_code()
        return {"backend_version": self.k8s.__version__, "engine_version": v.git_version}

    def create(self, image, label):
        name = f"simrollout-{uuid.uuid4().hex[:10]}"
        c = self.k8s.client
        pod = c.V1Pod(
            metadata=c.V1ObjectMeta(
                name=name,
                labels={LABEL: label},
                annotations={CREATED: f"{time.time():.3f}", OWNER: owner()},
            ),
            spec=c.V1PodSpec(
                restart_policy="Never",
                active_deadline_seconds=int(TTL),
                termination_grace_period_seconds=0,
                containers=[c.V1Container(name="sandbox", image=image, command=["sleep", str(int(TTL))])],
            ),
        )
        self.api.create_namespaced_pod(self.ns, pod)
        try:
            self._until_running(name)
        except BaseException:
            self.remove(name)
            raise
        return answered(self, name)

    def _until_running(self, name: str) -> None:
        deadline = time.monotonic() + self.timeout
        while (phase := self.api.read_namespaced_pod(name, self.ns).status.phase) != "Running":
            if phase in ("Failed", "Succeeded"):
                raise RuntimeError(f"pod {name} ended ({phase}) before it ran a command")
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {name} not Running after {self.timeout} s")
            time.sleep(POLL)

    def _exec_api(self):
        """This thread's own client for exec: ``stream`` swaps its client's request method while it
        runs, which would send other threads' calls on a shared client through the websocket."""
        if not hasattr(self._local, "api"):
            self._local.api = self.k8s.client.CoreV1Api(self.k8s.client.ApiClient())
        return self._local.api

    def exec(self, sandbox, command):
        from kubernetes.stream import stream

        resp = stream(
            self._exec_api().connect_get_namespaced_pod_exec,
            sandbox,
            self.ns,
            command=["sh", "-c", command],
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
            _preload_content=False,
        )
        resp.run_forever(timeout=self.timeout)
        if resp.returncode != 0:
            raise CommandFailed(f"exit {resp.returncode}")

    def upload(self, sandbox, path, data):
        raise NotImplementedError

    def download(self, sandbox, path):
        raise NotImplementedError

    def remove(self, sandbox):
        """Delete the pod and wait until the API no longer has it."""
        ApiException = self.k8s.client.exceptions.ApiException
        try:
            self.api.delete_namespaced_pod(sandbox, self.ns, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                self.api.read_namespaced_pod(sandbox, self.ns)
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(POLL)
        raise TimeoutError(f"pod {sandbox} still present {self.timeout} s after its deletion")

    def owned(self) -> list[Owned]:
        """Every pod of the namespace carrying the project's label, from any run."""
        out = []
        for p in self.api.list_namespaced_pod(self.ns, label_selector=LABEL).items:
            notes = p.metadata.annotations or {}
            created = notes.get(CREATED) or p.metadata.creation_timestamp.timestamp()
            run = (p.metadata.labels or {}).get(LABEL, "")
            out.append(Owned(p.metadata.name, run, float(created), notes.get(OWNER, "")))
        return out

    def remove_owned(self, s: Owned) -> None:
        self.remove(s.id)

    def sweep(self, label):
        pods = self.api.list_namespaced_pod(self.ns, label_selector=f"{LABEL}={label}").items
        for p in pods:
            self.remove(p.metadata.name)
        return len(pods)
