"""Argo Workflows on the e2e node (``make test-e2e``, ``make test-argo``): the controller and the executor built by
``hack/argo/build.sh`` (v3.7.3, cached under ``~/.cache/tfk8s/argo/``), packed here into one-file images and
imported into the node's containerd (nothing is pulled), installed from ``hack/argo/install.yaml`` (the release's
cluster install: CRDs, the controller's RBAC and Deployment in namespace ``argo``; the e2e control plane runs no
Deployment controller, so the Deployment's pod template is created as a Pod), and driven with the ``argo``
CLI built from the same module (kube mode: it talks to the API server with the admin kubeconfig).

``argo`` (session): the controller running, leading, and the project image in the node (imported once from
``make image-archive``'s archive when the node lacks it); the ``executor`` of its ``workflow-controller-configmap``
set as a cluster admin sets it for Pod Security ``restricted`` and quotas (:data:`EXECUTOR`: a non-root user, no
privilege escalation, every capability dropped, seccomp ``RuntimeDefault``, requests and limits), which Argo
gives its own ``init`` and ``wait`` containers of every workflow pod. ``argo_ns`` (per test): a production-shaped
namespace (:func:`tests.realnode.e2e_fixtures.production_namespace`: ``restricted``, a quota, a LimitRange without
defaults) ready for the compiled pipeline: ``manifests/rbac.yaml`` and ``manifests/argo-rbac.yaml`` applied
(``argo_ns_without_argo_rbac``: not the latter), a PersistentVolume ``tfk8s-data`` (a folder of the node's) bound
to the claim ``tfk8s-data``, and MNIST copied onto it (the pods cannot download anything).

The pieces about the project image and the volume are the minimum this needs; tests/realnode/e2e_fixtures.py grows its
own, and these go when they exist.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realcluster.controlplane import REPO
from tests.realnode.e2e_fixtures import production_namespace
from tests.realnode.realnode import E2ECluster, write_image

ARGO_BUILD = REPO / "hack" / "argo" / "build.sh"
INSTALL = REPO / "hack" / "argo" / "install.yaml"
ARGO_VERSION = "v3.7.3"
CONTROLLER_IMAGE = f"tfk8s.local/workflow-controller:{ARGO_VERSION}"
EXECUTOR_IMAGE = f"tfk8s.local/argoexec:{ARGO_VERSION}"
ARGO_BINARIES = ("workflow-controller", "argoexec", "argo")
PVC = "tfk8s-data"
IMAGE_ARCHIVE_ENV = "TFK8S_E2E_IMAGE_ARCHIVE"  # as tests/realnode/e2e_fixtures.py's
FINISHED = ("Succeeded", "Failed", "Error")
EXECUTOR_USER = 1000  # the argoexec image made here has no USER (the release's runs as 8737); KFP's driver image's
EXECUTOR = {
    "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
    "securityContext": {"runAsUser": EXECUTOR_USER, "runAsGroup": EXECUTOR_USER, "runAsNonRoot": True,
                        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"}},
}
"""The ``executor`` of the ``workflow-controller-configmap``: Argo's ``init`` and ``wait`` containers' requests,
limits and securityContext, what Pod Security ``restricted`` and a quota on requests and limits need of them
(docs/kubernetes.md, Pod Security). tfk8s cannot set these: a cluster admin does."""


def set_executor(api: Any, executor: dict[str, Any] | None) -> None:
    """Set the ``executor`` key of Argo's ``workflow-controller-configmap`` (None: remove it); the controller
    reads it at start and watches it."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    cm = core.read_namespaced_config_map("workflow-controller-configmap", "argo")
    data = dict(cm.data or {})
    if executor is None:
        data.pop("executor", None)
    else:
        data["executor"] = yaml.safe_dump(executor)
    core.replace_namespaced_config_map("workflow-controller-configmap", "argo",
                                       {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
                                        "metadata": {"name": cm.metadata.name, "namespace": "argo"}})


def argo_dir() -> Path | None:
    """``hack/argo/build.sh --dir`` when every binary is there, else None."""
    try:
        d = Path(subprocess.run(["bash", str(ARGO_BUILD), "--dir"], check=True, capture_output=True,
                                text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return None
    return d if all(os.access(d / b, os.X_OK) for b in ARGO_BINARIES) else None


def project_image_archive() -> Path | None:
    """The project image as ``make image-archive`` writes it (``$TFK8S_E2E_IMAGE_ARCHIVE`` or the Makefile's
    default path), or None."""
    from tfk8s import DEFAULT_IMAGE

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tfk8s" / "image"
    path = Path(os.environ.get(IMAGE_ARCHIVE_ENV) or cache / (DEFAULT_IMAGE.rsplit("/", 1)[1].replace(":", "_") + ".tar"))
    return path if path.is_file() else None


def archive_image_name(archive: Path) -> str:
    """The image name a docker-archive holds (``manifest.json``'s first RepoTag), e.g. ghcr.io/tfk8s/tfk8s:0.1.0:
    an archive built from another tree under another name (``hack/image/build.sh --image``) runs as that."""
    import tarfile

    with tarfile.open(archive) as t:
        member = t.getmember("manifest.json")
        manifest = json.load(t.extractfile(member))  # type: ignore[arg-type]
    return manifest[0]["RepoTags"][0]


def ensure_image(cluster: E2ECluster, ref: str, archive: Path) -> float:
    """Import ``archive`` into the node's containerd unless ``ref`` is there already; returns the seconds it took."""
    if ref in cluster.node.ctr("images", "ls", "-q").split():
        return 0.0
    t0 = time.monotonic()
    subprocess.run([str(cluster.node.bin_dir / "ctr"), "--address", str(cluster.node.sock), "-n", "k8s.io",
                    "images", "import", "--platform", "linux/amd64", str(archive)], check=True,
                   capture_output=True, text=True, timeout=900)
    if ref not in cluster.node.ctr("images", "ls", "-q").split():
        raise RuntimeError(f"importing {archive} made no image {ref}")
    return time.monotonic() - t0


@dataclass
class Argo:
    """The controller on the node and the ``argo`` CLI."""

    cluster: E2ECluster
    bin_dir: Path
    kubeconfig: Path
    timings: dict[str, float]
    image: str  # the project image in the node (the pipeline's `image` default, or the archive's own name)

    def cli(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """``argo ARGS`` with the admin kubeconfig; its output (stderr joined to stdout)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.kubeconfig.parent),
               "KUBECONFIG": str(self.kubeconfig)}
        r = subprocess.run([str(self.bin_dir / "argo"), *args], check=False, capture_output=True, text=True, env=env,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"argo {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
        r.stdout += r.stderr
        return r

    def params(self, params: dict[str, Any]) -> list[str]:
        """``-p k=v`` for each parameter (JSON for non-strings), plus ``-p image=...`` when the node's project
        image is not the pipeline's default."""
        from tfk8s import DEFAULT_IMAGE

        argv = []
        for k, v in {**({"image": self.image} if self.image != DEFAULT_IMAGE else {}), **params}.items():
            argv += ["-p", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
        return argv

    def submit(self, namespace: str, path: Path, params: dict[str, Any]) -> str:
        """``argo submit -n NS PATH -p k=v ...`` (:meth:`params`); the Workflow's name."""
        return self.cli("submit", "-n", namespace, str(path), "-o", "name",
                        *self.params(params)).stdout.strip().splitlines()[-1]

    def workflow(self, namespace: str, name: str) -> dict[str, Any]:
        """The Workflow as the API server has it."""
        from kubernetes import client

        with self.cluster.cp.admin_client() as api:
            return client.CustomObjectsApi(api).get_namespaced_custom_object(
                "argoproj.io", "v1alpha1", namespace, "workflows", name)

    def wait(self, namespace: str, name: str, timeout: float = 600) -> dict[str, Any]:
        """Poll until the Workflow finished (Succeeded, Failed, Error); on timeout an AssertionError with
        ``argo get`` and the controller's log."""
        deadline = time.monotonic() + timeout
        wf: dict[str, Any] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                wf = self.workflow(namespace, name)
                if wf.get("status", {}).get("phase") in FINISHED:
                    return wf
            time.sleep(2)
        raise AssertionError(f"workflow {namespace}/{name} not finished after {timeout:.0f}s:\n"
                             f"{self.cli('get', '-n', namespace, name, check=False).stdout}\n--- controller:\n"
                             f"{self.controller_log(30)}")

    def controller_log(self, lines: int = 40) -> str:
        """The end of the controller pod's log."""
        from kubernetes import client

        with contextlib.suppress(Exception), self.cluster.cp.admin_client() as api:
            core = client.CoreV1Api(api)
            (pod,) = core.list_namespaced_pod("argo", label_selector="app=workflow-controller").items
            return core.read_namespaced_pod_log(pod.metadata.name, "argo", tail_lines=lines)
        return "(no controller log)"


def nodes(wf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The Workflow's pod nodes by task name (the last attempt of a retried task), e.g. ``"push-model"``, and
    the tasks a ``when`` skipped; not those omitted because an earlier step failed. Every node has ``phase`` and
    maybe ``message`` and ``outputs``."""
    out: dict[str, dict[str, Any]] = {}
    for node in sorted(wf.get("status", {}).get("nodes", {}).values(), key=lambda n: n.get("startedAt") or ""):
        if node.get("type") in ("Pod", "Skipped") and node.get("displayName") and node.get("phase") != "Omitted":
            out[node["displayName"].split("(")[0]] = node
    return out


def _apply(api: Any, docs: list[dict[str, Any]], namespace: str | None = None) -> None:
    from kubernetes import utils

    for doc in docs:
        utils.create_from_dict(api, doc, namespace=namespace)


def _wait_for(what: str, check: Any, timeout: float, detail: Any = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as e:  # noqa: BLE001 - not yet
            last = e
        time.sleep(0.5)
    raise AssertionError(f"{what} not after {timeout:.0f}s (last error {last!r}) {detail()}")


def argo_unavailable() -> str:
    """Why Argo cannot be brought up on the e2e node here ("" when it can): its binaries or the project image
    archive missing."""
    if argo_dir() is None:
        return "the Argo tests need hack/argo/build.sh's binaries (make test-e2e builds them)"
    if project_image_archive() is None:
        return "the Argo tests need the project image: make image-archive"
    return ""


@contextlib.contextmanager
def running_argo(cluster: E2ECluster) -> Iterator[Argo]:
    """Argo's controller running on ``cluster``'s node, leading, and the project image in the node (see the
    module docstring); the controller's pod deleted at the end. The one implementation behind the ``argo``
    fixture and the real-node benchmarks (bench/kfp_overhead.py).

    Raises:
        RuntimeError: where :func:`argo_unavailable` says why (check it first for a clean skip).
        AssertionError: the controller not up in time (with its pod's status).
    """
    from kubernetes import client

    from tfk8s import DEFAULT_IMAGE

    if why := argo_unavailable():
        raise RuntimeError(why)
    bin_dir, archive = argo_dir(), project_image_archive()
    assert bin_dir is not None and archive is not None
    image = archive_image_name(archive)
    timings: dict[str, float] = {"project image import": round(ensure_image(cluster, image, archive), 1)}
    t0 = time.monotonic()
    for ref, program in ((CONTROLLER_IMAGE, "workflow-controller"), (EXECUTOR_IMAGE, "argoexec")):
        oci = cluster.work / f"{program}.oci.tar"
        write_image(oci, ref, {f"/{program}": bin_dir / program}, [f"/{program}"])
        ensure_image(cluster, ref, oci)
    timings["argo images"] = round(time.monotonic() - t0, 1)
    docs = [d for d in yaml.safe_load_all(INSTALL.read_text()) if d]
    t0 = time.monotonic()
    with cluster.cp.admin_client() as api:
        ext, coord = client.ApiextensionsV1Api(api), client.CoordinationV1Api(api)
        crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
        _apply(api, crds)
        _wait_for("Argo's CRDs Established", lambda: all(any(
            c.type == "Established" and c.status == "True" for c in ext.read_custom_resource_definition(
                d["metadata"]["name"]).status.conditions or []) for d in crds), 30)
        _apply(api, [d for d in docs if d["kind"] not in ("CustomResourceDefinition", "Deployment")])
        set_executor(api, EXECUTOR)
        # the e2e control plane runs no Deployment/ReplicaSet controllers: the Deployment's pod, as a Pod
        (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
        template = deployment["spec"]["template"]
        # retried: the API server's Priority admission reads PriorityClasses from its cache, which under load
        # (seen: load average 500 on 2 cores) did not yet hold the one applied just before ("no PriorityClass
        # with name workflow-controller was found", 403)
        _wait_for("the workflow-controller pod admitted", lambda: client.CoreV1Api(api).create_namespaced_pod(
            "argo", {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
                     "metadata": {"name": "workflow-controller", "labels": template["metadata"]["labels"]}}), 60)

        def leading() -> bool:
            pods = client.CoreV1Api(api).list_namespaced_pod("argo", label_selector="app=workflow-controller").items
            lease = coord.read_namespaced_lease("workflow-controller", "argo")
            return bool(pods) and lease.spec.holder_identity == pods[0].metadata.name

        _wait_for("the workflow-controller leading", leading, 120, lambda: json.dumps(client.CoreV1Api(api)
                  .read_namespaced_pod("workflow-controller", "argo").status.to_dict(), default=str)[:2000])
    timings["controller up"] = round(time.monotonic() - t0, 1)
    kubeconfig = cluster.cp.kubeconfig()
    handle = Argo(cluster, bin_dir, kubeconfig, timings, image)
    print(f"\nargo {ARGO_VERSION} up, project image {image}{'' if image == DEFAULT_IMAGE else ' (-p image)'}: "
          f"{timings}")
    try:
        yield handle
    finally:
        with contextlib.suppress(Exception), cluster.cp.admin_client() as api:
            client.CoreV1Api(api).delete_namespaced_pod("workflow-controller", "argo")




@pytest.fixture(scope="session")
def argo(e2e_cluster: E2ECluster) -> Iterator[Argo]:
    """Argo's controller running on the node (see the module docstring and :func:`running_argo`); removed at the
    end."""
    if why := argo_unavailable():
        pytest.skip(why)
    with running_argo(e2e_cluster) as handle:
        yield handle


@dataclass
class ArgoNamespace:
    """A test's namespace for the pipeline: its name and the node folder its PersistentVolume is."""

    name: str
    volume: Path


def prepare_namespace(cluster: E2ECluster, ns: str, argo_rbac: bool = True, tfds: bool = True,
                      level: str = "restricted") -> ArgoNamespace:
    """Create ``ns`` production-shaped at Pod Security ``level``
    (:func:`tests.realnode.e2e_fixtures.production_namespace`) with the RBAC of ``manifests/`` (``argo-rbac.yaml``
    only if ``argo_rbac``), a PV + PVC ``tfk8s-data`` (the node folder ``<root>/hostpath/<ns>``, writable by the
    image's user) and, with ``tfds``, MNIST under ``tfds/`` on it."""
    from kubernetes import client

    from tfk8s.steps.prepare_dataset import default_tfds_data_dir

    volume = cluster.node.root / "hostpath" / ns
    volume.mkdir(parents=True)
    volume.chmod(0o777)
    if tfds:
        source = default_tfds_data_dir()
        if source is None or not (Path(source) / "mnist").is_dir():
            pytest.skip("needs real MNIST in ../shared/data/tensorflow_datasets or $TFDS_DATA_DIR")
        shutil.copytree(Path(source) / "mnist", volume / "tfds" / "mnist")
        for d, _, files in os.walk(volume / "tfds"):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(Path(d) / f, 0o644)
    with cluster.cp.admin_client() as api:
        core = client.CoreV1Api(api)
        production_namespace(api, ns, level)
        manifests = ["rbac.yaml", *(["argo-rbac.yaml"] if argo_rbac else [])]
        _apply(api, [d for m in manifests for d in yaml.safe_load_all((REPO / "manifests" / m).read_text()) if d],
               namespace=ns)
        core.create_persistent_volume({
            "metadata": {"name": f"{ns}-data", "labels": {"tfk8s.dev/e2e-namespace": ns}},
            "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                     "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(volume), "type": "Directory"},
                     "claimRef": {"namespace": ns, "name": PVC}}})
        core.create_namespaced_persistent_volume_claim(ns, {
            "metadata": {"name": PVC},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": f"{ns}-data",
                     "resources": {"requests": {"storage": "5Gi"}}}})
        _wait_for(f"PVC {ns}/{PVC} Bound",
                  lambda: core.read_namespaced_persistent_volume_claim(PVC, ns).status.phase == "Bound", 60)
    return ArgoNamespace(ns, volume)


def remove_namespace(cluster: E2ECluster, ns: ArgoNamespace) -> None:
    """Delete the namespace (its Workflows, pods and claim go with it), then its PV and folder."""
    from kubernetes import client

    with contextlib.suppress(Exception), cluster.cp.admin_client() as api:
        core = client.CoreV1Api(api)
        core.delete_namespace(ns.name)
        # its pods are gone (every test waits for that); the namespace itself may take minutes to go on this
        # control plane (measured: over 90 s each, cause not looked into), which nothing here needs to wait for
        with contextlib.suppress(Exception):
            _wait_for(f"pods of {ns.name} gone", lambda: not core.list_namespaced_pod(ns.name).items, 30)
        core.delete_persistent_volume(f"{ns.name}-data")
    shutil.rmtree(ns.volume, ignore_errors=True)


@pytest.fixture
def argo_ns(argo: Argo) -> Iterator[ArgoNamespace]:
    """A fresh namespace ready for compiled/train.argo.yaml (see :func:`prepare_namespace`)."""
    ns = prepare_namespace(argo.cluster, f"argo-{uuid.uuid4().hex[:8]}")
    try:
        yield ns
    finally:
        remove_namespace(argo.cluster, ns)


@pytest.fixture
def argo_ns_without_argo_rbac(argo: Argo) -> Iterator[ArgoNamespace]:
    """The same without manifests/argo-rbac.yaml (the steps' ServiceAccounts may not report their outputs)."""
    ns = prepare_namespace(argo.cluster, f"argo-{uuid.uuid4().hex[:8]}", argo_rbac=False, tfds=False)
    try:
        yield ns
    finally:
        remove_namespace(argo.cluster, ns)


__all__ = ["EXECUTOR", "Argo", "ArgoNamespace", "argo", "argo_ns", "argo_ns_without_argo_rbac", "argo_unavailable",
           "nodes", "running_argo", "set_executor"]
