"""Fixtures of the e2e tests that run the project's own image on the real node (on top of
:mod:`tests.realnode.e2e_fixtures`): the image imported once, a real PersistentVolume per test, and "run this command in
a pod as ServiceAccount X" — everything another e2e test file (the Argo Workflows one, say) needs.

``e2e_image`` (session): the project image (``make image-archive``'s docker-archive, ``$TFK8S_E2E_IMAGE_ARCHIVE``,
which ``make test-e2e`` builds first) imported into the node's containerd under the pipeline's default ``image``
name, :data:`tfk8s.DEFAULT_IMAGE` (~30 s); nothing is ever pulled.

``e2e_mnist`` (session): a small real MNIST subset prepared once on the host by the project's own
``prepare_dataset`` (:data:`MNIST_EXAMPLES` examples per split, :data:`MNIST_SHARDS` shards).

``e2e_pods`` (per test): a :class:`ProjectPods` handle on a fresh production-shaped namespace (Pod Security
``restricted``, a quota, a LimitRange without defaults: :func:`tests.realnode.e2e_fixtures.production_namespace`)
holding ``manifests/rbac.yaml``, a
hostPath PersistentVolume bound by the real PV binder to the ReadWriteMany claim :data:`CLAIM` (its folder on
the node, :data:`VOLUMES` ``/<namespace>``, owned by the image's UID 10001, with the MNIST subset at
:data:`DATA_DIR`), and helpers: :meth:`ProjectPods.run` (a command in a pod of the image, as a ServiceAccount,
the volume mounted, the downward API's pod name and UID in its env), :meth:`ProjectPods.launch` (the launch step
exactly as the compiled pipeline runs it), :meth:`ProjectPods.exec`, :meth:`ProjectPods.job_objects`. After the
test: every job it launched has no pod, Job, Service, NetworkPolicy or PodGroup left, no process of the
namespace runs in the runtime, the namespace, the PV and its folder are removed; the namespace's containers
(which the kubelet's container GC removes once a minute) are checked gone at a later test's start and at the
end of the session (:class:`RuntimeLedger`).

Outside pytest (``bench/real_node.py``): :func:`tests.realnode.e2e_fixtures.new_namespace`, :func:`import_image`,
:func:`apply_rbac`, :func:`make_volume`, :class:`ProjectPods` and :func:`remove_namespace` are plain functions.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realnode import realnode
from tests.realnode.e2e_fixtures import E2E
from tfk8s import DEFAULT_IMAGE
from tfk8s.core.job import job_name, job_selector
from tfk8s.core.layout import DEFAULT_ROOT, RunLayout

REPO = Path(__file__).resolve().parents[2]
ARCHIVE_ENV = "TFK8S_E2E_IMAGE_ARCHIVE"  # set by `make test-e2e` (make image-archive's IMAGE_ARCHIVE)
DEFAULT_ARCHIVE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tfk8s" / "image" / (
    DEFAULT_IMAGE.rsplit("/", 1)[-1].replace(":", "_") + ".tar")
IMAGE_UID = 10001  # the image's user (Dockerfile: USER 10001)
CLAIM = "tfk8s-data"  # the pipeline's pvc_name in these tests
LAUNCHER_SA = "tfk8s-launcher"  # manifests/rbac.yaml
MOUNT = DEFAULT_ROOT  # where every step and replica mounts the claim
VOLUMES = realnode.ROOT / "volumes"  # the PVs' folders on the node: <namespace>/ each
DATA_RUN = "mnist"  # the prepared subset's run folder on the volume
DATA_DIR = str(RunLayout(MOUNT, DATA_RUN).data_dir)  # ... as the pods see it
MNIST_EXAMPLES = 2048  # per split: 32 steps of 64 per epoch
MNIST_SHARDS = 4
KUBELET_GC_S = 60  # the kubelet removes dead containers (and sandboxes) every minute (ContainerGCPeriod)
LABEL_E2E_NAMESPACE = "tfk8s.dev/e2e-namespace"  # on the PV: the claim's selector picks its test's volume
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
"""The pod securityContext of a compiled step's pod (KFP's compiler and the Argo export set it: Pod Security
``restricted``)."""
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"}}
"""... and its container's (tfk8s.submit.argo.container_security_context with the step's runAsNonRoot)."""


# -- the image ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def e2e_image(e2e_cluster) -> str:
    """The project image, imported into the node's containerd (see the module docstring); its name."""
    archive = image_archive()
    if archive is None:
        pytest.skip(f"no image archive at {os.environ.get(ARCHIVE_ENV) or DEFAULT_ARCHIVE}: `make test-e2e` builds "
                    f"it (make image-archive)")
    seconds = import_image(e2e_cluster.node, archive)
    print(f"\nimported {DEFAULT_IMAGE} ({archive.stat().st_size / 2**30:.1f} GiB) in {seconds:.1f}s")
    return DEFAULT_IMAGE


def image_archive() -> Path | None:
    """The project image's docker-archive (``$TFK8S_E2E_IMAGE_ARCHIVE``, else make image-archive's default
    path), None when it is not there."""
    archive = Path(os.environ.get(ARCHIVE_ENV) or DEFAULT_ARCHIVE)
    return archive if archive.is_file() else None


def import_image(node: realnode.RealNode, archive: Path, image: str = DEFAULT_IMAGE) -> float:
    """``ctr -n k8s.io images import`` of ``archive`` into the node's containerd; the seconds it took.

    Raises:
        AssertionError: the import made no ``image``.
    """
    t0 = time.monotonic()
    # --local --discard-unpacked-layers: unpacked in ctr, the compressed layers then left to containerd's GC
    # (2.5 GiB less on the disk during the run)
    realnode._run(str(node.bin_dir / "ctr"), "--address", str(node.sock), "-n", "k8s.io", "images", "import",
                  "--local", "--discard-unpacked-layers", str(archive), timeout=600)
    listed = node.ctr("images", "ls", "-q").split()
    assert image in listed, f"ctr images import of {archive} made no {image}: {listed}"
    node.timings["project image"] = round(time.monotonic() - t0, 1)
    return time.monotonic() - t0


@pytest.fixture(scope="session")
def e2e_mnist(tmp_path_factory, mnist_tfds_data_dir) -> Path:
    """The MNIST subset (see the module docstring), prepared on the host; copied onto each test's volume."""
    from tfk8s.steps.prepare_dataset import prepare_dataset

    out = tmp_path_factory.mktemp("e2e_mnist") / "data"
    prepare_dataset("mnist", out, tfds_data_dir=mnist_tfds_data_dir, num_shards=MNIST_SHARDS,
                    max_examples=MNIST_EXAMPLES)
    return out


# -- the runtime's containers ----------------------------------------------------------------------------------
class RuntimeLedger:
    """The namespaces of finished tests, whose containers the kubelet's GC must remove within a minute."""

    def __init__(self, node: realnode.RealNode):
        self.node = node
        self.pending: dict[str, float] = {}  # namespace -> when its pods were gone (monotonic)

    def containers(self, namespace: str) -> list[str]:
        """The runtime's containers (sandboxes included) of pods of ``namespace`` (``ctr containers ls``)."""
        return self.node.ctr("containers", "ls", "-q",
                             f'labels."io.kubernetes.pod.namespace"=={namespace}').split()

    def running(self, namespace: str) -> list[str]:
        """The runtime's running tasks (processes) of ``namespace``'s containers."""
        ours = set(self.containers(namespace))
        return [t for t in self.node.ctr("tasks", "ls", "-q").split() if t in ours]

    def overdue(self, grace_s: float = KUBELET_GC_S + 30) -> dict[str, list[str]]:
        """Containers of namespaces finished more than ``grace_s`` ago that are still there (``{}``)."""
        now = time.monotonic()
        found = {}
        for ns, since in list(self.pending.items()):
            if now - since < grace_s:
                continue
            left = self.containers(ns)
            if left:
                found[ns] = left
            else:
                del self.pending[ns]
        return found

    def wait_all(self, timeout: float = KUBELET_GC_S + 30) -> dict[str, list[str]]:
        """Wait until every pending namespace's containers are gone; what is left after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            left = {ns: c for ns in list(self.pending) if (c := self.containers(ns))}
            for ns in set(self.pending) - set(left):
                del self.pending[ns]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(2)


@pytest.fixture(scope="session")
def e2e_runtime(e2e_cluster) -> Iterator[RuntimeLedger]:
    """The session's :class:`RuntimeLedger`; at the end every finished test's containers must be gone."""
    ledger = RuntimeLedger(e2e_cluster.node)
    yield ledger
    left = ledger.wait_all()
    assert not left, f"containers the kubelet did not remove {KUBELET_GC_S + 30}s after their pods went: {left}"


# -- a test's namespace with the image, the volume and the launcher's rights --------------------------------
@dataclass(frozen=True)
class Volume:
    """A test's PersistentVolume: ``folder`` on the node (the hostPath), claimed as :data:`CLAIM`, mounted at
    :data:`MOUNT` in the pods."""

    pv: str
    folder: Path

    def host(self, pod_path: str | os.PathLike) -> Path:
        """The node's path of ``pod_path`` (a path under :data:`MOUNT` as the pods see it)."""
        return self.folder / Path(pod_path).relative_to(MOUNT)


def wait_for(predicate: Callable[[], Any], what: str, timeout: float, poll_s: float = 0.5,
             explain: Callable[[], str] | None = None) -> Any:
    """Poll ``predicate`` until it is truthy (returned) or ``timeout`` s pass (AssertionError naming ``what``, and
    ``explain()``'s text: e.g. the launcher's log)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - not yet
            last = e
        time.sleep(poll_s)
    detail = ""
    if explain is not None:
        with contextlib.suppress(Exception):
            detail = "\n" + explain()
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last: {last!r})" if last else "")
                         + detail)


class ProjectPods:
    """A test's namespace on the real node with the project image, the volume and ``manifests/rbac.yaml``.

    Pods made here run the image as its user, the claim mounted at :data:`MOUNT`, with
    ``TFK8S_LAUNCHER_POD_NAME``/``UID`` from the downward API (what the compiled pipeline gives its steps).
    """

    def __init__(self, e2e: E2E, image: str, volume: Volume):
        from kubernetes import client

        self.e2e, self.image, self.volume = e2e, image, volume
        self.namespace, self.core, self.api = e2e.namespace, e2e.core, e2e.api
        self.batch = client.BatchV1Api(self.api)
        self.networking = client.NetworkingV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.jobs: set[str] = set()  # the training jobs launched (checked empty after the test)

    # -- pods ----------------------------------------------------------------------------------------------------
    def pod_manifest(self, name: str, command: list[str], *, service_account: str = LAUNCHER_SA,
                     env: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                     cpu: str = "100m", memory: str = "256Mi", memory_limit: str = "1Gi", cpu_limit: str = "1",
                     image: str = "", grace_s: int = 30) -> dict[str, Any]:
        """A pod of the image running ``command`` once (``restartPolicy: Never``) as ``service_account``, the
        volume at :data:`MOUNT`, the downward API's pod name and UID as ``TFK8S_LAUNCHER_POD_NAME``/``UID``
        (the env the compiled pipeline gives the launch step), requests ``cpu``/``memory`` and limits
        ``cpu_limit``/``memory_limit``, and the securityContext a compiled step's pod has (:data:`RESTRICTED_POD`,
        :data:`RESTRICTED_CONTAINER`: Pod Security ``restricted``)."""
        downward = [{"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}}
                    for var, path in (("TFK8S_LAUNCHER_POD_NAME", "metadata.name"),
                                      ("TFK8S_LAUNCHER_POD_UID", "metadata.uid"))]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
                "spec": {"restartPolicy": "Never", "serviceAccountName": service_account,
                         "terminationGracePeriodSeconds": grace_s, "securityContext": dict(RESTRICTED_POD),
                         "volumes": [{"name": "tfk8s-volume", "persistentVolumeClaim": {"claimName": CLAIM}}],
                         "containers": [{
                             "name": "main", "image": image or self.image, "command": command,
                             "env": downward + [{"name": k, "value": v} for k, v in (env or {}).items()],
                             "volumeMounts": [{"name": "tfk8s-volume", "mountPath": MOUNT}],
                             "securityContext": dict(RESTRICTED_CONTAINER),
                             "resources": {"requests": {"cpu": cpu, "memory": memory},
                                           "limits": {"cpu": cpu_limit, "memory": memory_limit}}}]}}

    def run(self, name: str, command: list[str], **kw: Any) -> dict[str, Any]:
        """Create the pod ``name`` (:meth:`pod_manifest`); its API JSON."""
        self.core.create_namespaced_pod(self.namespace, self.pod_manifest(name, command, **kw))
        return self.e2e.pod(name)

    def wait_done(self, name: str, timeout: float = 300) -> dict[str, Any]:
        """Wait until pod ``name`` has Succeeded or Failed; its JSON."""
        return self.e2e.wait_phase(name, "Succeeded", "Failed", timeout=timeout)

    def run_to_end(self, name: str, command: list[str], timeout: float = 300, **kw: Any) -> tuple[dict, str]:
        """:meth:`run`, wait for its end; (pod JSON, log)."""
        self.run(name, command, **kw)
        pod = self.wait_done(name, timeout)
        return pod, self.e2e.log(name)

    def step(self, name: str, module: str, *args: str, timeout: float = 300, **kw: Any) -> dict[str, Any]:
        """Run ``python -m components.<module> ARGS`` in a pod (a pipeline step, as the compiled pipeline runs
        it) and return the JSON result it prints; AssertionError with its log if it failed."""
        pod, log = self.run_to_end(name, ["python", "-m", f"components.{module}", *args], timeout, **kw)
        assert pod["status"]["phase"] == "Succeeded", f"step {module} failed:\n{log[-4000:]}"
        return last_json(log)

    def launch(self, run_id: str, *args: str, pod: str = "", **kw: Any) -> str:
        """Start the launch step in a pod: ``python -m components.launch_training --backend kubernetes
        --data-dir DATA_DIR --volume-root MOUNT --pvc-name CLAIM --run-id RUN_ID ARGS`` as the
        ``tfk8s-launcher`` ServiceAccount (in-cluster config, the downward API, ownerReferences to this pod);
        returns the pod's name (``launch-<run id>``). The job's name is :meth:`job_of`."""
        name = pod or f"launch-{run_id}"
        self.jobs.add(job_name(run_id))
        self.run(name, ["python", "-m", "components.launch_training", "--backend", "kubernetes",
                        "--data-dir", DATA_DIR, "--volume-root", MOUNT, "--pvc-name", CLAIM, "--run-id", run_id,
                        *args], **kw)
        return name

    def tail(self, pod: str, chars: int = 6000) -> str:
        """The end of pod ``pod``'s log (for assertion messages), or why it cannot be read."""
        try:
            return f"--- log of {pod}:\n" + self.e2e.log(pod)[-chars:]
        except Exception as e:  # noqa: BLE001
            return f"--- no log of {pod}: {e}"

    @staticmethod
    def job_of(run_id: str) -> str:
        """The training job's name for ``run_id`` (``tfk8s-<run id>``)."""
        return job_name(run_id)

    def exec(self, pod: str, command: list[str], container: str = "") -> str:
        """Run ``command`` in a running container of ``pod`` (``pods/exec``: the API server, the kubelet's
        streaming server, containerd's); its stdout and stderr."""
        from kubernetes import client
        from kubernetes.stream import stream

        with self.e2e.cluster.cp.admin_client() as api:  # stream() replaces its client's request method
            kw = {"container": container} if container else {}
            return stream(client.CoreV1Api(api).connect_get_namespaced_pod_exec, pod, self.namespace,
                          command=command, stderr=True, stdin=False, stdout=True, tty=False, **kw)

    # -- what a job left -----------------------------------------------------------------------------------------
    def pods_of(self, job: str, extra: str = "") -> list[dict[str, Any]]:
        """The job's pods (``tfk8s.dev/job-name``, and ``extra`` selector terms), as the API's JSON."""
        sel = job_selector(job) + (f",{extra}" if extra else "")
        return json.loads(self.core.list_namespaced_pod(self.namespace, label_selector=sel,
                                                        _preload_content=False).data)["items"]

    def replica_pod(self, job: str, label: str, attempt: int | None = None) -> dict[str, Any] | None:
        """The newest pod of replica ``label`` (``worker-1``) of ``job`` not being deleted (of ``attempt``)."""
        rtype, index = label.rsplit("-", 1)
        extra = f"tfk8s.dev/replica-type={rtype},tfk8s.dev/replica-index={index}"
        if attempt is not None:
            extra += f",tfk8s.dev/attempt={attempt}"
        pods = [p for p in self.pods_of(job, extra) if not p["metadata"].get("deletionTimestamp")]
        return max(pods, key=lambda p: p["metadata"]["creationTimestamp"], default=None)

    def job_objects(self, job: str) -> dict[str, list[str]]:
        """The names of the job's pods, Jobs, Services, NetworkPolicies and PodGroups still there (``{}``)."""
        sel, ns = job_selector(job), self.namespace
        found = {
            "pods": [p.metadata.name for p in self.core.list_namespaced_pod(ns, label_selector=sel).items],
            "jobs": [j.metadata.name for j in self.batch.list_namespaced_job(ns, label_selector=sel).items],
            "services": [s.metadata.name for s in self.core.list_namespaced_service(ns, label_selector=sel).items],
            "networkpolicies": [n.metadata.name for n in
                                self.networking.list_namespaced_network_policy(ns, label_selector=sel).items],
            "podgroups": [g["metadata"]["name"] for g in self.custom.list_namespaced_custom_object(
                "scheduling.k8s.io", "v1beta1", ns, "podgroups", label_selector=sel)["items"]],
        }
        return {k: sorted(v) for k, v in found.items() if v}

    def events(self, name: str) -> list[tuple[str, str, str]]:
        """(type, reason, message) of the events about the object ``name``, oldest first."""
        items = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}").items
        items.sort(key=lambda e: (e.last_timestamp or e.event_time or e.first_timestamp or 0).isoformat()
                   if (e.last_timestamp or e.event_time or e.first_timestamp) else "")
        return [(e.type, e.reason, e.message or "") for e in items]

    def replica_log(self, run_id: str, label: str) -> str:
        """Replica ``label``'s whole log as the launcher keeps it on the volume (every attempt); "" if none."""
        path = self.volume.host(RunLayout(MOUNT, run_id).train_dir) / "replica-logs" / f"{label}.log"
        return path.read_text(errors="replace") if path.is_file() else ""


def apply_rbac(e2e: E2E) -> None:
    """Create ``manifests/rbac.yaml`` (the ``tfk8s-launcher`` ServiceAccount, Role, RoleBinding) in the namespace."""
    from kubernetes import utils

    for doc in yaml.safe_load_all((REPO / "manifests" / "rbac.yaml").read_text()):
        if doc:
            utils.create_from_dict(e2e.api, doc, namespace=e2e.namespace)


def make_volume(e2e: E2E, data: Path) -> Volume:
    """The namespace's hostPath PV and its ReadWriteMany claim :data:`CLAIM`, bound by the PV binder (the claim
    selects its PV by label; storageClassName "" for both: no provisioner), the MNIST subset on it."""
    folder = VOLUMES / e2e.namespace
    target = folder / Path(DATA_DIR).relative_to(MOUNT)
    shutil.copytree(data, target)
    for d, dirs, files in os.walk(folder):
        for n in [d, *(os.path.join(d, f) for f in dirs + files)]:
            os.chown(n, IMAGE_UID, IMAGE_UID)
    folder.chmod(0o775)
    pv = f"{CLAIM}-{e2e.namespace}"
    e2e.core.create_persistent_volume({
        "metadata": {"name": pv, "labels": {LABEL_E2E_NAMESPACE: e2e.namespace}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(folder), "type": "Directory"}}})
    e2e.core.create_namespaced_persistent_volume_claim(e2e.namespace, {
        "metadata": {"name": CLAIM},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "resources": {"requests": {"storage": "1Gi"}},
                 "selector": {"matchLabels": {LABEL_E2E_NAMESPACE: e2e.namespace}}}})
    wait_for(lambda: e2e.core.read_namespaced_persistent_volume_claim(CLAIM, e2e.namespace).status.phase == "Bound",
             f"claim {CLAIM} bound to {pv} by the PV binder", 30, 0.2)
    return Volume(pv, folder)


def remove_namespace(e2e: E2E, volume: Volume, ledger: RuntimeLedger | None = None) -> list[str]:
    """Delete every pod of the namespace (grace 2 s) and wait until they are gone, then the namespace, the PV and
    its folder; returns the runtime's tasks (processes) of the namespace still running once its pods are gone
    (``[]``). With ``ledger``, its containers are checked later (:class:`RuntimeLedger`)."""
    ns = e2e.namespace
    ledger = ledger or RuntimeLedger(e2e.cluster.node)
    with contextlib.suppress(Exception):
        for p in e2e.core.list_namespaced_pod(ns).items:
            e2e.core.delete_namespaced_pod(p.metadata.name, ns, grace_period_seconds=2)
    with contextlib.suppress(AssertionError):
        wait_for(lambda: not e2e.core.list_namespaced_pod(ns).items, f"the pods of {ns} gone", 60)
    with contextlib.suppress(AssertionError):
        wait_for(lambda: not ledger.running(ns), f"no process of {ns} in the runtime", 15)
    running = ledger.running(ns)
    ledger.pending[ns] = time.monotonic()
    with contextlib.suppress(Exception):
        e2e.core.delete_namespace(ns)
    with contextlib.suppress(Exception):
        e2e.core.delete_persistent_volume(volume.pv)
    shutil.rmtree(volume.folder, ignore_errors=True)
    return running


@pytest.fixture
def e2e_pods(e2e_production: E2E, e2e_image: str, e2e_mnist: Path,
             e2e_runtime: RuntimeLedger) -> Iterator[ProjectPods]:
    """The test's :class:`ProjectPods` in a production-shaped namespace (see the module docstring for what is
    checked afterwards)."""
    e2e = e2e_production
    overdue = e2e_runtime.overdue()
    assert not overdue, f"containers of earlier tests still in the runtime after the kubelet's GC period: {overdue}"
    apply_rbac(e2e)
    volume = make_volume(e2e, e2e_mnist)
    pods = ProjectPods(e2e, e2e_image, volume)
    running: list[str] = []
    try:
        yield pods
        left = {job: objs for job in sorted(pods.jobs) if (objs := pods.job_objects(job))}
        assert not left, f"objects of the jobs left behind: {left}"
    finally:
        running = remove_namespace(e2e, volume, e2e_runtime)
    assert not running, f"processes of {e2e.namespace}'s containers still run after its pods are gone: {running}"


def small_job(*, epochs: int = 1, batch: int = 64, cpu: str = "250m", memory: str = "1Gi",
              max_restarts: int | None = None) -> list[str]:
    """Launch flags of a job that fits the 2-core node: ``epochs`` over the MNIST subset at global batch
    ``batch``, each replica requesting ``cpu`` (limit 2: it may use the idle cores) and ``memory`` (= limit)."""
    overrides = {t: {"cpu_limit": "2"} for t in ("chief", "worker", "ps", "evaluator")}
    flags = ["--epochs", str(epochs), "--batch-size", str(batch), "--cpu", cpu, "--memory", memory,
             "--replica-overrides", json.dumps(overrides)]
    return flags + (["--max-restarts", str(max_restarts)] if max_restarts is not None else [])


def last_json(log: str) -> dict[str, Any]:
    """The JSON object a step's CLI printed last (indented, from a line ``{`` to the end of the log)."""
    start = 0 if log.startswith("{\n") else log.rindex("\n{\n") + 1
    return json.loads(log[start:])


def unique(prefix: str) -> str:
    """A run id unique to this test run (``<prefix>-<6 hex>``)."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


__all__ = ["CLAIM", "DATA_DIR", "LAUNCHER_SA", "MOUNT", "RESTRICTED_CONTAINER", "RESTRICTED_POD", "ProjectPods",
           "RuntimeLedger", "Volume", "apply_rbac",
           "e2e_image", "e2e_mnist", "e2e_pods", "e2e_runtime", "image_archive", "import_image", "last_json",
           "make_volume", "remove_namespace", "small_job", "unique", "wait_for"]
