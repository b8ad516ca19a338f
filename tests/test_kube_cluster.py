"""The Kubernetes backend against a real control plane (``make test-cluster``): etcd, kube-apiserver with RBAC,
the controller manager's Job, TTL, garbage-collector and quota controllers, the real scheduler, KWOK's fake
nodes and the fake kubelet (:mod:`tests.cluster_fixtures`).

The launcher runs as the ``tfk8s-launcher`` ServiceAccount of ``manifests/rbac.yaml`` (a bound token), so the
real authorizer judges every request; every object is created with ``fieldValidation=Strict``. After every
test, zero Jobs, pods and Services of the job remain (listed through the API).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

import pytest

pytest.register_assert_rewrite("tests.cluster_fixtures")

from tests.cluster_fixtures import NODES, RealCluster, node_name, wait
from tfk8s.cluster import ReplicaCounts
from tfk8s.kube.errors import (
    ImagePullError,
    KubernetesApiError,
    LauncherTerminatedError,
    PermanentFailureError,
    QuotaExceededError,
    RestartBudgetExhaustedError,
    ScheduleTimeoutError,
)
from tfk8s.kube.settings import KubernetesSettings
from tfk8s.launcher import JobTimeoutError, TrainingJob

pytest_plugins = ["tests.cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

JOB = "tfk8s-run-7"
COMMAND = ("python", "-m", "trainer.task")


def make_job(chief: int = 1, worker: int = 2, ps: int = 1, evaluator: int = 0, **kw) -> TrainingJob:
    kw.setdefault("grace_period_s", 0.5)
    return TrainingJob(JOB, ReplicaCounts(chief=chief, worker=worker, ps=ps, evaluator=evaluator), COMMAND, **kw)


def make_settings(kube: RealCluster, **fields) -> KubernetesSettings:
    params = {k: fields.pop(k) for k in list(fields) if k in ("max_restarts", "schedule_timeout_s", "image",
                                                              "node_selector", "cpu", "memory",
                                                              "replica_overrides")}
    params.setdefault("cpu", "100m")
    params.setdefault("memory", "128Mi")
    base = KubernetesSettings.from_params(namespace=kube.namespace, image=params.pop("image", "tfk8s:test"),
                                          **params)
    fields.setdefault("group_settle_s", 2.0)
    return dataclasses.replace(base, log_wait_s=2.0, cleanup_timeout_s=60, create_retry_s=30,
                               stop_grace_period_s=1, **fields)


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


# -- restarts ----------------------------------------------------------------------------------------------------------
def test_mwms_oomkilled_worker_recreates_the_set_then_the_budget_runs_out(kube):
    """MultiWorkerMirroredStrategy: an OOMKilled worker (its peers exit 1 after it) recreates every worker;
    once max_restarts is used, the next one fails the job naming OOMKilled and the memory limit."""
    job = make_job(chief=0, worker=3, ps=0)

    def script(c: RealCluster) -> None:
        c.wait_pods("worker-0", "worker-1", "worker-2")
        c.oom("worker-1")
        c.fail("worker-0", 1, message="collective aborted: peer worker-1 unreachable")
        c.wait_pods("worker-0", "worker-1", "worker-2", attempt=1)
        c.oom("worker-2")

    with pytest.raises(RestartBudgetExhaustedError) as e:
        kube.launch(job, make_settings(kube, max_restarts=1), script)
    assert e.value.reason == "OOMKilled" and e.value.replica.label == "worker-2"
    assert "memory limit 128Mi after 1 restarts" in str(e.value)
    assert any("recreating worker-0, worker-1, worker-2 (restart 1 of 1)" in line for line in kube.output)


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
        kube.launch(job, make_settings(kube, max_restarts=3), script)
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
    monkeypatch.setattr("tfk8s.kube.settings.SERVICEACCOUNT_NAMESPACE_FILE", ns_file)
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_NAME", name)
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_UID", pod.metadata.uid)
    return kube.admin.sanitize_for_serialization(pod)


def _start_and_die(kube: RealCluster, job: TrainingJob, settings: KubernetesSettings) -> None:
    """A launcher that creates the job's objects and dies without cleaning up."""
    from tfk8s.kube.api import KubeApi
    from tfk8s.kube.backend import KubernetesBackend

    kube.jobs.add(job.name)
    kube.job_name = job.name
    backend = KubernetesBackend(job, settings, KubeApi(kube.launcher_client(), settings.namespace), kube._print)
    backend._launch()
    for w in backend._watchers:
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
        c.succeed("chief-0")

    result = kube.launch(job, make_settings(kube), script)
    assert result.restarts == 0 and result.exit_codes == {"chief-0": 0}
    assert any("re-attaching to 3 existing Jobs" in line for line in kube.output)
    kube.core.delete_namespaced_pod("launcher-2", kube.namespace)
