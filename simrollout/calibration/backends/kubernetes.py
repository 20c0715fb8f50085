"""Kubernetes pods through the official client: create -> Running -> exec -> delete."""

from __future__ import annotations

import time
import uuid

from . import BackendUnavailable, CommandFailed, require

LABEL = "simrollout-probe"


class KubernetesBackend:
    name = "kubernetes"
    supports_files = False

    def __init__(self, namespace: str = "default", ready_timeout: float = 300.0):
        k8s = require("kubernetes", "kubernetes", "kubernetes")
        try:
            k8s.config.load_kube_config()
        except Exception:
            try:
                k8s.config.load_incluster_config()
            except Exception:
                raise BackendUnavailable(
                    "the kubernetes backend found no cluster: set KUBECONFIG or run inside a pod."
                ) from None
        self.k8s, self.ns, self.timeout = k8s, namespace, ready_timeout
        self.api = k8s.client.CoreV1Api()

    def info(self):
        v = self.k8s.client.VersionApi().get_code()
        return {"backend_version": self.k8s.__version__, "engine_version": v.git_version}

    def create(self, image, label):
        name = f"simrollout-{uuid.uuid4().hex[:10]}"
        c = self.k8s.client
        pod = c.V1Pod(
            metadata=c.V1ObjectMeta(name=name, labels={LABEL: label}),
            spec=c.V1PodSpec(
                restart_policy="Never",
                containers=[c.V1Container(name="sandbox", image=image, command=["sleep", "86400"])],
            ),
        )
        self.api.create_namespaced_pod(self.ns, pod)
        deadline = time.monotonic() + self.timeout
        while self.api.read_namespaced_pod(name, self.ns).status.phase != "Running":
            if time.monotonic() > deadline:
                self.remove(name)
                raise TimeoutError(f"pod {name} not Running after {self.timeout} s")
            time.sleep(0.05)
        self.exec(name, "true")
        return name

    def exec(self, sandbox, command):
        from kubernetes.stream import stream

        resp = stream(
            self.api.connect_get_namespaced_pod_exec,
            sandbox,
            self.ns,
            command=["sh", "-c", command],
            stderr=True,
            stdout=True,
            _preload_content=False,
        )
        resp.run_forever()
        if resp.returncode != 0:
            raise CommandFailed(f"exit {resp.returncode}")

    def upload(self, sandbox, path, data):
        raise NotImplementedError

    def download(self, sandbox, path):
        raise NotImplementedError

    def remove(self, sandbox):
        self.api.delete_namespaced_pod(sandbox, self.ns, grace_period_seconds=0)

    def sweep(self, label):
        pods = self.api.list_namespaced_pod(self.ns, label_selector=f"{LABEL}={label}").items
        for p in pods:
            self.remove(p.metadata.name)
        return len(pods)
