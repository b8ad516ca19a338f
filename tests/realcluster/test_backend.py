"""The Kubernetes backend against a real control plane (``make test-cluster``): etcd, kube-apiserver with RBAC,
the controller manager's Job, TTL, garbage-collector and quota controllers, the real scheduler, KWOK's fake
nodes and the fake kubelet (:mod:`tests.realcluster.cluster_fixtures`).

The launcher runs as the ``tfk8s-launcher`` ServiceAccount of ``manifests/rbac.yaml`` (a bound token), so the
real authorizer judges every request; every object is created with ``fieldValidation=Strict``. After every
test, zero Jobs, pods and Services of the job remain (listed through the API).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import time

import pytest

pytest.register_assert_rewrite("tests.realcluster.cluster_fixtures")

from tests.realcluster.cluster_fixtures import NODES, RealCluster, node_name, wait
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.errors import JobTimeoutError
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.kubernetes.errors import (
    AdmissionRefusedError,
    ImagePullError,
    KubernetesApiError,
    KueueQueueError,
    LauncherTerminatedError,
    PermanentFailureError,
    QuotaExceededError,
    RestartBudgetExhaustedError,
    ScheduleTimeoutError,
)
from tfk8s.launcher.kubernetes.settings import KubernetesSettings

pytest_plugins = ["tests.realcluster.cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

JOB = "tfk8s-run-7"
COMMAND = ("python", "-m", "trainer.task")


def make_job(chief: int = 1, worker: int = 2, ps: int = 1, evaluator: int = 0, **kw) -> TrainingJob:
    kw.setdefault("grace_period_s", 0.5)
    kw.setdefault("stop_grace_s", 1)
    return TrainingJob(JOB, ReplicaCounts(chief=chief, worker=worker, ps=ps, evaluator=evaluator), COMMAND, **kw)


def make_settings(kube: RealCluster, **fields) -> KubernetesSettings:
    params = {k: fields.pop(k) for k in list(fields) if k in ("schedule_timeout_s", "image",
                                                              "node_selector", "cpu", "memory",
                                                              "replica_overrides", "pvc_name",
                                                              "kueue_queue", "labels", "annotations",
                                                              "priority_class_name")}
    params.setdefault("cpu", "100m")
    params.setdefault("memory", "128Mi")
    base = KubernetesSettings.from_params(namespace=kube.namespace, image=params.pop("image", "tfk8s:test"),
                                          **params)
    fields.setdefault("group_settle_s", 2.0)
    return dataclasses.replace(base, log_wait_s=2.0, cleanup_timeout_s=60, create_retry_s=30, **fields)


def labels_of(pod: dict) -> str:
    lab = pod["metadata"]["labels"]
    return f"{lab['tfk8s.dev/replica-type']}-{lab['tfk8s.dev/replica-index']}"


# -- success ---------------------------------------------------------------------------------------------------------
def test_chief_success_stops_the_rest_and_the_real_controllers_clean_up(kube):
    """The Job controller creates the pods, the scheduler binds them to the fake nodes, the replicas' logs
    come through the API server's pods/log, and the ps still running is stopped."""
    job = make_job()
    seen: dict = {}

    def script(c: RealCluster) -> None:
        pods = c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        seen["nodes"] = {label: p["spec"]["nodeName"] for label, p in pods.items()}
        seen["owners"] = {label: p["metadata"]["ownerReferences"][0]["kind"] for label, p in pods.items()}
        c.log("chief-0", "epoch 1/1 loss=0.25", "saved model")
        c.wait_for(lambda: "[chief-0] saved model" in c.output, "the chief's log through pods/log")
        c.succeed("worker-0")
        c.succeed("worker-1")
        c.succeed("chief-0")

    result = kube.launch(job, make_settings(kube), script)
    assert result.exit_codes == {"chief-0": 0, "worker-0": 0, "worker-1": 0}
    assert result.stopped == ["ps-0"]
    assert result.restarts == 0
    assert "[chief-0] epoch 1/1 loss=0.25" in kube.output
    assert set(seen["nodes"].values()) <= {node_name(i) for i in range(NODES)}
    assert seen["owners"] == dict.fromkeys(seen["nodes"], "Job")  # created by the real Job controller
    assert any("none remain" in line for line in kube.output)


def test_ttl_zero_the_real_ttl_controller_deletes_the_chiefs_job_and_it_still_counts_as_success(kube):
    """ttlSecondsAfterFinished 0: the TTL-after-finished controller deletes the chief's Job (and its pod) as
    soon as it is Complete; the launcher must not take that for a 'JobDeleted' failure."""
    def script(c: RealCluster) -> None:
        c.wait_pods("chief-0", "worker-0")
        c.succeed("worker-0")
        c.succeed("chief-0")

    result = kube.launch(make_job(ps=0, worker=1), make_settings(kube, ttl_seconds_after_finished=0), script)
    assert result.exit_codes["chief-0"] == 0


# -- restarts ----------------------------------------------------------------------------------------------------------
def test_mwms_oomkilled_worker_recreates_the_set_then_the_budget_runs_out(kube):
    """MultiWorkerMirroredStrategy: an OOMKilled worker (its peers exit 1 after it) recreates every worker;
    once max_restarts is used, the next one fails the job naming OOMKilled and the memory limit."""
    job = make_job(chief=0, worker=3, ps=0, max_restarts=1)

    def script(c: RealCluster) -> None:
        c.wait_pods("worker-0", "worker-1", "worker-2")
        c.oom("worker-1")
        c.fail("worker-0", 1, message="collective aborted: peer worker-1 unreachable")
        c.wait_pods("worker-0", "worker-1", "worker-2", attempt=1)
        c.oom("worker-2")

    with pytest.raises(RestartBudgetExhaustedError) as e:
        kube.launch(job, make_settings(kube), script)
    assert e.value.reason == "OOMKilled" and e.value.replica.label == "worker-2"
    assert "memory limit 128Mi after 1 restarts" in str(e.value)
    assert any("recreating worker-0, worker-1, worker-2 (restart 1 of max_restarts=1)" in line for line in kube.output)


def test_an_evicted_worker_is_recreated_without_using_the_restart_budget(kube):
    """The Eviction API (a node drain): the API server marks the pod DisruptionTarget (EvictionByEvictionAPI)
    and deletes it; the kubelet stops it (exit 143). A preemption, not the program's failure: with max_restarts=0
    the MWMS set is recreated all the same, counted as a preemption."""
    job = make_job(chief=0, worker=2, ps=0, max_restarts=0)

    def script(c: RealCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        pod = c.replica_pod("worker-1")["metadata"]["name"]
        c.core.create_namespaced_pod_eviction(pod, c.namespace, {"metadata": {"name": pod, "namespace": c.namespace}})
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.succeed("worker-0")

    result = kube.launch(job, make_settings(kube), script)
    assert (result.restarts, result.preemptions) == (0, 1)
    restart = next(line for line in kube.output if "preempted: recreating" in line)
    assert restart.startswith("[launcher] worker-1 failed") and "EvictionByEvictionAPI" in restart, restart
    assert restart.endswith("(preemption 1, not counted against max_restarts=0)")


def test_pss_ps_killed_recreates_the_chief_and_ps_not_the_workers(kube):
    """ParameterServerStrategy: a ps killed by a signal (exit 137) recreates the chief and the ps; the worker
    keeps running (attempt 0) and the job then succeeds with one restart used."""
    job = make_job(chief=1, worker=1, ps=1)

    def script(c: RealCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "ps-0")
        c.fail("ps-0", 137)
        c.wait_pods("chief-0", "ps-0", attempt=1)
        assert c.replica_pod("worker-0")["metadata"]["labels"]["tfk8s.dev/attempt"] == "0"
        c.succeed("chief-0")

    result = kube.launch(job, make_settings(kube), script)
    assert result.restarts == 1
    assert sorted(result.stopped) == ["ps-0", "worker-0"]


def test_permanent_exit_fails_at_once_with_the_termination_message(kube):
    """Exit code 2 is the program's own error: not retried; the last lines come from the kubelet's
    termination message (FallbackToLogsOnError) and the log served through pods/log."""
    job = make_job(chief=0, worker=1, ps=0)

    def script(c: RealCluster) -> None:
        c.wait_pods("worker-0")
        c.log("worker-0", "loading data", "ValueError: bad shard")
        c.wait_for(lambda: "[worker-0] ValueError: bad shard" in c.output, "the log line")
        c.fail("worker-0", 2, message="ValueError: bad shard")

    with pytest.raises(PermanentFailureError) as e:
        kube.launch(job, make_settings(kube), script)
    assert e.value.exit_code == 2 and e.value.reason == "Error"
    assert "ValueError: bad shard" in e.value.last_lines


# -- pending: image, scheduling, deadline ---------------------------------------------------------------------------
def test_unpullable_image_fails_fast_with_the_kubelets_message(kube):
    settings = make_settings(kube, replica_overrides='{"worker": {"image": "unpullable.invalid/tfk8s:nope"}}')
    t0 = time.monotonic()
    with pytest.raises(ImagePullError) as e:
        kube.launch(make_job(ps=0), settings)
    assert e.value.reason == "ErrImagePull"
    assert 'failed to pull and unpack image "unpullable.invalid/tfk8s:nope"' in str(e.value)
    assert time.monotonic() - t0 < 30  # not the 600 s schedule deadline


def test_node_selector_no_node_has_fails_at_the_schedule_deadline_with_the_real_schedulers_words(kube):
    settings = make_settings(kube, node_selector='{"pool": "gpu"}', schedule_timeout_s=4)
    with pytest.raises(ScheduleTimeoutError) as e:
        kube.launch(make_job(chief=0, worker=1, ps=0), settings)
    assert e.value.reason == "Unschedulable"  # the pod's PodScheduled condition, set by the scheduler
    assert f"0/{NODES} nodes are available: {NODES} node(s) didn't match Pod's node affinity/selector" in str(e.value)
    assert "schedule_timeout_s=4s" in str(e.value)


def test_a_bound_pod_whose_container_never_starts_fails_at_the_start_deadline(kube):
    """The real scheduler binds the pod; the kubelet keeps it ContainerCreating (a volume that cannot be
    mounted would): schedule_timeout_s after it was scheduled, the job fails naming the node."""
    kube.kubelet.hold = lambda pod: True
    with pytest.raises(ScheduleTimeoutError) as e:
        kube.launch(make_job(chief=0, worker=1, ps=0), make_settings(kube, schedule_timeout_s=3))
    assert e.value.reason == "ContainerCreating"
    assert "was scheduled on tfk8s-node-" in str(e.value) and "did not start within" in str(e.value)


def test_job_timeout_fails_the_step_and_the_jobs_carry_the_deadline(kube):
    seen: dict = {}

    def script(c: RealCluster) -> None:
        c.wait_pods("worker-0")
        seen["deadline"] = c.batch.read_namespaced_job(f"{JOB}-worker-0", c.namespace).spec.active_deadline_seconds

    with pytest.raises(JobTimeoutError, match="did not finish within its timeout of 5s"):
        kube.launch(make_job(chief=0, worker=1, ps=0, timeout_s=5), make_settings(kube), script)
    assert seen["deadline"] == 5


# -- the launcher's own end ---------------------------------------------------------------------------------------------
def test_sigterm_of_the_launcher_deletes_every_replica(kube):
    def script(c: RealCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(LauncherTerminatedError):
        kube.launch(make_job(), make_settings(kube), script)
    assert kube.remaining() == {}


def _launcher_pod(kube: RealCluster, name: str, monkeypatch, tmp_path) -> dict:
    """A real pod standing for the launcher (the fake kubelet runs it), named in the launcher's env."""
    pod = kube.core.create_namespaced_pod(kube.namespace, {"metadata": {"name": name}, "spec": {
        "containers": [{"name": "launcher", "image": "tfk8s:test"}], "restartPolicy": "Never"}})
    ns_file = tmp_path / "namespace"
    ns_file.write_text(kube.namespace)
    monkeypatch.setattr("tfk8s.launcher.kubernetes.settings.SERVICEACCOUNT_NAMESPACE_FILE", ns_file)
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_NAME", name)
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_UID", pod.metadata.uid)
    return kube.admin.sanitize_for_serialization(pod)


def _start_and_die(kube: RealCluster, job: TrainingJob, settings: KubernetesSettings) -> None:
    """A launcher that creates the job's objects and dies without cleaning up."""
    from tfk8s.launcher.kubernetes.api import KubeApi
    from tfk8s.launcher.kubernetes.creation import launch
    from tfk8s.launcher.kubernetes.state import KubeRun

    kube.jobs.add(job.name)
    kube.job_name = job.name
    run = KubeRun.new(job, settings, KubeApi(kube.launcher_client(), settings.namespace), kube._print)
    launch(run)
    for w in run.watchers:
        w.stop()


def test_deleting_the_launcher_pod_garbage_collects_every_replica(kube, monkeypatch, tmp_path):
    """A launcher that died without cleaning up: deleting its pod (the pipeline run deleted) makes the real
    garbage collector delete the Jobs, their pods, the Services and the NetworkPolicy."""
    _launcher_pod(kube, "launcher-1", monkeypatch, tmp_path)
    job = make_job()
    _start_and_die(kube, job, make_settings(kube))
    kube.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
    kube.core.delete_namespaced_pod("launcher-1", kube.namespace)
    kube.wait_for(lambda: kube.remaining() == {} and not kube.custom.list_namespaced_custom_object(
        "networking.k8s.io", "v1", kube.namespace, "networkpolicies")["items"], "the garbage collector", 60)


def test_a_restarted_launcher_reattaches_and_owns_the_replicas(kube, monkeypatch, tmp_path):
    """The first launcher dies; the second adopts its Jobs and Services (the same pods, no second set) and
    becomes their owner: deleting the dead launcher's pod no longer deletes them."""
    _launcher_pod(kube, "launcher-1", monkeypatch, tmp_path)
    job = make_job(ps=0)
    _start_and_die(kube, job, make_settings(kube))
    first = kube.wait_pods("chief-0", "worker-0", "worker-1")
    _launcher_pod(kube, "launcher-2", monkeypatch, tmp_path)

    def script(c: RealCluster) -> None:
        c.wait_for(lambda: any("re-attached Jobs now owned by launcher pod launcher-2" in x for x in c.output),
                   "the re-attach")
        c.core.delete_namespaced_pod("launcher-1", c.namespace)
        time.sleep(3)  # the garbage collector had time to act on the dead launcher's pod
        now = c.wait_pods("chief-0", "worker-0", "worker-1")
        assert {k: p["metadata"]["uid"] for k, p in now.items()} == {k: p["metadata"]["uid"]
                                                                      for k, p in first.items()}
        assert len(c.remaining()["services"]) == 3
        (policy,) = c.custom.list_namespaced_custom_object("networking.k8s.io", "v1", c.namespace,
                                                           "networkpolicies")["items"]
        assert [r["name"] for r in policy["metadata"]["ownerReferences"]] == ["launcher-2"]
        c.succeed("chief-0")

    result = kube.launch(job, make_settings(kube), script)
    assert result.restarts == 0 and result.exit_codes == {"chief-0": 0}
    assert any("re-attaching to 3 existing Jobs" in line for line in kube.output)
    kube.core.delete_namespaced_pod("launcher-2", kube.namespace)


# -- the shared volume --------------------------------------------------------------------------------------------------
def test_ensure_volume_against_real_claims_and_the_persistent_volume_binder(kube):
    """As the launcher's ServiceAccount: a missing claim fails with the fix; create_pvc creates a valid
    ReadWriteMany claim that the real PersistentVolume binder binds to a matching volume."""
    from tfk8s.launcher.kubernetes.api import KubeApi
    from tfk8s.launcher.kubernetes.errors import VolumeError
    from tfk8s.launcher.kubernetes.volume import ensure_pvc

    api = KubeApi(kube.launcher_client(), kube.namespace)
    with pytest.raises(VolumeError, match=f"PersistentVolumeClaim 'data' not found in namespace '{kube.namespace}'"):
        ensure_pvc(api, "data", log=lambda _: None)
    pv = f"pv-{kube.namespace}"
    kube.core.create_persistent_volume({"metadata": {"name": pv}, "spec": {
        "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteMany"], "persistentVolumeReclaimPolicy": "Retain",
        "hostPath": {"path": "/tmp/tfk8s-test-pv"}}})
    try:
        first = ensure_pvc(api, "data", create=True, size="1Gi", log=lambda _: None)
        assert first["created"] is True and first["access_modes"] == ["ReadWriteMany"]
        wait(lambda: kube.core.read_namespaced_persistent_volume_claim("data", kube.namespace).status.phase
             == "Bound", "the binder", 30)
        again = ensure_pvc(api, "data", create=True, size="1Gi", log=lambda _: None)
        assert again == {"name": "data", "namespace": kube.namespace, "created": False, "phase": "Bound",
                         "access_modes": ["ReadWriteMany"]}
        assert kube.core.read_persistent_volume(pv).spec.claim_ref.name == "data"
    finally:
        kube.core.delete_persistent_volume(pv)


def test_ensure_volume_refuses_a_real_terminating_claim(kube):
    """A claim deleted while a finalizer holds it (here a test's own; kubernetes.io/pvc-protection does the same
    while a pod uses it) is Terminating through the real API: ensure-volume refuses it, naming it and the fix."""
    from tfk8s.launcher.kubernetes.api import KubeApi
    from tfk8s.launcher.kubernetes.errors import VolumeError
    from tfk8s.launcher.kubernetes.objects import pvc_manifest
    from tfk8s.launcher.kubernetes.volume import ensure_pvc

    hold = "tfk8s.dev/test-hold"
    claim = pvc_manifest("old", kube.namespace, size="1Gi")
    claim["metadata"]["finalizers"] = [hold]
    kube.core.create_namespaced_persistent_volume_claim(kube.namespace, claim)
    kube.core.delete_namespaced_persistent_volume_claim("old", kube.namespace)
    try:
        wait(lambda: kube.core.read_namespaced_persistent_volume_claim("old", kube.namespace).metadata
             .deletion_timestamp, "the claim Terminating")
        with pytest.raises(VolumeError) as e:
            ensure_pvc(KubeApi(kube.launcher_client(), kube.namespace), "old", create=True, log=lambda _: None,
                       bind_timeout_s=1, poll_s=0.2)
        msg = str(e.value)
        assert f"PersistentVolumeClaim 'old' in namespace '{kube.namespace}' is being deleted (Terminating since" in msg
        assert hold in msg and "run again with create_pvc=true" in msg
    finally:
        kube.core.patch_namespaced_persistent_volume_claim("old", kube.namespace, [
            {"op": "remove", "path": "/metadata/finalizers"}])


# -- Kueue's API versions -------------------------------------------------------------------------------------------------
KUEUE = "kueue.x-k8s.io"


def _kueue_discovery(kube: RealCluster) -> set[str] | None:
    """The versions of kueue.x-k8s.io the real API server's discovery lists (None: no such group)."""
    from kubernetes.client.exceptions import ApiException

    try:
        resp = kube.admin.call_api(f"/apis/{KUEUE}", "GET", auth_settings=["BearerToken"],
                                   _return_http_data_only=True, _preload_content=False)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return {v["version"] for v in json.loads(resp.data).get("versions") or []}


@contextlib.contextmanager
def kueue_crds(kube: RealCluster, *versions: str):
    """Kueue's API without Kueue: CRDs of LocalQueues and Workloads served in ``versions`` (the first one stored;
    conversion ``None``: one object in every version, as Kueue's webhook gives for the fields the launcher reads),
    no status subresource (a test writes a queue's status with it). Deleted afterwards, waiting until the group
    is no longer discovered (they are cluster-wide; the next test may want other versions)."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(kube.admin)
    names = []
    for plural, kind in (("localqueues", "LocalQueue"), ("workloads", "Workload")):
        ext.create_custom_resource_definition({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{KUEUE}"},
            "spec": {"group": KUEUE, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                     "versions": [{"name": v, "served": True, "storage": i == 0, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
                         for i, v in enumerate(versions)]}}, _preload_content=False)
        names.append(f"{plural}.{KUEUE}")
    try:
        wait(lambda: _kueue_discovery(kube) == set(versions), f"{KUEUE} discovered in {versions}", 30)
        yield
    finally:
        for name in names:
            ext.delete_custom_resource_definition(name, _preload_content=False)
        wait(lambda: _kueue_discovery(kube) is None, f"{KUEUE} no longer discovered", 60)


@pytest.mark.parametrize(("served", "read"), [(("v1beta2", "v1beta1"), "v1beta2"), (("v1beta1",), "v1beta1")],
                         ids=["kueue-0.15-0.19", "kueue-before-0.15"])
def test_kueue_is_read_in_v1beta2_where_the_real_api_serves_it_else_v1beta1(kube, served, read):
    """Through the real API server's discovery and the launcher's Role: the version read is v1beta2 where served,
    else v1beta1 (with a warning); an inactive LocalQueue is refused before any Job, its reason quoted."""
    from tfk8s.launcher.kubernetes.api import KubeApi, kueue_version_of

    with kueue_crds(kube, *served):
        kube.custom.create_namespaced_custom_object(KUEUE, served[0], kube.namespace, "localqueues", {
            "apiVersion": f"{KUEUE}/{served[0]}", "kind": "LocalQueue", "metadata": {"name": "q"},
            "spec": {"clusterQueue": "gone"}, "status": {"conditions": [{
                "type": "Active", "status": "False", "reason": "ClusterQueueDoesNotExist",
                "message": "Can't submit new workloads to clusterQueue", "lastTransitionTime": "2026-12-06T05:00:00Z"}]}})
        assert kueue_version_of(KubeApi(kube.launcher_client(), kube.namespace).kueue_versions()) == read
        with pytest.raises(KueueQueueError) as e:
            kube.launch(make_job(chief=0, worker=1, ps=0), make_settings(kube, kueue_queue="q"))
    assert (f"LocalQueue q in namespace {kube.namespace} is inactive (ClusterQueueDoesNotExist: Can't submit new "
            f"workloads to clusterQueue)") in str(e.value)
    assert any("Kueue serves kueue.x-k8s.io/v1beta1, not v1beta2" in line for line in kube.output) == (
        read == "v1beta1")
    assert not kube.batch.list_namespaced_job(kube.namespace).items


def test_kueue_not_installed_and_kueue_in_a_version_tfk8s_does_not_read_fail_apart(kube):
    """No kueue.x-k8s.io at all: "Kueue is not installed". Only v1alpha1 served: the versions served and those
    tfk8s reads, not "not installed"."""
    assert _kueue_discovery(kube) is None
    with pytest.raises(KueueQueueError, match="Kueue is not installed"):
        kube.launch(make_job(chief=0, worker=1, ps=0), make_settings(kube, kueue_queue="q"))
    with kueue_crds(kube, "v1alpha1"), pytest.raises(KueueQueueError) as e:
        kube.launch(make_job(chief=0, worker=1, ps=0), make_settings(kube, kueue_queue="q"))
    assert "Kueue is not installed" not in str(e.value)
    assert "in version(s) v1alpha1 only, and tfk8s reads v1beta2 or v1beta1" in str(e.value)


# -- tenancy and scheduling ---------------------------------------------------------------------------------------------
def test_a_resource_quota_smaller_than_the_job_fails_fast_with_the_quotas_message(kube):
    """The real quota admission refuses the third replica's pod (1 CPU for 3 x 500m): the Job controller's
    FailedCreate event carries its words, and the job fails at once, not at the 600 s schedule deadline."""
    kube.core.create_namespaced_resource_quota(kube.namespace, {"metadata": {"name": "team"}, "spec": {
        "hard": {"requests.cpu": "1", "limits.cpu": "1"}}})
    wait(lambda: kube.core.read_namespaced_resource_quota("team", kube.namespace).status.hard, "the quota status")
    t0 = time.monotonic()
    with pytest.raises(QuotaExceededError) as e:
        kube.launch(make_job(chief=0, worker=3, ps=0), make_settings(kube, cpu="500m"))
    assert time.monotonic() - t0 < 60
    message = str(e.value)
    assert "exceeded quota: team" in message and "limited: limits.cpu=1,requests.cpu=1" in message, message
    assert "raise it (kubectl describe resourcequota" in message


def test_a_limit_range_maximum_below_our_cpu_fails_fast_naming_the_setting(kube):
    """The real LimitRanger admission (on by default in kube-apiserver) refuses every pod whose container asks
    more CPU than the namespace's LimitRange allows: the step fails at once, quoting it and naming ``cpu``."""
    kube.core.create_namespaced_limit_range(kube.namespace, {"metadata": {"name": "small"}, "spec": {
        "limits": [{"type": "Container", "max": {"cpu": "500m"}}]}})
    t0 = time.monotonic()
    with pytest.raises(AdmissionRefusedError) as e:
        kube.launch(make_job(chief=0, worker=1, ps=0), make_settings(kube, cpu="1"))
    assert time.monotonic() - t0 < 60
    message = str(e.value)
    assert e.value.reason == "LimitRangeRefused", message
    assert "maximum cpu usage per Container is 500m, but limit is 1" in message, message
    assert "cpu (the request) and cpu_limit" in message and "kubectl describe limitrange" in message


def test_four_workers_land_on_four_different_nodes_by_default(kube):
    """The default topology spread (kubernetes.io/hostname) with the real scheduler on 4 fake nodes."""
    job = make_job(chief=0, worker=4, ps=0)
    seen: dict = {}

    def script(c: RealCluster) -> None:
        pods = c.wait_pods("worker-0", "worker-1", "worker-2", "worker-3")
        seen["nodes"] = {label: p["spec"]["nodeName"] for label, p in pods.items()}
        seen["spread"] = pods["worker-0"]["spec"]["topologySpreadConstraints"]
        c.succeed("worker-0")

    kube.launch(job, make_settings(kube), script)
    assert len(set(seen["nodes"].values())) == 4, seen["nodes"]
    assert seen["spread"][0]["topologyKey"] == "kubernetes.io/hostname"


def test_required_spread_keeps_the_ps_off_the_workers_nodes(kube):
    """spread=required: a chief, 2 workers and a ps on 4 nodes: every replica on its own node (the chief and
    workers by their spread constraint, the ps by its required anti-affinity to them)."""
    job = make_job(chief=1, worker=2, ps=1)
    seen: dict = {}

    def script(c: RealCluster) -> None:
        pods = c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        seen["nodes"] = {label: p["spec"]["nodeName"] for label, p in pods.items()}
        c.succeed("chief-0")

    kube.launch(job, make_settings(kube, spread="required"), script)
    assert len(set(seen["nodes"].values())) == 4, seen["nodes"]


def test_native_gang_with_too_few_nodes_starts_nothing_and_fails_at_the_schedule_deadline(kube):
    """gang=native: a PodGroup with minCount 5; 5 workers of 3 CPUs fit on only 4 nodes of 4 CPUs, so the
    real scheduler's GangScheduling plugin binds none, and the schedule deadline fails the job with its
    words. Without the gang, 4 would start and hold their nodes."""
    job = make_job(chief=0, worker=5, ps=0)
    seen: dict = {"bound": set()}

    def script(c: RealCluster) -> None:
        groups = c.wait_for(lambda: c.custom.list_namespaced_custom_object(
            "scheduling.k8s.io", "v1beta1", c.namespace, "podgroups")["items"], "the PodGroup")
        seen["group"] = groups[0]
        c.wait_pods(*(f"worker-{i}" for i in range(5)), running=False)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            seen["bound"] |= {p["metadata"]["name"] for p in c.pods() if p["spec"].get("nodeName")}
            time.sleep(0.3)

    settings = make_settings(kube, cpu="3", gang="native", schedule_timeout_s=8)
    with pytest.raises(ScheduleTimeoutError) as e:
        kube.launch(job, settings, script)
    assert seen["group"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 5}}
    assert seen["bound"] == set()
    assert e.value.reason == "Unschedulable"
    assert "pod group is unschedulable, minCount (5) cannot be satisfied: 4 scheduled" in str(e.value), str(e.value)
    assert not kube.custom.list_namespaced_custom_object("scheduling.k8s.io", "v1beta1", kube.namespace,
                                                         "podgroups")["items"]


def test_native_gang_that_fits_starts_every_replica(kube):
    job = make_job(chief=1, worker=2, ps=1)

    def script(c: RealCluster) -> None:
        pods = c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods.values()} == {JOB}
        c.succeed("chief-0")

    result = kube.launch(job, make_settings(kube, gang="native"), script)
    assert result.exit_codes == {"chief-0": 0}


def _matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def test_the_network_policy_admits_only_the_jobs_pods_selects_every_replica_and_goes_with_the_job(kube):
    """As the API server stored it: every port between the job's own pods (NCCL's ports too), the gRPC port only
    from the user's peers. And the pods the Job controller made: gpus 0, so NVIDIA_VISIBLE_DEVICES=void."""
    peer = {"podSelector": {"matchLabels": {"app": "tensorboard"}}}
    job = make_job(evaluator=1)
    seen: dict = {}

    def script(c: RealCluster) -> None:
        pods = c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0", "evaluator-0")
        seen["policies"] = c.custom.list_namespaced_custom_object("networking.k8s.io", "v1", c.namespace,
                                                                  "networkpolicies")["items"]
        seen["labels"] = [p["metadata"]["labels"] for p in pods.values()]
        seen["gpu_env"] = {label: [e for e in p["spec"]["containers"][0]["env"]
                                   if e["name"] == "NVIDIA_VISIBLE_DEVICES"] for label, p in pods.items()}
        c.succeed("chief-0")

    kube.launch(job, make_settings(kube, network_policy_from=(peer,)), script)
    (policy,) = seen["policies"]
    spec = policy["spec"]
    assert all(_matches(spec["podSelector"], labels) for labels in seen["labels"])
    assert spec["policyTypes"] == ["Ingress"]
    own, users = spec["ingress"]
    assert own == {"from": [{"podSelector": {"matchLabels": {"tfk8s.dev/job-name": JOB}}}]}  # no ports: all
    assert users == {"from": [peer], "ports": [{"protocol": "TCP", "port": 2222}]}
    assert set(seen["gpu_env"]) == {"chief-0", "worker-0", "worker-1", "ps-0", "evaluator-0"}
    assert all(env == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}] for env in seen["gpu_env"].values())
    assert not kube.custom.list_namespaced_custom_object("networking.k8s.io", "v1", kube.namespace,
                                                         "networkpolicies")["items"]


# -- RBAC and validation --------------------------------------------------------------------------------------------------
def test_a_role_without_one_verb_gets_the_real_403_and_the_fix(kube):
    """The Role of manifests/rbac.yaml less ``create`` on jobs: the real authorizer's 403, with the fix."""
    role = next(d for d in kube.rbac_documents() if d["kind"] == "Role")
    for rule in role["rules"]:
        if rule["resources"] == ["jobs"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
    kube.rbac.patch_namespaced_role("tfk8s-launcher", kube.namespace, [
        {"op": "replace", "path": "/rules", "value": role["rules"]}])
    with pytest.raises(KubernetesApiError) as e:
        kube.launch(make_job(chief=0, worker=1, ps=0), make_settings(kube))
    message = str(e.value)
    assert e.value.status == 403
    assert (f'User "system:serviceaccount:{kube.namespace}:tfk8s-launcher" cannot create resource "jobs" in API '
            f'group "batch" in the namespace "{kube.namespace}"') in message
    assert "apply manifests/rbac.yaml" in message


def test_every_manifest_passes_strict_server_side_validation(kube):
    """Every kind the launcher creates, with every option on (ps, evaluator, PVC, selector, tolerations,
    spread, gang, network policy, Kueue label, limits, /dev/shm of a GPU worker and of a ps, the user's labels,
    annotations and priority class over the autoscaler defaults), through the real
    API server with dryRun=All and fieldValidation=Strict, as the launcher's ServiceAccount; an unknown field is
    refused (Strict is on)."""
    from kubernetes.client.exceptions import ApiException

    from tfk8s.launcher.kubernetes.objects import render_manifests

    settings = make_settings(kube, node_selector='{"pool": "cpu"}', gang="native", spread="required",
                             network_policy_from=({"namespaceSelector": {"matchLabels": {"team": "ml"}}},),
                             pvc_name="data", kueue_queue="q", priority_class_name="training",
                             labels={"team.example.com/cost-center": "ml"},
                             annotations={"kueue.x-k8s.io/podset-preferred-topology": "cloud.provider.com/rack"},
                             replica_overrides=(
                                 '{"ps": {"cpu": "500m", "memory_limit": "1Gi", "shm_size": "64Mi", '
                                 '"labels": {"team.example.com/tier": "ps"}, "priority_class_name": "ps-high", '
                                 '"annotations": {"karpenter.sh/do-not-disrupt": null}}, '
                                 '"worker": {"gpus": 1, '
                                 '"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", '
                                 '"effect": "NoSchedule"}], "env": {"A": "1"}}}'))
    manifests = render_manifests(make_job(evaluator=1, timeout_s=60), settings)
    assert {m["kind"] for m in manifests} == {"NetworkPolicy", "PodGroup", "Service", "Job"}
    from kubernetes import client

    api = kube.launcher_client()
    creators = {"Service": lambda b, **kw: client.CoreV1Api(api).create_namespaced_service(kube.namespace, b, **kw),
                "Job": lambda b, **kw: client.BatchV1Api(api).create_namespaced_job(kube.namespace, b, **kw),
                "NetworkPolicy": lambda b, **kw: client.NetworkingV1Api(api).create_namespaced_network_policy(
                    kube.namespace, b, **kw),
                "PodGroup": lambda b, **kw: client.CustomObjectsApi(api).create_namespaced_custom_object(
                    "scheduling.k8s.io", "v1beta1", kube.namespace, "podgroups", b, **kw)}
    for m in manifests:
        creators[m["kind"]](m, dry_run="All", field_validation="Strict")
    bad = dict(manifests[-1], spec={**manifests[-1]["spec"], "backofLimit": 1})
    with pytest.raises(ApiException) as e:
        creators["Job"](bad, dry_run="All", field_validation="Strict")
    assert e.value.status == 400
    assert "strict decoding error: unknown field" in e.value.body and "spec.backofLimit" in e.value.body
