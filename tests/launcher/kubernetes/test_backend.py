"""The Kubernetes backend against a fake API server (kmock): the launcher runs in the test's main thread, a
script thread plays the Job controller and kubelet (:mod:`tests.fakes.kube_fixtures`).

After every test: zero Jobs, pods and Services remain, and every request the launcher made is granted by
``manifests/rbac.yaml``'s Role.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time

import pytest

pytest.register_assert_rewrite("tests.fakes.kube_fixtures")

from kmock._internal import enums

from tests.fakes.kube_fixtures import NAMESPACE, FakeCluster
from tfk8s.core.cluster import Replica, ReplicaCounts, ReplicaType
from tfk8s.core.errors import JobTimeoutError, ReplicaFailedError
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.kubernetes.api import NON_RESOURCE_CALLS, ApiCall, required_rules
from tfk8s.launcher.kubernetes.errors import (
    AdmissionRefusedError,
    ContainerConfigError,
    ImagePullError,
    KubernetesApiError,
    LauncherTerminatedError,
    PermanentFailureError,
    QuotaExceededError,
    RestartBudgetExhaustedError,
    ScheduleTimeoutError,
)
from tfk8s.launcher.kubernetes.objects import job_manifest, render_manifests, service_manifest
from tfk8s.launcher.kubernetes.settings import KubernetesSettings

pytest_plugins = ["tests.fakes.kube_fixtures"]
pytestmark = pytest.mark.timeout(60)

JOB = "tfk8s-run-7"
COMMAND = ("python", "-m", "trainer.task")
_VERBS = {enums.action.WATCH: "watch", enums.action.LIST: "list", enums.action.FETCH: "get",
          enums.action.CREATE: "create", enums.action.UPDATE: "patch", enums.action.DELETE: "delete"}


@pytest.fixture(autouse=True)
def _outside_a_pod(monkeypatch, tmp_path):
    """No launcher pod in the environment unless a test says so."""
    monkeypatch.delenv("TFK8S_LAUNCHER_POD_NAME", raising=False)
    monkeypatch.delenv("TFK8S_LAUNCHER_POD_UID", raising=False)
    monkeypatch.setattr("tfk8s.launcher.kubernetes.settings.SERVICEACCOUNT_NAMESPACE_FILE", tmp_path / "no-namespace")


@pytest.fixture(autouse=True)
def _nothing_left_and_every_call_granted(cluster: FakeCluster):
    yield
    assert cluster.remaining() == {}
    granted = {ApiCall(g, r, v) for (g, r), verbs in required_rules().items() for v in verbs}
    for request in cluster.requests():
        if request.resource.plural is None:  # a discovery document: every authenticated user may read it
            assert request.method.value == "GET" and request.url.path in NON_RESOURCE_CALLS.values(), request.url
            continue
        resource = request.resource.plural + (f"/{request.subresource}" if request.subresource else "")
        call = ApiCall(request.resource.group, resource, _VERBS[request.action])
        assert call in granted, f"{request.method.value} {request.url} needs {call}, not in manifests/rbac.yaml"


def make_job(chief: int = 1, worker: int = 2, ps: int = 1, **kw) -> TrainingJob:
    kw.setdefault("grace_period_s", 0.2)
    kw.setdefault("stop_grace_s", 0)  # the pods' terminationGracePeriodSeconds and the deletes' grace
    return TrainingJob(JOB, ReplicaCounts(chief=chief, worker=worker, ps=ps), COMMAND, **kw)


def make_settings(**fields) -> KubernetesSettings:
    params = {k: fields.pop(k) for k in list(fields) if k in ("schedule_timeout_s",)}
    base = KubernetesSettings.from_params(namespace=NAMESPACE, image="img:1", **params)
    fields.setdefault("group_settle_s", 1.0)  # a group's permanent failure waits this long for its peers
    fields.setdefault("cleanup_timeout_s", 5)
    return dataclasses.replace(base, log_wait_s=2.0, create_retry_s=2, **fields)


def name(label: str) -> str:
    return f"{JOB}-{label}"


def job_object(c: FakeCluster, label: str) -> dict:
    return next(j for j in c.objects("jobs") if j["metadata"]["name"] == name(label))


# -- objects and success ------------------------------------------------------------------------------------------------
def test_creates_a_service_and_a_job_per_replica_with_tf_config_and_owner(cluster, monkeypatch, tmp_path):
    ns_file = tmp_path / "namespace"
    ns_file.write_text(NAMESPACE)
    monkeypatch.setattr("tfk8s.launcher.kubernetes.settings.SERVICEACCOUNT_NAMESPACE_FILE", ns_file)
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_NAME", "launcher-pod")
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_UID", "uid-1")
    job, settings = make_job(), make_settings()
    seen: dict[str, list[dict]] = {}

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        seen.update(jobs=c.objects("jobs"), services=c.objects("services"), pods=c.objects("pods"))
        c.run()
        c.succeed("chief-0")

    result = cluster.launch(job, settings, script)
    expected = {(m["kind"], m["metadata"]["name"]): m for m in render_manifests(job, settings)
                if m["kind"] in ("Job", "Service")}
    created = {(o["kind"], o["metadata"]["name"]): o for o in seen["jobs"] + seen["services"]}
    assert sorted(created) == sorted(expected)
    for key, obj in created.items():
        assert obj["spec"] == expected[key]["spec"]
        assert obj["metadata"]["labels"] == expected[key]["metadata"]["labels"]
        assert obj["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Pod", "name": "launcher-pod", "uid": "uid-1"}]
    tf_config = json.loads(next(e["value"] for e in created["Job", name("worker-1")]["spec"]["template"]["spec"]
                                ["containers"][0]["env"] if e["name"] == "TF_CONFIG"))
    assert tf_config == {"cluster": {"chief": [f"{name('chief-0')}.{NAMESPACE}.svc:2222"],
                                     "worker": [f"{name('worker-0')}.{NAMESPACE}.svc:2222",
                                                f"{name('worker-1')}.{NAMESPACE}.svc:2222"],
                                     "ps": [f"{name('ps-0')}.{NAMESPACE}.svc:2222"]},
                         "task": {"type": "worker", "index": 1}, "environment": "cloud"}
    assert result.cluster_spec == tf_config["cluster"]
    assert {p["metadata"]["labels"]["tfk8s.dev/replica-type"] for p in seen["pods"]} == {"chief", "worker", "ps"}


def test_ps_and_a_lagging_worker_are_stopped_when_the_chief_succeeds(cluster):
    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        c.run()
        c.log("chief-0", "epoch 1/1 loss=0.25", "saved model")
        c.log("worker-1", "still training")
        c.wait_for(lambda: "[worker-1] still training" in c.output, "worker-1's log line")
        c.succeed("worker-0")
        c.succeed("chief-0")

    t0 = time.monotonic()
    result = cluster.launch(make_job(grace_period_s=0.3), make_settings(), script)
    assert result.exit_codes == {"chief-0": 0, "worker-0": 0}
    assert result.stopped == ["worker-1", "ps-0"]
    assert result.restarts == 0 and result.job_name == JOB
    assert 0.3 <= time.monotonic() - t0 < 10
    assert "[chief-0] epoch 1/1 loss=0.25" in cluster.output
    assert "[worker-1] still training" in cluster.output
    assert "[launcher] stopping the remaining replicas: worker-1, ps-0" in cluster.output
    assert f"[launcher] deleted the Jobs, Services and pods of {JOB}; none remain" in cluster.output


# -- failures ------------------------------------------------------------------------------------------------------------
def test_permanent_failure_fails_at_once_with_its_last_lines_and_events(cluster):
    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1")
        c.run("chief-0", "worker-0")
        c.log("worker-1", "Traceback (most recent call last):", "ValueError: bad shard 3")
        c.add_event("Pod", c.replica_pod("worker-1")["metadata"]["name"], "BackOff", "container exited")
        c.fail("worker-1", 1)

    with pytest.raises(PermanentFailureError) as e:
        cluster.launch(make_job(ps=0), make_settings(), script)
    err = e.value
    assert isinstance(err, ReplicaFailedError)
    assert (err.replica, err.reason, err.exit_code) == (Replica(ReplicaType.WORKER, 1), "Error", 1)
    assert err.last_lines == ["Traceback (most recent call last):", "ValueError: bad shard 3"]
    assert str(err).startswith("replica worker-1 failed with exit code 1: Error (the training program of worker-1 "
                               "exited with an error (exit codes 1-127 are not retried)")
    assert "  ValueError: bad shard 3" in str(err)
    assert any("event Warning BackOff Pod/" in line and "container exited" in line for line in cluster.output)
    assert cluster.count("POST", "jobs") == 3  # not recreated


def test_retryable_failure_recreates_only_that_replica_under_parameter_server_strategy(cluster):
    recreated: dict = {}

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        c.run()
        c.fail("worker-1", 137)  # SIGKILL
        c.wait_pods("worker-1", attempt=1)
        c.wait_deleted("worker-1", 0)
        recreated["job"] = job_object(c, "worker-1")
        recreated["attempts"] = {p["metadata"]["labels"]["tfk8s.dev/replica-type"] + "-"
                                 + p["metadata"]["labels"]["tfk8s.dev/replica-index"]:
                                 p["metadata"]["labels"]["tfk8s.dev/attempt"] for p in c.objects("pods")}
        c.run("worker-1")
        c.succeed("chief-0")

    result = cluster.launch(make_job(), make_settings(), script)
    assert result.restarts == 1
    assert recreated["attempts"] == {"chief-0": "0", "worker-0": "0", "worker-1": "1", "ps-0": "0"}
    assert recreated["job"]["metadata"]["labels"]["tfk8s.dev/attempt"] == "1"
    assert recreated["job"]["metadata"]["annotations"]["tfk8s.dev/restarts"] == "1"
    assert cluster.count("POST", "jobs") == 5
    assert any("worker-1 failed with exit code 137: Signal (killed by SIGKILL); retryable: recreating worker-1 "
               "(restart 1 of max_restarts=3)" in line for line in cluster.output)


@pytest.mark.parametrize(("disrupt", "reason", "note"), [
    ("evict", "Evicted", ("preempted: recreating worker-0, worker-1, worker-2 (preemption 1, not counted against "
                         "max_restarts=3)")),
    ("preempt", "PreemptionByScheduler", ("preempted: recreating worker-0, worker-1, worker-2 (preemption 1, not "
                                         "counted against max_restarts=3)")),
    ("delete_pod", "PodDeleted", "retryable: recreating worker-0, worker-1, worker-2 (restart 1 of max_restarts=3)"),
    ("oom", "OOMKilled", "retryable: recreating worker-0, worker-1, worker-2 (restart 1 of max_restarts=3)")])
def test_disruptions_recreate_the_whole_worker_set_under_multi_worker_mirrored_strategy(cluster, disrupt, reason,
                                                                                         note):
    """One recreation of the set; a preemption (evicted, preempted by the scheduler) is not counted against
    max_restarts, a program failure or a pod deleted by someone is."""
    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1", "worker-2")
        c.run()
        getattr(c, disrupt)("worker-2")
        c.wait_pods("worker-0", "worker-1", "worker-2", attempt=1)
        c.run()
        c.succeed("worker-0")

    result = cluster.launch(make_job(chief=0, worker=3, ps=0), make_settings(), script)
    assert result.restarts + result.preemptions == 1 and result.preemptions == ("preempted" in note)
    assert result.exit_codes == {"worker-0": 0}
    assert cluster.count("POST", "jobs") == 6
    assert any("worker-2 failed" in line and f": {reason}" in line and note in line for line in cluster.output)


def test_restart_budget_exhausted_fails_naming_oomkilled(cluster):
    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        c.oom("worker-1")
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.log("worker-1", "allocating 3GiB")
        c.oom("worker-1")

    with pytest.raises(RestartBudgetExhaustedError) as e:
        cluster.launch(make_job(chief=0, ps=0, max_restarts=1), make_settings(), script)
    err = e.value
    assert (err.replica, err.reason, err.exit_code) == (Replica(ReplicaType.WORKER, 1), "OOMKilled", 137)
    assert "ran out of its memory limit 2Gi after 1 restarts: raise memory" in str(err)
    assert err.last_lines == ["allocating 3GiB"]
    assert cluster.count("POST", "jobs") == 4


@pytest.mark.parametrize(("reason", "message", "error"), [
    ("ImagePullBackOff", 'Back-off pulling image "img:1": not found', ImagePullError),
    ("ErrImagePull", 'failed to pull image "img:1": unauthorized', ImagePullError),
    ("CreateContainerConfigError", 'secret "wandb" not found', ContainerConfigError),
])
def test_image_pull_and_container_config_errors_fail_fast_with_the_kubelets_message(cluster, reason, message,
                                                                                   error):
    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1")
        c.run("chief-0", "worker-1")
        c.waiting("worker-0", reason, message)

    t0 = time.monotonic()
    with pytest.raises(error) as e:
        cluster.launch(make_job(ps=0), make_settings(schedule_timeout_s=600), script)
    assert time.monotonic() - t0 < 10  # not the schedule deadline
    assert (e.value.replica, e.value.reason, e.value.exit_code) == (Replica(ReplicaType.WORKER, 0), reason, None)
    assert message in str(e.value)
    assert cluster.count("POST", "jobs") == 3


def test_an_unschedulable_replica_fails_at_the_schedule_deadline_with_the_schedulers_message(cluster):
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1")
        c.run("chief-0", "worker-0")
        c.unschedulable("worker-1", message)

    t0 = time.monotonic()
    with pytest.raises(ScheduleTimeoutError) as e:
        cluster.launch(make_job(ps=0), make_settings(schedule_timeout_s=0.5), script)
    assert 0.5 <= time.monotonic() - t0 < 10
    assert (e.value.replica, e.value.reason) == (Replica(ReplicaType.WORKER, 1), "Unschedulable")
    assert f"({message}; not scheduled within schedule_timeout_s=0.5s" in str(e.value)
    assert any(f"event Warning FailedScheduling Pod/{name('worker-1')}" in line for line in cluster.output)


def test_exceeded_quota_fails_fast_with_the_job_controllers_message(cluster):
    """The quota admission refuses the ps's pod: the Job controller's FailedCreate event says so, and the job
    fails within seconds (tests/realcluster/test_backend.py shows it with the real quota admission)."""
    quota = (f'pods "{name("ps-0")}-x" is forbidden: exceeded quota: team-quota, requested: cpu=1, used: cpu=8, '
             f'limited: cpu=8')
    cluster.deny_pods(name("ps-0"), quota)

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1")
        c.run()

    t0 = time.monotonic()
    with pytest.raises(QuotaExceededError) as e:
        cluster.launch(make_job(), make_settings(), script)
    assert time.monotonic() - t0 < 20  # not the 600 s schedule deadline
    assert (e.value.replica, e.value.reason) == (Replica(ReplicaType.PS, 0), "QuotaExceeded")
    assert quota in str(e.value) and "ResourceQuota is smaller than the job" in str(e.value)


REFUSALS = {
    "LimitRangeRefused": ('pods "{pod}" is forbidden: maximum cpu usage per Container is 500m, but limit is 1',
                          "cpu (the request) and cpu_limit"),
    "PodSecurityRefused": (('pods "{pod}" is forbidden: violates PodSecurity "restricted:latest": '
                            'runAsNonRoot != true (pod or container "tensorflow" must set '
                            'securityContext.runAsNonRoot=true)'), "securityContext"),
    "WebhookDenied": (('admission webhook "validation.gatekeeper.sh" denied the request: [must-have-team] you '
                       'must provide labels: {{"team"}}'), "validation.gatekeeper.sh"),
    "InvalidPodSpec": (('Pod "{pod}" is invalid: spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid '
                        'value: "1": must be equal to request'), "the API server rejected the pod spec"),
}


@pytest.mark.parametrize("reason", sorted(REFUSALS))
def test_an_admission_refusal_fails_fast_quoting_it_and_naming_our_setting(cluster, reason):
    """A LimitRange, Pod Security admission, a policy webhook's denial or an invalid spec refuses the ps's pod:
    the Job controller's FailedCreate event says so, and the step fails within seconds, not at the 600 s
    schedule deadline (tests/realcluster/test_backend.py: the real LimitRanger)."""
    template, ours = REFUSALS[reason]
    message = template.format(pod=f'{name("ps-0")}-x')
    cluster.deny_pods(name("ps-0"), message)

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1")
        c.run()

    t0 = time.monotonic()
    with pytest.raises(AdmissionRefusedError) as e:
        cluster.launch(make_job(), make_settings(), script)
    assert time.monotonic() - t0 < 20
    assert (e.value.replica, e.value.reason) == (Replica(ReplicaType.PS, 0), reason)
    assert message in str(e.value) and ours in str(e.value) and "ps-0" in str(e.value)


def test_a_webhook_that_timed_out_keeps_waiting_until_the_schedule_deadline(cluster):
    """``failed calling webhook ... context deadline exceeded``: the policy engine was slow, not a refusal;
    the Job controller retries, so the launcher waits (here the 3 s schedule deadline, not at once)."""
    cluster.deny_pods(name("ps-0"), 'Internal error occurred: failed calling webhook "validate.kyverno.svc": '
                                    'Post "https://kyverno-svc.kyverno.svc:443/validate": context deadline exceeded')

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1")
        c.run()

    t0 = time.monotonic()
    with pytest.raises(ScheduleTimeoutError) as e:
        cluster.launch(make_job(), make_settings(schedule_timeout_s=5), script)
    assert time.monotonic() - t0 >= 5
    assert e.value.replica == Replica(ReplicaType.PS, 0)


def test_the_job_timeout_fails_the_step(cluster):
    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        c.run()

    with pytest.raises(JobTimeoutError) as e:
        cluster.launch(make_job(timeout_s=0.5), make_settings(), script)
    assert str(e.value).startswith(f"{JOB} did not finish within its timeout of 0.5s; still running: "
                                   f"['chief-0', 'worker-0', 'worker-1', 'ps-0']. Raise timeout_s")
    assert all(r.data["spec"]["activeDeadlineSeconds"] == 1 for r in cluster.requests()
               if r.resource is not None and r.resource.plural == "jobs" and r.method.value == "POST")


def test_a_forbidden_call_says_how_to_grant_it(cluster):
    cluster.server.forbidden.add(("POST", "jobs"))
    with pytest.raises(KubernetesApiError) as e:
        cluster.launch(make_job(), make_settings())
    assert e.value.status == 403
    assert f"kubectl apply -n {NAMESPACE} -f manifests/rbac.yaml" in str(e.value)


# -- re-attach, SIGTERM, watch ------------------------------------------------------------------------------------------
def test_a_restarted_launcher_reattaches_to_its_replicas_instead_of_creating_a_second_set(cluster):
    job, settings = make_job(grace_period_s=0.2), make_settings()

    # What the previous launcher left: every Job (worker-1 already recreated once), all Services but ps-0's.
    for replica in job.counts.replicas():
        if replica != Replica(ReplicaType.PS, 0):
            cluster.create(service_manifest(job, replica, settings))
        attempt = 1 if replica == Replica(ReplicaType.WORKER, 1) else 0
        cluster.create(job_manifest(job, replica, settings, attempt=attempt, restarts=attempt))
    cluster.run()
    pods_before = sorted(p["metadata"]["name"] for p in cluster.objects("pods"))

    def script(c: FakeCluster) -> None:
        c.wait_for(lambda: any("re-attaching" in line for line in c.output), "the launcher to re-attach")
        c.wait_for(lambda: c.count("GET", "pods", watch=True), "the pods watch")
        c.succeed("chief-0")

    result = cluster.launch(job, settings, script)
    assert cluster.count("POST", "jobs") == 0
    assert cluster.count("POST", "services") == 4  # 3 already existed (409), ps-0's was missing
    assert result.restarts == 1  # the budget used by the previous launcher
    assert result.stopped == ["worker-0", "worker-1", "ps-0"]
    assert "[launcher] re-attaching to 4 existing Jobs of tfk8s-run-7 in namespace tfk8s-test (restarts used so far: " \
           "1 of 3)" in cluster.output
    assert len(pods_before) == 4


def test_sigterm_of_the_launcher_deletes_every_replica(cluster):
    previous = signal.getsignal(signal.SIGTERM)

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        c.run()
        c.log("worker-0", "step 100")
        c.wait_for(lambda: "[worker-0] step 100" in c.output, "the log line")
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(LauncherTerminatedError, match="the launcher got SIGTERM"):
        cluster.launch(make_job(), make_settings(), script)
    assert cluster.count("DELETE", "pods") == 4
    # for REPEAT_WINDOW_S a repeated stop signal (a parent passing the same Ctrl-C on) is noted and ignored, then
    # the previous handler acts again
    assert signal.getsignal(signal.SIGTERM) != previous
    os.kill(os.getpid(), signal.SIGTERM)
    assert cluster.output[-1] == f"[launcher] got SIGTERM again: {JOB} was already stopped"


def test_outside_the_main_thread_the_launcher_still_cleans_up_on_errors(cluster):
    outcome: list[BaseException] = []

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        c.fail("ps-0", 2)

    def launch() -> None:
        try:
            cluster.launch(make_job(), make_settings(), script)
        except BaseException as e:  # noqa: BLE001
            outcome.append(e)

    t = threading.Thread(target=launch)
    t.start()
    t.join(30)
    assert isinstance(outcome[0], PermanentFailureError) and outcome[0].replica == Replica(ReplicaType.PS, 0)
    assert any("not running in the main thread: SIGTERM and SIGINT cannot be caught here" in line for line in cluster.output)


def test_watches_resume_from_the_last_resource_version_and_relist_after_410_gone(cluster):
    seen: dict = {}

    def pod_watches(c: FakeCluster) -> list[int]:
        return [int(r.params.get("resourceVersion", 0)) for r in c.requests()
                if r.resource is not None and r.resource.plural == "pods" and r.action == enums.action.WATCH]

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1", "ps-0")
        c.wait_for(lambda: len(pod_watches(c)) == 1, "the first pods watch")
        c.run()
        c.log("chief-0", "up")
        c.wait_for(lambda: "[chief-0] up" in c.output, "the launcher to follow chief-0's log")
        c.close_watches("pods")  # a server-side timeout: resume from the last version seen
        c.wait_for(lambda: len(pod_watches(c)) == 2, "the resumed watch")
        seen["lists_after_resume"] = c.count("GET", "pods", watch=False)
        seen["compacted"] = c.expire_watches("pods")  # history compacted: the resumed watch gets 410
        c.wait_for(lambda: len(pod_watches(c)) == 4, "a watch after re-listing")
        seen["lists_after_gone"] = c.count("GET", "pods", watch=False)
        c.succeed("chief-0")

    cluster.launch(make_job(), make_settings(), script)
    first, resumed, gone, relisted = pod_watches(cluster)
    assert resumed > first  # resumed from the newest version seen, not the list's
    assert seen["lists_after_resume"] == 1  # a plain resume does not re-list
    assert gone == resumed < seen["compacted"] <= relisted  # 410 for the old version; the new list's is newer
    assert seen["lists_after_gone"] == 2


def test_beyond_the_live_followers_a_replicas_log_is_read_whole_when_it_ends_or_before_its_pod_goes(cluster,
                                                                                                   monkeypatch):
    # the coordinator and LIVE_LOGS others are followed live; the rest are read once, whole, by the readers
    monkeypatch.setattr("tfk8s.launcher.kubernetes.failures.LIVE_LOGS", 1)

    def script(c: FakeCluster) -> None:
        c.wait_pods("chief-0", "worker-0", "worker-1", "worker-2", "ps-0")
        c.log("chief-0", "chief line 1")
        c.run()
        c.wait_for(lambda: "[chief-0] chief line 1" in c.output, "the coordinator's live line")
        for label in ("worker-0", "worker-1", "worker-2", "ps-0"):
            c.log(label, f"{label} line 1", f"{label} line 2")
        c.succeed("worker-1")  # not followed: read when it ends
        c.wait_for(lambda: "[worker-1] worker-1 line 2" in c.output, "worker-1's log read at its end")
        c.succeed("worker-0")
        c.succeed("worker-2")
        c.succeed("chief-0")

    result = cluster.launch(make_job(worker=3, grace_period_s=0.3), make_settings(), script)
    assert result.exit_codes == {"chief-0": 0, "worker-0": 0, "worker-1": 0, "worker-2": 0}
    assert result.stopped == ["ps-0"]
    for label in ("worker-0", "worker-1", "worker-2", "ps-0"):  # ps-0 still ran: read before its pod went
        lines = [x for x in cluster.output if x.startswith(f"[{label}] ")]
        assert lines == [f"[{label}] {label} line 1", f"[{label}] {label} line 2"], label  # once each
    logs = [r for r in cluster.requests() if r.subresource == "log"]
    followed = sorted(r.name for r in logs if r.params.get("follow") in ("true", "True"))
    assert len(followed) == 2 and any(pod.startswith(name("chief-0") + "-") for pod in followed)  # + 1 worker
    assert len(logs) == 5  # one request per pod: 2 followed, 3 read whole
