"""The Kubernetes backend with a real Kueue (``make test-cluster``): Kueue v0.17's manager
(:mod:`tests.realcluster.kueue_server`, built by ``hack/kueue/build.sh``) on the real control plane, its CRDs and
webhooks installed, admitting the launcher's Jobs from a ClusterQueue's quota.

The launcher runs as the ``tfk8s-launcher`` ServiceAccount (``manifests/rbac.yaml``): every read of Kueue's API
(discovery, LocalQueues, Workloads) is judged by the real RBAC authorizer. Kueue 0.17 serves ``v1beta2`` and
``v1beta1`` (``v1beta2`` stored): the launcher reads ``v1beta2``. The ``v1beta1``-only fallback is pinned against
Kueue's API without Kueue in ``tests/realcluster/test_backend.py``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time

import pytest

pytest.register_assert_rewrite("tests.realcluster.cluster_fixtures")

from tests.realcluster.cluster_fixtures import RealCluster
from tests.realcluster.kueue_server import FLAVOR, GROUP, running_kueue, skip_reason
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.kubernetes.errors import KueueQueueError, ScheduleTimeoutError
from tfk8s.launcher.kubernetes.settings import KubernetesSettings

pytest_plugins = ["tests.realcluster.cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

JOB = "tfk8s-kueue-1"
HOLD_S = 3.0  # how long the drained test keeps the old Jobs' Workloads after their Jobs are deleted


@pytest.fixture(scope="module")
def kueue(control_plane, tmp_path_factory):
    """Kueue running on the session's control plane for this module's tests; removed afterwards (its process by
    pid, its webhook configurations, its objects and CRDs)."""
    cp, _ = control_plane
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with running_kueue(cp.kubeconfig(), tmp_path_factory.mktemp("kueue")) as server:
        print(f"\nkueue up in {server.timings['up']:.1f}s (manager ready in {server.timings['ready']:.1f}s), "
              f"pid {server.pid}; log {server.work / 'kueue.log'}")
        yield server
    # The cluster and the machine as found: no process, no webhook configuration, no CRD of Kueue's group.
    from kubernetes import client

    with cp.admin_client() as api:
        adm, ext = client.AdmissionregistrationV1Api(api), client.ApiextensionsV1Api(api)
        hooks = [w.metadata.name for w in adm.list_mutating_webhook_configuration().items
                 + adm.list_validating_webhook_configuration().items]
        crds = [c.metadata.name for c in ext.list_custom_resource_definition().items]
    assert server.popen is not None and server.popen.poll() is not None
    assert not [h for h in hooks if h.startswith("tfk8s-test-kueue")], hooks
    assert not [c for c in crds if c.endswith(f".{GROUP}")], crds


def make_job(worker: int = 2, **kw) -> TrainingJob:
    kw.setdefault("grace_period_s", 0.5)
    kw.setdefault("stop_grace_s", 1)
    return TrainingJob(JOB, ReplicaCounts(chief=0, worker=worker, ps=0), ("python", "-m", "trainer.task"), **kw)


def make_settings(kube: RealCluster, **params) -> KubernetesSettings:
    params.setdefault("cpu", "100m")
    params.setdefault("memory", "128Mi")
    base = KubernetesSettings.from_params(namespace=kube.namespace, image="tfk8s:test", **params)
    return dataclasses.replace(base, log_wait_s=2.0, cleanup_timeout_s=60, create_retry_s=30, group_settle_s=2.0)


def _served_versions(kube: RealCluster) -> list[str]:
    resp = kube.admin.call_api(f"/apis/{GROUP}", "GET", auth_settings=["BearerToken"],
                               _return_http_data_only=True, _preload_content=False)
    return [v["version"] for v in json.loads(resp.data)["versions"]]


def test_the_launcher_reads_v1beta2_of_the_real_kueue(kube, kueue):
    """Kueue 0.17 serves v1beta2 (preferred, stored) and v1beta1; the launcher, through its own Role, reads v1beta2."""
    from tfk8s.launcher.kubernetes.api import KubeApi, kueue_version_of

    assert _served_versions(kube) == ["v1beta2", "v1beta1"]
    served = KubeApi(kube.launcher_client(), kube.namespace).kueue_versions()
    assert sorted(served or []) == ["v1beta1", "v1beta2"]
    assert kueue_version_of(served) == "v1beta2"


def test_a_job_on_a_real_kueue_queue_is_admitted_and_completes(kube, kueue):
    """Kueue's webhook suspends each replica's Job at creation; its scheduler admits their Workloads from the
    ClusterQueue's quota and unsuspends them; the Job controller then creates the pods and the job succeeds.
    The launcher says no word of a held Job, and no v1beta1 warning."""
    cq = kueue.queue(kube.namespace, "q", cpu="1", memory="1Gi")
    seen: dict = {}

    def script(c: RealCluster) -> None:
        c.wait_pods("worker-0", "worker-1", timeout=60)
        seen["workloads"] = kueue.workloads(c.namespace)
        seen["jobs"] = {j.metadata.name: j for j in c.batch.list_namespaced_job(c.namespace).items}
        c.succeed("worker-1")  # worker-0 last: its success ends the job (the rest would be stopped)
        c.succeed("worker-0")

    t0 = time.monotonic()
    result = kube.launch(make_job(), make_settings(kube, kueue_queue="q"), script)
    took = time.monotonic() - t0
    assert result.exit_codes == {"worker-0": 0, "worker-1": 0}
    jobs = seen["jobs"]
    assert sorted(jobs) == [f"{JOB}-worker-0", f"{JOB}-worker-1"]
    assert {j.metadata.labels["kueue.x-k8s.io/queue-name"] for j in jobs.values()} == {"q"}
    assert not any(j.spec.suspend for j in jobs.values())  # admitted: Kueue unsuspended them
    # One Workload per replica's Job, owned by it, admitted by our ClusterQueue on our flavor, 100m each.
    by_job = {}
    for w in seen["workloads"]:
        owner = next(o for o in w["metadata"]["ownerReferences"] if o["kind"] == "Job")
        by_job[owner["name"]] = w
    assert sorted(by_job) == sorted(jobs)
    for name, w in by_job.items():
        assert w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == jobs[name].metadata.uid
        assert w["spec"]["queueName"] == "q"
        conditions = {c["type"]: c["status"] for c in w["status"]["conditions"]}
        assert conditions["QuotaReserved"] == "True" and conditions["Admitted"] == "True", conditions
        admission = w["status"]["admission"]
        assert admission["clusterQueue"] == cq
        assert admission["podSetAssignments"][0]["flavors"] == {"cpu": FLAVOR, "memory": FLAVOR}
        assert admission["podSetAssignments"][0]["resourceUsage"]["cpu"] == "100m"
    assert not any("held by Kueue" in line or "v1beta1" in line for line in kube.output), kube.output
    print(f"admitted and completed in {took:.1f}s")


def test_a_job_over_its_cluster_queues_quota_is_held_with_kueues_own_words(kube, kueue):
    """A replica asking 2 CPUs of a ClusterQueue whose quota is 1: Kueue never admits its Workload and says so in
    its QuotaReserved condition; the launcher prints that once while the Job waits and quotes it in the schedule
    deadline's error, and deletes the suspended Jobs."""
    kueue.queue(kube.namespace, "small", cpu="1", memory="1Gi")
    with pytest.raises(ScheduleTimeoutError) as e:
        kube.launch(make_job(worker=1), make_settings(kube, kueue_queue="small", cpu="2", schedule_timeout_s=8))
    kueue_words = (r"Pending: couldn't assign flavors to pod set main: insufficient quota for cpu in flavor "
                   rf"{FLAVOR}, previously considered podsets requests \(0\) \+ current podset request \(2\) > "
                   r"maximum capacity \(1\)")
    assert e.value.reason == "Suspended"
    assert re.search(rf"the Job is suspended: queue small has not admitted it \(Kueue: {kueue_words}\)",
                     str(e.value)), str(e.value)
    held = [line for line in kube.output if "is held by Kueue queue small" in line]
    assert len(held) == 1, kube.output
    assert re.fullmatch(rf"\[launcher\] worker-0: Job {JOB}-worker-0 is held by Kueue queue small: {kueue_words}",
                        held[0]), held[0]


def test_a_missing_local_queue_fails_at_once_and_creates_nothing(kube, kueue):
    """No LocalQueue of that name in the namespace: KueueQueueError before any Job exists."""
    t0 = time.monotonic()
    with pytest.raises(KueueQueueError) as e:
        kube.launch(make_job(), make_settings(kube, kueue_queue="nope"))
    assert f"there is no LocalQueue nope in namespace {kube.namespace}" in str(e.value)
    assert time.monotonic() - t0 < 10
    assert not kube.batch.list_namespaced_job(kube.namespace).items


def test_a_local_queue_of_a_missing_cluster_queue_is_refused_with_kueues_reason(kube, kueue):
    """A LocalQueue whose ClusterQueue does not exist: the real Kueue marks it inactive; the launcher refuses it
    quoting Kueue's reason and message, before any Job exists."""
    kueue.custom.create_namespaced_custom_object(GROUP, "v1beta2", kube.namespace, "localqueues", {
        "apiVersion": f"{GROUP}/v1beta2", "kind": "LocalQueue", "metadata": {"name": "orphan"},
        "spec": {"clusterQueue": f"absent-{kube.namespace}"}})

    def inactive() -> bool:
        lq = kueue.custom.get_namespaced_custom_object(GROUP, "v1beta2", kube.namespace, "localqueues", "orphan")
        return any(c["type"] == "Active" and c["status"] == "False" for c in lq.get("status", {}).get("conditions", []))

    kube.wait_for(inactive, "Kueue marking LocalQueue orphan inactive")
    with pytest.raises(KueueQueueError) as e:
        kube.launch(make_job(), make_settings(kube, kueue_queue="orphan"))
    assert (f"LocalQueue orphan in namespace {kube.namespace} is inactive (ClusterQueueDoesNotExist: "
            f"Can't submit new workloads to clusterQueue)") in str(e.value)
    assert not kube.batch.list_namespaced_job(kube.namespace).items


def test_a_drained_cluster_queue_suspends_running_jobs_which_are_recreated_and_readmitted(kube, kueue):
    """The ClusterQueue stopped with ``HoldAndDrain`` while the workers run: Kueue evicts their Workloads and
    suspends their Jobs, the Job controller deletes the pods; the launcher takes it for a preemption (no restart
    used), waits for the old Jobs' Workloads to go (kept :data:`HOLD_S` longer by a finalizer, as a slow garbage
    collector would), recreates the set, whose Jobs Kueue holds (the launcher says why, from the new Workloads)
    until the queue is resumed; then they are admitted and succeed.

    Without the wait, Kueue v0.17.0 matched each new Job to its predecessor's Workload (it finds a Job's Workloads
    by the owner's name) and never admitted it: 2 of 2 runs so, and 2 of 2 when the garbage collector had not yet
    synced Kueue's CRDs ("invalid admission check PodSetUpdate: conflict for annotations: conflict for
    key=kueue.x-k8s.io/workload" in Kueue's log)."""
    cq = kueue.queue(kube.namespace, "q", cpu="1", memory="1Gi")
    seen: dict = {}

    def set_stop_policy(policy: str) -> None:
        kueue.custom.patch_cluster_custom_object(GROUP, "v1beta2", "clusterqueues", cq,
                                                 {"spec": {"stopPolicy": policy}})

    def hold_old_workloads(finalizers: list[str] | None) -> None:
        for name in seen["old"]:
            kueue.custom.patch_namespaced_custom_object(GROUP, "v1beta2", kube.namespace, "workloads", name,
                                                        {"metadata": {"finalizers": finalizers}})

    def script(c: RealCluster) -> None:
        c.wait_pods("worker-0", "worker-1", timeout=60)
        seen["old"] = {w["metadata"]["name"] for w in kueue.workloads(c.namespace)}
        # A slow garbage collector (a busy cluster's, or one that has not synced Kueue's CRDs yet): the old Jobs'
        # Workloads outlive their Jobs for a few seconds, held by a finalizer of the test's own.
        hold_old_workloads(["tfk8s.dev/test-hold", "kueue.x-k8s.io/resource-in-use"])
        set_stop_policy("HoldAndDrain")
        c.wait_for(lambda: any("preempted: recreating" in line for line in c.output), "the restart", 60)
        time.sleep(HOLD_S)
        seen["jobs while the old Workloads exist"] = [
            (j.metadata.name, j.metadata.labels["tfk8s.dev/attempt"])
            for j in c.batch.list_namespaced_job(c.namespace).items]
        hold_old_workloads(None)
        c.wait_for(lambda: sum("is held by Kueue queue q" in line for line in c.output) == 2, "two held lines", 60)
        seen["held"] = [line for line in c.output if "is held by Kueue queue q" in line]
        seen["jobs"] = {j.metadata.name: j.metadata.uid for j in c.batch.list_namespaced_job(c.namespace).items}
        seen["workloads"] = kueue.workloads(c.namespace)
        set_stop_policy("None")
        c.wait_pods("worker-0", "worker-1", attempt=1, timeout=60)
        c.succeed("worker-1")  # worker-0 last: its success ends the job (the rest would be stopped)
        c.succeed("worker-0")

    result = kube.launch(make_job(max_restarts=0), make_settings(kube, kueue_queue="q"), script)
    assert result.exit_codes == {"worker-0": 0, "worker-1": 0}
    assert (result.restarts, result.preemptions) == (0, 1)
    (recreated,) = [line for line in kube.output if "preempted: recreating" in line]
    assert re.search(r"worker-\d failed: Suspended \(Job tfk8s-kueue-1-worker-\d was suspended while its pod ran "
                     r"\(its queue q preempted the workload\)", recreated), recreated
    assert recreated.endswith("preempted: recreating worker-0, worker-1 (preemption 1, not counted against "
                              "max_restarts=0)")
    assert sorted(seen["held"]) == [f"[launcher] worker-{i}: Job {JOB}-worker-{i} is held by Kueue queue q: "
                                    f"Inadmissible: ClusterQueue {cq} is inactive" for i in (0, 1)]
    # When the new Jobs were held, only their own Workloads existed: the old ones were gone.
    owners = {o["name"]: o["uid"] for w in seen["workloads"] for o in w["metadata"]["ownerReferences"]}
    assert owners == seen["jobs"]
    assert not seen["old"] & {w["metadata"]["name"] for w in seen["workloads"]}
    assert not any("still exist" in line for line in kube.output)
    assert seen["jobs while the old Workloads exist"] == []
