"""The ensure-volume step against the fake API server: the claim is found, created when asked, or the run
fails at once with the fix; the calls it makes are the ones manifests/rbac.yaml grants."""

import threading
import time

import kubernetes_validate
import pytest

from tests.fakes.kube_fixtures import NAMESPACE, PVCS, FakeCluster
from tfk8s.launcher.kubernetes.api import KubeApi, required_rules
from tfk8s.launcher.kubernetes.errors import VolumeError
from tfk8s.launcher.kubernetes.objects import pvc_manifest
from tfk8s.launcher.kubernetes.volume import ensure_pvc
from tfk8s.steps.ensure_volume import ensure_volume_step

pytest_plugins = ["tests.fakes.kube_fixtures"]
pytestmark = pytest.mark.timeout(60)


def _pvc_requests(cluster: FakeCluster) -> list[tuple[str, str]]:
    return [(r.method.value, r.action.name if r.action else "") for r in cluster.requests()
            if r.resource is not None and r.resource.plural == "persistentvolumeclaims"]


def test_a_missing_claim_fails_at_once_naming_it_and_the_fix(cluster):
    api = KubeApi(cluster.api_client(), NAMESPACE)
    with pytest.raises(VolumeError) as err:
        ensure_pvc(api, "tfk8s-data", log=lambda _: None)
    msg = str(err.value)
    assert f"PersistentVolumeClaim 'tfk8s-data' not found in namespace '{NAMESPACE}'" in msg
    assert "create_pvc=true" in msg
    assert cluster.objects("persistentvolumeclaims") == []


WFFC = "waiting for first consumer to be created before binding"  # the PV controller's event message


def _bind_when_created(cluster: FakeCluster, name: str) -> threading.Thread:
    """The provisioner: binds the claim once it exists."""
    def bind() -> None:
        cluster.wait_for(lambda: cluster.objects("persistentvolumeclaims"), f"claim {name}")
        cluster._run(cluster.server.patch(PVCS, NAMESPACE, name, {"status": {"phase": "Bound"}}))

    t = threading.Thread(target=bind, daemon=True)
    t.start()
    return t


def test_create_pvc_creates_a_read_write_many_claim_once(cluster):
    api = KubeApi(cluster.api_client(), NAMESPACE)
    lines: list[str] = []
    _bind_when_created(cluster, "tfk8s-data")
    first = ensure_pvc(api, "tfk8s-data", create=True, size="5Gi", storage_class="nfs", log=lines.append,
                       poll_s=0.1)
    again = ensure_pvc(api, "tfk8s-data", create=True, size="5Gi", storage_class="nfs", log=lines.append)
    assert first["created"] is True and again["created"] is False
    (pvc,) = cluster.objects("persistentvolumeclaims")
    assert pvc["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "5Gi"}},
                           "storageClassName": "nfs"}
    assert lines[0] == (f"created PersistentVolumeClaim tfk8s-data (5Gi, ReadWriteMany, storage class nfs) "
                        f"in namespace {NAMESPACE}")
    assert first["phase"] == again["phase"] == "Bound"
    methods = [m for m, _ in _pvc_requests(cluster)]
    assert methods[:2] == ["GET", "POST"] and methods.count("POST") == 1  # read, create; never a second create
    verbs = required_rules()[("", "persistentvolumeclaims")]
    assert verbs == {"get", "create"}


def test_an_existing_read_write_once_claim_is_used_with_a_warning(cluster):
    cluster.create(pvc_manifest("shared", NAMESPACE, size="1Gi", access_mode="ReadWriteOnce"))
    cluster.add_event("PersistentVolumeClaim", "shared", "WaitForFirstConsumer", WFFC, "Normal")
    lines: list[str] = []
    status = ensure_pvc(KubeApi(cluster.api_client(), NAMESPACE), "shared", log=lines.append)
    assert status == {"name": "shared", "namespace": NAMESPACE, "created": False, "phase": "Pending",
                      "access_modes": ["ReadWriteOnce"]}
    assert any("not ReadWriteMany" in line for line in lines)


def test_a_bad_size_is_refused_before_creating(cluster):
    with pytest.raises(VolumeError, match="pvc_size: 'lots' is not a Kubernetes quantity"):
        ensure_pvc(KubeApi(cluster.api_client(), NAMESPACE), "x", create=True, size="lots", log=lambda _: None)
    assert cluster.objects("persistentvolumeclaims") == []


def test_the_step_on_kubernetes_and_locally(cluster, tmp_path):
    cluster.add_event("PersistentVolumeClaim", "data", "WaitForFirstConsumer", WFFC, "Normal")
    out = ensure_volume_step(backend="kubernetes", volume_root="/mnt/tfk8s", pvc_name="data", namespace=NAMESPACE,
                             create_pvc=True, pvc_size="2Gi", api_client=cluster.api_client())
    assert out["created"] is True and out["name"] == "data"
    local = ensure_volume_step(backend="local", volume_root=str(tmp_path / "vol"), pvc_name="ignored")
    assert (tmp_path / "vol").is_dir() and local == {"backend": "local", "volume_root": str(tmp_path / "vol")}
    with pytest.raises(ValueError, match="pvc_name is empty"):
        ensure_volume_step(backend="kubernetes", volume_root="/mnt/tfk8s", pvc_name="")


@pytest.mark.parametrize("version", ["1.29", "1.37"])
def test_the_claim_validates_strictly(version):
    kubernetes_validate.validate(pvc_manifest("tfk8s-data", "ml", size="20Gi", storage_class="standard"),
                                 version, strict=True)


def test_a_pending_claim_with_provisioning_failed_fails_with_the_provisioners_message(cluster):
    cluster.create(pvc_manifest("rwx", NAMESPACE, size="1Gi", storage_class="standard"))
    cluster.add_event("PersistentVolumeClaim", "rwx", "Provisioning", "External provisioner is provisioning volume",
                      "Normal")
    cluster.add_event("PersistentVolumeClaim", "rwx", "ProvisioningFailed",
                      "failed to provision volume with StorageClass \"standard\": rpc error: code = InvalidArgument "
                      "desc = Volume capabilities MULTI_NODE_MULTI_WRITER not supported")
    t0 = time.monotonic()
    with pytest.raises(VolumeError) as err:
        ensure_pvc(KubeApi(cluster.api_client(), NAMESPACE), "rwx", log=lambda _: None)
    assert time.monotonic() - t0 < 10  # at once, not after the bind timeout
    msg = str(err.value)
    assert "PersistentVolumeClaim 'rwx' (storage class standard) cannot be provisioned" in msg
    assert "MULTI_NODE_MULTI_WRITER not supported (ProvisioningFailed" in msg
    assert "pvc_storage_class" in msg and f"kubectl describe pvc -n {NAMESPACE} rwx" in msg


def test_a_claim_pending_on_an_immediate_class_fails_after_the_bound_with_its_last_events(cluster):
    cluster.create(pvc_manifest("slow", NAMESPACE, size="1Gi", storage_class="nfs"))
    cluster.add_event("PersistentVolumeClaim", "slow", "ExternalProvisioning",
                      "Waiting for a volume to be created either by the external provisioner 'nfs.csi.k8s.io' or "
                      "manually by the system administrator", "Normal")
    with pytest.raises(VolumeError) as err:
        ensure_pvc(KubeApi(cluster.api_client(), NAMESPACE), "slow", log=lambda _: None, bind_timeout_s=0.5,
                   poll_s=0.1)
    msg = str(err.value)
    assert "'slow' (storage class nfs) is still Pending after 0.5s and its class binds immediately" in msg
    assert "ExternalProvisioning: Waiting for a volume to be created either by the external provisioner" in msg


def test_a_claim_waiting_for_its_first_consumer_is_fine(cluster):
    cluster.create(pvc_manifest("wffc", NAMESPACE, size="1Gi", storage_class="local-path"))
    cluster.add_event("PersistentVolumeClaim", "wffc", "WaitForFirstConsumer", WFFC, "Normal")
    lines: list[str] = []
    status = ensure_pvc(KubeApi(cluster.api_client(), NAMESPACE), "wffc", log=lines.append, bind_timeout_s=0.5)
    assert status["phase"] == "Pending"
    assert "Pending until the first pod mounts it (storage class local-path binds on WaitForFirstConsumer)" in lines[0]


@pytest.mark.parametrize("phase", ["Bound", "Pending"])
def test_a_claim_being_deleted_fails_at_once_naming_it_its_finalizers_and_the_fix(cluster, phase):
    """Terminating (deletionTimestamp set, kept by kubernetes.io/pvc-protection while a pod uses it): a new pod
    that mounts it would never start, so ensure-volume refuses it, even with create_pvc (it exists, as far as a
    create goes)."""
    claim = pvc_manifest("old", NAMESPACE, size="1Gi")
    claim["metadata"].update(deletionTimestamp="2026-12-06T05:00:00Z", finalizers=["kubernetes.io/pvc-protection"])
    cluster.create({**claim, "status": {"phase": phase}})
    cluster.add_event("PersistentVolumeClaim", "old", "WaitForFirstConsumer", WFFC, "Normal")
    for create in (False, True):
        with pytest.raises(VolumeError) as err:
            ensure_pvc(KubeApi(cluster.api_client(), NAMESPACE), "old", create=create, log=lambda _: None,
                       bind_timeout_s=0.5, poll_s=0.1)
        msg = str(err.value)
        assert (f"PersistentVolumeClaim 'old' in namespace '{NAMESPACE}' is being deleted (Terminating since "
                "2026-12-06T05:00:00Z, held by its finalizers kubernetes.io/pvc-protection)") in msg
        assert "while a pod still mounts it" in msg and "a pod that mounts it would never start" in msg
        assert "run again with create_pvc=true" in msg and "another claim as pvc_name" in msg
    assert [m for m, _ in _pvc_requests(cluster)] == ["GET", "GET"]  # nothing created


def test_a_lost_claim_fails_naming_it_its_volume_and_the_fix(cluster):
    claim = pvc_manifest("gone", NAMESPACE, size="1Gi")
    claim["spec"]["volumeName"] = "pv-gone"
    cluster.create({**claim, "status": {"phase": "Lost"}})
    with pytest.raises(VolumeError) as err:
        ensure_volume_step(backend="kubernetes", volume_root="/mnt/tfk8s", pvc_name="gone", namespace=NAMESPACE,
                           api_client=cluster.api_client())
    msg = str(err.value)
    assert f"PersistentVolumeClaim 'gone' in namespace '{NAMESPACE}' is Lost: its PersistentVolume pv-gone" in msg
    assert f"kubectl delete pvc -n {NAMESPACE} gone" in msg and "create_pvc=true" in msg
