"""Fixtures of the ``cluster`` tests: one real control plane per session, a fresh namespace per test.

``control_plane`` (session): etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK from
:mod:`tests.realcluster.controlplane`, :data:`NODES` fake nodes (KWOK keeps them Ready) and the fake kubelet
(:mod:`tests.realcluster.fake_kubelet`) playing their pods.

``kube`` (per test): a :class:`RealCluster` handle on a new namespace holding ``manifests/rbac.yaml`` (the
launcher runs with the ``tfk8s-launcher`` ServiceAccount's token, so the real RBAC authorizer judges every
request). After the test it lists, through the API, the Jobs, pods and Services of every job the test
launched and fails unless there are none; then it deletes the namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realcluster.controlplane import (
    REPO,
    SKIP_REASON,
    ControlPlane,
    binaries_dir,
    free_port,
    running_control_plane,
)
from tests.realcluster.fake_kubelet import FakeKubelet

NODES = 4
NODE_CPU = "4"
NODE_MEMORY = "16Gi"
LAUNCHER_SA = "tfk8s-launcher"
POLL_S = 0.2


def node_name(i: int) -> str:
    """The name (and ``kubernetes.io/hostname``) of fake node ``i``."""
    return f"tfk8s-node-{i}"


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory) -> Iterator[tuple[ControlPlane, FakeKubelet]]:
    """The session's control plane and fake kubelet, with :data:`NODES` Ready fake nodes."""
    from kubernetes import client

    bin_dir = binaries_dir()
    if bin_dir is None:
        pytest.skip(SKIP_REASON)
    work = Path(os.environ.get("TFK8S_CONTROLPLANE_WORK") or tmp_path_factory.mktemp("controlplane"))
    port = free_port()
    t0 = time.monotonic()
    with running_control_plane(work, port, bin_dir) as cp:
        kubelet = FakeKubelet(cp.admin_client, cp.pki.path("kubelet.crt"), cp.pki.path("kubelet.key"), port)
        kubelet.start()
        try:
            with cp.admin_client() as api:
                core = client.CoreV1Api(api)
                for i in range(NODES):
                    add_node(core, node_name(i), NODE_CPU, NODE_MEMORY)
                wait(lambda: all(_ready(n) for n in core.list_node().items), f"{NODES} Ready nodes", 60)
            print(f"\ncontrol plane up in {time.monotonic() - t0:.1f}s ({cp.timings}); logs in {work}")
            yield cp, kubelet
        finally:
            kubelet.stop()


def add_node(core: Any, name: str, cpu: str, memory: str, labels: dict[str, str] | None = None) -> None:
    """Create fake node ``name`` (KWOK manages it) with ``cpu`` / ``memory`` allocatable."""
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                 "type": "kwok", **(labels or {})},
        "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}}})
    # The API server's admission taints a new node not-ready; the node lifecycle controller would lift it
    # once the node is Ready. That controller is not run (it would also judge KWOK's heartbeats): lift it here.
    core.patch_node(name, {"spec": {"taints": None}})
    # KWOK initialises a new node's status with its own (large) capacity when it takes the node over: set ours
    # only after that, and wait until it reads back twice, else the scheduler may place pods on a node's
    # default capacity (seen: two 3-CPU pods bound to one "4-CPU" node when the gang test ran first).
    wait(lambda: _ready(core.read_node(name)), f"node {name} Ready", 60)
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}

    def settled() -> bool:
        core.patch_node_status(name, {"status": {"capacity": resources, "allocatable": resources}})
        time.sleep(0.5)
        alloc = core.read_node(name).status.allocatable or {}
        return alloc.get("cpu") == cpu and alloc.get("memory") == memory

    wait(settled, f"node {name} with {cpu} CPU / {memory} allocatable", 60)


def _ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def wait(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``predicate`` every 0.2 s until it is truthy (returned) or ``timeout`` s pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - an API hiccup: try again
            last = e
        time.sleep(POLL_S)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last error: {last!r})"
                                                                                 if last else ""))


class ScriptError(AssertionError):
    """The cluster script of a test failed."""


class RealCluster:
    """A test's handle on its namespace of the real control plane: inspect, play the kubelet, launch.

    Replicas are addressed by label (``"worker-1"``) within the job ``job_name``; a pod helper acts on the
    replica's newest pod (or the pod of ``attempt``).
    """

    def __init__(self, cp: ControlPlane, kubelet: FakeKubelet, namespace: str):
        from kubernetes import client

        self.cp, self.kubelet, self.namespace = cp, kubelet, namespace
        self.admin = cp.admin_client()
        self.core, self.batch = client.CoreV1Api(self.admin), client.BatchV1Api(self.admin)
        self.custom = client.CustomObjectsApi(self.admin)
        self.rbac = client.RbacAuthorizationV1Api(self.admin)
        self.output: list[str] = []
        self.jobs: set[str] = set()
        self.job_name = ""
        self._clients: list[Any] = [self.admin]

    # -- set-up ------------------------------------------------------------------------------------------------------
    def create_namespace(self) -> None:
        """Create the namespace and apply ``manifests/rbac.yaml`` in it."""
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        self.apply_rbac()
        wait(lambda: self.core.read_namespaced_service_account("default", self.namespace), "the default SA")

    def rbac_documents(self) -> list[dict[str, Any]]:
        """The documents of ``manifests/rbac.yaml``."""
        return [d for d in yaml.safe_load_all((REPO / "manifests" / "rbac.yaml").read_text()) if d]

    def apply_rbac(self, role: dict[str, Any] | None = None) -> None:
        """Create the ServiceAccount, Role (or ``role`` instead) and RoleBinding of ``manifests/rbac.yaml``."""
        from kubernetes import client, utils

        for doc in self.rbac_documents():
            if doc["kind"] == "Role" and role is not None:
                doc = role
            utils.create_from_dict(self.admin, doc, namespace=self.namespace)
        del client

    def token(self, service_account: str = LAUNCHER_SA) -> str:
        """A bound token of ``service_account`` (TokenRequest), valid for an hour."""
        resp = self.core.create_namespaced_service_account_token(
            service_account, self.namespace, {"spec": {"expirationSeconds": 3600}})
        return resp.status.token

    def launcher_client(self) -> Any:
        """An ApiClient authenticated as the ``tfk8s-launcher`` ServiceAccount (the Role's rights only)."""
        api = self.cp.token_client(self.token())
        self._clients.append(api)
        return api

    # -- the launcher's side --------------------------------------------------------------------------------------
    def _print(self, line: str) -> None:
        self.output.append(line)

    def launch(self, job: Any, settings: Any, script: Callable[[RealCluster], None] | None = None) -> Any:
        """Run the launcher (in this thread, as the tfk8s-launcher ServiceAccount) while ``script(self)`` plays
        the cluster's kubelet in another thread. A failing script sends SIGTERM to stop the launcher, and its
        error is raised; otherwise the launcher's result is returned or its exception raised."""
        from tfk8s.launcher.kubernetes import run_kubernetes

        self.jobs.add(job.name)
        self.job_name = job.name
        errors: list[BaseException] = []
        launcher_running = threading.Event()
        launcher_running.set()

        def play() -> None:
            try:
                if script is not None:
                    script(self)
            except BaseException as e:  # noqa: BLE001 - reported to the test below
                errors.append(e)
                if launcher_running.is_set():  # stop it (its SIGTERM handler); never pytest itself
                    os.kill(os.getpid(), signal.SIGTERM)

        thread = threading.Thread(target=play, name="cluster-script", daemon=True)
        thread.start()
        try:
            return run_kubernetes(job, settings, api_client=self.launcher_client(), log_sink=self._print)
        finally:
            launcher_running.clear()
            thread.join(30)
            if errors:
                raise ScriptError(f"the cluster script failed: {errors[0]!r}\n" + "\n".join(self.output[-40:])) \
                    from errors[0]

    # -- inspection ---------------------------------------------------------------------------------------------------
    def selector(self, job_name: str = "") -> str:
        return f"tfk8s.dev/job-name={job_name or self.job_name}"

    def pods(self, selector: str = "") -> list[dict[str, Any]]:
        """The pods of the job (or matching ``selector``), as the API server's JSON (every field, also those the
        ``kubernetes`` client's models do not know, e.g. ``spec.schedulingGroup``)."""
        resp = self.core.list_namespaced_pod(self.namespace, label_selector=selector or self.selector(),
                                             _preload_content=False)
        return json.loads(resp.data)["items"]

    def remaining(self, job_name: str = "") -> dict[str, list[str]]:
        """Names of the Jobs, pods and Services of the job still present, listed through the API (``{}``)."""
        sel = self.selector(job_name)
        found = {
            "jobs": [j.metadata.name for j in self.batch.list_namespaced_job(self.namespace, label_selector=sel).items],
            "pods": [p.metadata.name for p in self.core.list_namespaced_pod(self.namespace, label_selector=sel).items],
            "services": [s.metadata.name for s in
                         self.core.list_namespaced_service(self.namespace, label_selector=sel).items],
        }
        return {k: sorted(v) for k, v in found.items() if v}

    def replica_pod(self, label: str, attempt: int | None = None) -> dict[str, Any] | None:
        """The newest pod of replica ``label`` (of ``attempt`` if given), not being deleted; None if none."""
        rtype, index = label.rsplit("-", 1)
        sel = f"{self.selector()},tfk8s.dev/replica-type={rtype},tfk8s.dev/replica-index={index}"
        if attempt is not None:
            sel += f",tfk8s.dev/attempt={attempt}"
        found = [p for p in self.pods(sel) if not p["metadata"].get("deletionTimestamp")]
        return max(found, key=lambda p: int(p["metadata"]["labels"]["tfk8s.dev/attempt"])) if found else None

    @staticmethod
    def running(pod: dict[str, Any] | None) -> bool:
        return bool(pod) and (pod.get("status") or {}).get("phase") == "Running"

    def wait_for(self, predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        """Poll ``predicate`` until truthy (returned); AssertionError with the launcher's output after
        ``timeout`` seconds."""
        try:
            return wait(predicate, what, timeout)
        except AssertionError as e:
            raise AssertionError(f"{e}; launcher output:\n" + "\n".join(self.output[-30:])) from None

    def wait_pods(self, *labels: str, attempt: int = 0, running: bool = True,
                  timeout: float = 30.0) -> dict[str, dict[str, Any]]:
        """Wait until every replica in ``labels`` has a pod of ``attempt`` (Running, unless ``running`` is
        False); return them by label."""
        def all_there() -> dict[str, dict[str, Any]] | None:
            pods = {label: self.replica_pod(label, attempt) for label in labels}
            ok = all(pods.values()) and (not running or all(self.running(p) for p in pods.values()))
            return pods if ok else None

        return self.wait_for(all_there, f"{'running ' if running else ''}pods of {labels} (attempt {attempt})",
                             timeout)

    # -- the kubelet ------------------------------------------------------------------------------------------------
    def _pod(self, label: str) -> dict[str, Any]:
        pod = self.replica_pod(label)
        assert pod is not None, f"no pod for {label}"
        return pod

    def log(self, label: str, *lines: str) -> None:
        """Replica ``label``'s program prints ``lines``."""
        self.kubelet.log(self.namespace, self._pod(label)["metadata"]["name"], *lines)

    def succeed(self, label: str) -> None:
        """Replica ``label``'s container exits 0."""
        self.kubelet.terminate(self._pod(label), 0)

    def fail(self, label: str, exit_code: int = 1, reason: str = "", message: str = "") -> None:
        """Replica ``label``'s container exits ``exit_code`` (``reason`` e.g. ``OOMKilled``)."""
        self.kubelet.terminate(self._pod(label), exit_code, reason, message)

    def oom(self, label: str) -> None:
        """Replica ``label``'s container is OOM-killed (exit 137, reason OOMKilled)."""
        self.fail(label, 137, "OOMKilled")

    def close(self) -> None:
        for api in self._clients:
            with contextlib.suppress(Exception):
                api.close()


@pytest.fixture
def kube(control_plane, monkeypatch, tmp_path) -> Iterator[RealCluster]:
    """A fresh namespace with ``manifests/rbac.yaml`` applied; afterwards no Job, pod or Service of any job the
    test launched may remain (listed through the API). No launcher pod in the environment unless a test sets
    one."""
    cp, kubelet = control_plane
    monkeypatch.delenv("TFK8S_LAUNCHER_POD_NAME", raising=False)
    monkeypatch.delenv("TFK8S_LAUNCHER_POD_UID", raising=False)
    monkeypatch.setattr("tfk8s.launcher.kubernetes.settings.SERVICEACCOUNT_NAMESPACE_FILE", tmp_path / "no-namespace")
    c = RealCluster(cp, kubelet, f"t-{uuid.uuid4().hex[:8]}")
    c.create_namespace()
    kubelet.hold = lambda pod: False
    try:
        yield c
        for job_name in sorted(c.jobs):
            assert c.remaining(job_name) == {}, f"objects of {job_name} left behind"
    finally:
        kubelet.hold = lambda pod: False
        with contextlib.suppress(Exception):
            c.core.delete_namespace(c.namespace)
        c.close()
