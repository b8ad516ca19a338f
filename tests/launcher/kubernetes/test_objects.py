"""The Kubernetes backend's objects, settings, failure classification, RBAC and watch loop, without a cluster.

Every generated object is validated with kubernetes-validate (strict) for the oldest and the newest
Kubernetes version it is tested against.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import queue
import re
import threading
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tfk8s.core.cluster import Replica, ReplicaCounts, ReplicaType, parse_tf_config
from tfk8s.core.job import TrainingJob, job_name, job_selector
from tfk8s.launcher.kubernetes import api as kube_api
from tfk8s.launcher.kubernetes import backend as kube_backend
from tfk8s.launcher.kubernetes import render_manifests
from tfk8s.launcher.kubernetes.classify import FailureKind, Phase, classify_job, classify_pod
from tfk8s.launcher.kubernetes.errors import KubernetesApiError
from tfk8s.launcher.kubernetes.objects import job_manifest, replica_from_labels
from tfk8s.launcher.kubernetes.settings import KubernetesParams, KubernetesSettings, LauncherPod
from tfk8s.launcher.kubernetes.values import parse_quantity
from tfk8s.launcher.kubernetes.watch import Changed, Synced, Watcher, WatchFailed
from tfk8s.steps.cli import add_kubernetes_arguments, settings_from_args

K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
RBAC = Path(__file__).resolve().parents[3] / "manifests" / "rbac.yaml"
COMMAND = ("python", "-m", "trainer.task", "--epochs", "1")


def make_job(chief: int = 1, worker: int = 2, ps: int = 1, evaluator: int = 0, **kw) -> TrainingJob:
    return TrainingJob("tfk8s-run-42", ReplicaCounts(chief=chief, worker=worker, ps=ps, evaluator=evaluator),
                       COMMAND, env={"TF_USE_LEGACY_KERAS": "1"}, **kw)


def make_settings(**params) -> KubernetesSettings:
    return KubernetesSettings.from_params(**{"namespace": "ml", "image": "ghcr.io/tfk8s/tfk8s:0.1.0", **params})


def by_name(manifests: list[dict]) -> dict[tuple[str, str], dict]:
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


def container(job_obj: dict) -> dict:
    return job_obj["spec"]["template"]["spec"]["containers"][0]


def env_of(job_obj: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(job_obj)["env"]}


# -- names, labels, TF_CONFIG --------------------------------------------------------------------------------------
def test_one_headless_service_and_one_job_per_replica_services_first():
    manifests = render_manifests(make_job(), make_settings())
    names = ["tfk8s-run-42-chief-0", "tfk8s-run-42-worker-0", "tfk8s-run-42-worker-1", "tfk8s-run-42-ps-0"]
    assert [(m["kind"], m["metadata"]["name"]) for m in manifests] == (
        [("NetworkPolicy", "tfk8s-run-42")] + [("Service", n) for n in names] + [("Job", n) for n in names])
    for m in manifests:
        assert m["metadata"]["namespace"] == "ml"
    svc = by_name(manifests)["Service", "tfk8s-run-42-worker-1"]
    assert svc["spec"] == {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {"tfk8s.dev/job-name": "tfk8s-run-42", "tfk8s.dev/replica-type": "worker",
                     "tfk8s.dev/replica-index": "1"},
        "ports": [{"name": "tfjob-port", "port": 2222, "targetPort": 2222, "protocol": "TCP"}],
    }


def test_every_object_carries_the_job_and_replica_labels():
    manifests = render_manifests(make_job(), make_settings())
    job = by_name(manifests)["Job", "tfk8s-run-42-worker-1"]
    expected = {
        "app.kubernetes.io/name": "tfk8s",
        "app.kubernetes.io/instance": "tfk8s-run-42",
        "app.kubernetes.io/component": "worker",
        "app.kubernetes.io/managed-by": "tfk8s-launcher",
        "tfk8s.dev/job-name": "tfk8s-run-42",
        "tfk8s.dev/replica-type": "worker",
        "tfk8s.dev/replica-index": "1",
    }
    assert by_name(manifests)["Service", "tfk8s-run-42-worker-1"]["metadata"]["labels"] == expected
    assert job["metadata"]["labels"] == {**expected, "tfk8s.dev/attempt": "0"}
    assert job["spec"]["template"]["metadata"]["labels"] == {**expected, "tfk8s.dev/attempt": "0",
                                                             "sidecar.istio.io/inject": "false"}
    assert job_selector("tfk8s-run-42") == "tfk8s.dev/job-name=tfk8s-run-42"
    assert replica_from_labels(job["metadata"]["labels"]) == (Replica(ReplicaType.WORKER, 1), 0)
    assert replica_from_labels({"app": "x"}) is None


def test_tf_config_is_built_from_the_services_dns_names():
    manifests = render_manifests(make_job(evaluator=1), make_settings())
    cluster = {
        "chief": ["tfk8s-run-42-chief-0.ml.svc:2222"],
        "worker": ["tfk8s-run-42-worker-0.ml.svc:2222", "tfk8s-run-42-worker-1.ml.svc:2222"],
        "ps": ["tfk8s-run-42-ps-0.ml.svc:2222"],
    }
    jobs = by_name(manifests)
    assert json.loads(env_of(jobs["Job", "tfk8s-run-42-worker-1"])["TF_CONFIG"]) == {
        "cluster": cluster, "task": {"type": "worker", "index": 1}, "environment": "cloud"}
    assert json.loads(env_of(jobs["Job", "tfk8s-run-42-evaluator-0"])["TF_CONFIG"]) == {
        "cluster": cluster, "task": {"type": "evaluator", "index": 0}, "environment": "cloud"}
    spec, replica = parse_tf_config(env_of(jobs["Job", "tfk8s-run-42-ps-0"])["TF_CONFIG"])
    assert spec == cluster and replica == Replica(ReplicaType.PS, 0)
    assert env_of(jobs["Job", "tfk8s-run-42-chief-0"])["TF_USE_LEGACY_KERAS"] == "1"


def test_names_from_a_long_run_id_are_valid_dns_labels_and_stay_distinct():
    run_ids = ["Pipeline_Run " + "x" * 120 + suffix for suffix in ("-a", "-b")]
    names = set()
    for run_id in run_ids:
        job = TrainingJob(job_name(run_id), ReplicaCounts(chief=1, worker=12, ps=2, evaluator=1), COMMAND)
        for m in render_manifests(job, make_settings()):
            assert len(m["metadata"]["name"]) <= 63
            assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", m["metadata"]["name"])
            assert len(m["metadata"]["labels"]["tfk8s.dev/job-name"]) <= 63
            names.add(m["metadata"]["name"])
    # two runs x (16 replicas + the job's NetworkPolicy): a replica's Service and Job share its name
    assert len(names) == 2 * 17


def test_cluster_domain_and_port_are_configurable():
    job = TrainingJob("tj", ReplicaCounts(worker=2), COMMAND, port=3333)
    manifests = render_manifests(job, make_settings(cluster_domain="cluster.local"))
    tf_config = json.loads(env_of(by_name(manifests)["Job", "tj-worker-0"])["TF_CONFIG"])
    assert tf_config["cluster"] == {"worker": ["tj-worker-0.ml.svc.cluster.local:3333",
                                               "tj-worker-1.ml.svc.cluster.local:3333"]}
    assert container(by_name(manifests)["Job", "tj-worker-0"])["ports"] == [
        {"name": "tfjob-port", "containerPort": 3333, "protocol": "TCP"}]


# -- the Job and its pod --------------------------------------------------------------------------------------------
def test_the_job_never_retries_on_its_own_and_carries_its_deadlines():
    job = job_manifest(make_job(timeout_s=90.5), Replica(ReplicaType.WORKER, 0), make_settings(
        ttl_seconds_after_finished=600), attempt=2, restarts=3)
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["activeDeadlineSeconds"] == 91
    assert job["spec"]["ttlSecondsAfterFinished"] == 600
    assert job["metadata"]["labels"]["tfk8s.dev/attempt"] == "2"
    assert job["metadata"]["annotations"] == {"tfk8s.dev/restarts": "3"}
    no_timeout = job_manifest(make_job(), Replica(ReplicaType.PS, 0), make_settings())
    assert no_timeout["spec"]["activeDeadlineSeconds"] == 7 * 24 * 3600  # the backstop: a ps never exits


def test_pod_is_non_root_without_istio_sidecar_and_keeps_its_failure_message():
    job = by_name(render_manifests(make_job(), make_settings()))["Job", "tfk8s-run-42-chief-0"]
    pod = job["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false",
                                              "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                                              "karpenter.sh/do-not-disrupt": "true"}
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                              "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}}
    c = container(job)
    assert c["name"] == "tensorflow" and c["command"] == list(COMMAND)
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                    "runAsNonRoot": True}
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert pod["spec"]["enableServiceLinks"] is False
    assert pod["spec"]["shareProcessNamespace"] is True  # the program is not PID 1: SIGTERM ends it at once
    assert "volumes" not in pod["spec"] and "volumeMounts" not in c


def test_pvc_is_mounted_at_the_pipeline_path():
    job = by_name(render_manifests(make_job(), make_settings(pvc_name="tfk8s-data",
                                                             volume_mount_path="/mnt/vol")))["Job", "tfk8s-run-42-ps-0"]
    assert container(job)["volumeMounts"] == [{"name": "tfk8s-data", "mountPath": "/mnt/vol"}]
    assert job["spec"]["template"]["spec"]["volumes"] == [
        {"name": "tfk8s-data", "persistentVolumeClaim": {"claimName": "tfk8s-data"}}]


def test_gpu_replicas_get_a_memory_backed_dev_shm_and_cpu_ones_only_when_asked():
    """NCCL outgrows the runtime's 64 MiB /dev/shm: a GPU replica gets a 1Gi memory-backed emptyDir there by
    default (beside the PVC), a CPU replica none unless shm_size says so; '0' turns it off."""
    def pod(settings, label):
        return by_name(render_manifests(make_job(), settings))["Job", f"tfk8s-run-42-{label}"]["spec"]["template"][
            "spec"]

    settings = make_settings(pvc_name="tfk8s-data", gpus=1, memory="8Gi",
                             replica_overrides='{"ps": {"gpus": 0}, "chief": {"shm_size": "0"}}')
    worker = pod(settings, "worker-0")
    assert worker["containers"][0]["volumeMounts"] == [{"name": "tfk8s-data", "mountPath": "/mnt/tfk8s"},
                                                       {"name": "dshm", "mountPath": "/dev/shm"}]
    assert worker["volumes"][1] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}
    assert all("dshm" not in json.dumps(pod(settings, label)) for label in ("ps-0", "chief-0"))
    cpu = make_settings(shm_size="256Mi")
    assert pod(cpu, "ps-0")["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}]
    assert "dshm" not in json.dumps(pod(make_settings(), "worker-0"))
    small = pod(make_settings(gpus=1, memory="512Mi"), "worker-0")  # the default: at most half the memory limit
    assert small["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}]


def test_each_replica_type_gets_its_own_image_resources_gpus_placement_and_env():
    overrides = {
        "ps": {"cpu": "500m", "memory": "1Gi", "gpus": 0, "image": "ps-image:1", "env": {"ROLE": "ps"}},
        "chief": {"memory_limit": "12Gi", "command": ["python", "-m", "chief"], "service_account": "chief-sa"},
    }
    settings = make_settings(cpu="4", memory="8Gi", gpus=1, node_selector='{"pool": "gpu"}',
                             tolerations='[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]',
                             service_account="trainer", replica_overrides=json.dumps(overrides))
    jobs = by_name(render_manifests(make_job(), settings))
    worker, ps, chief = (jobs["Job", f"tfk8s-run-42-{n}"] for n in ("worker-0", "ps-0", "chief-0"))
    assert container(worker)["image"] == "ghcr.io/tfk8s/tfk8s:0.1.0-gpu"  # gpus > 0: the GPU variant
    assert container(worker)["resources"] == {
        "requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
        "limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}
    assert worker["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "gpu"}
    # its own tolerations, then the lost-node taints' for node_lost_toleration_s (30 s, not Kubernetes' 300 s)
    assert worker["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    assert worker["spec"]["template"]["spec"]["serviceAccountName"] == "trainer"
    assert container(ps)["image"] == "ps-image:1"
    assert container(ps)["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"},
                                          "limits": {"cpu": "500m", "memory": "1Gi"}}
    assert env_of(ps)["ROLE"] == "ps" and "ROLE" not in env_of(worker)
    assert container(chief)["resources"]["limits"]["memory"] == "12Gi"
    assert container(chief)["command"] == ["python", "-m", "chief"]
    assert chief["spec"]["template"]["spec"]["serviceAccountName"] == "chief-sa"


def test_every_replica_bypasses_proxies_for_its_peers_keeping_the_users_entries():
    """NO_PROXY, no_proxy and no_grpc_proxy (gRPC's own) name every replica's Service, the namespace's svc domain
    and the cluster domain, after what the job's env and the type's env said (tensorflow#24887)."""
    job = TrainingJob("tfk8s-run-42", ReplicaCounts(chief=1, worker=1), COMMAND,
                      env={"https_proxy": "http://proxy:3128", "NO_PROXY": "corp.example.com,.internal"})
    settings = make_settings(cluster_domain="cluster.local",
                             replica_overrides=json.dumps({"worker": {"env": {"no_proxy": "metrics.example.com"}}}))
    jobs = by_name(render_manifests(job, settings))
    peers = ("tfk8s-run-42-chief-0.ml.svc.cluster.local,tfk8s-run-42-worker-0.ml.svc.cluster.local,.ml.svc,"
             ".cluster.local")
    worker, chief = env_of(jobs["Job", "tfk8s-run-42-worker-0"]), env_of(jobs["Job", "tfk8s-run-42-chief-0"])
    for var in ("NO_PROXY", "no_proxy", "no_grpc_proxy"):
        assert worker[var] == f"corp.example.com,.internal,metrics.example.com,{peers}"
        assert chief[var] == f"corp.example.com,.internal,{peers}"
    assert worker["https_proxy"] == "http://proxy:3128"  # the proxy stays for everything else


def test_the_pods_grace_period_is_the_jobs_stop_grace():
    jobs = [m for m in render_manifests(make_job(stop_grace_s=120), make_settings()) if m["kind"] == "Job"]
    assert {j["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] for j in jobs} == {120}
    default = next(m for m in render_manifests(make_job(), make_settings()) if m["kind"] == "Job")
    assert default["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 10


def test_kueue_queue_label_and_scheduler_name_pass_through():
    settings = make_settings(kueue_queue="team-a", scheduler_name="volcano")
    job = by_name(render_manifests(make_job(), settings))["Job", "tfk8s-run-42-worker-0"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["template"]["spec"]["schedulerName"] == "volcano"


def test_owner_reference_to_the_launcher_pod_from_the_downward_api(monkeypatch, tmp_path):
    ns_file = tmp_path / "namespace"
    ns_file.write_text("ml\n")
    monkeypatch.setattr("tfk8s.launcher.kubernetes.settings.SERVICEACCOUNT_NAMESPACE_FILE", ns_file)
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_NAME", "run-42-launch-abc")
    monkeypatch.setenv("TFK8S_LAUNCHER_POD_UID", "0b1c-uid")
    settings = KubernetesSettings.from_params(image="img:1")
    assert settings.namespace == "ml"
    assert settings.launcher_pod == LauncherPod("run-42-launch-abc", "0b1c-uid", "ml")
    for m in render_manifests(make_job(), settings):
        assert m["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Pod", "name": "run-42-launch-abc", "uid": "0b1c-uid"}]
    # an owner must share the namespace: replicas elsewhere get none
    elsewhere = KubernetesSettings.from_params(image="img:1", namespace="training")
    assert elsewhere.owner is None
    assert all("ownerReferences" not in m["metadata"] for m in render_manifests(make_job(), elsewhere))


def test_no_owner_reference_without_the_downward_api(monkeypatch, tmp_path):
    monkeypatch.setattr("tfk8s.launcher.kubernetes.settings.SERVICEACCOUNT_NAMESPACE_FILE", tmp_path / "absent")
    monkeypatch.delenv("TFK8S_LAUNCHER_POD_NAME", raising=False)
    settings = KubernetesSettings.from_params(image="img:1")
    assert settings.namespace == "default" and settings.launcher_pod is None
    assert all("ownerReferences" not in m["metadata"] for m in render_manifests(make_job(), settings))


# -- schema validation ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_generated_object_validates_strictly(version):
    settings = make_settings(pvc_name="tfk8s-data", gpus=1, shm_size="512Mi", node_selector='{"pool": "gpu"}',
                             tolerations='[{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]',
                             service_account="trainer", cluster_domain="cluster.local", kueue_queue="q",
                             scheduler_name="volcano", replica_overrides='{"ps": {"gpus": 0, "cpu_limit": "2"}}')
    job = make_job(evaluator=1, timeout_s=3600)
    manifests = render_manifests(job, settings)
    manifests.append(job_manifest(job, Replica(ReplicaType.WORKER, 1), settings, attempt=3, restarts=2))
    for m in manifests:
        kubernetes_validate.validate(m, version, strict=True)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_dry_run_of_the_launch_step_prints_yaml_that_validates(version, capsys, tmp_path, monkeypatch):
    """``python -m components.launch_training --dry-run`` for 1 chief + 2 workers + 1 ps."""
    monkeypatch.setattr("tfk8s.launcher.kubernetes.settings.SERVICEACCOUNT_NAMESPACE_FILE", tmp_path / "absent")
    from components import launch_training
    launch_training.main(["--dry-run", "--data-dir", str(tmp_path), "--run-id", "run-42", "--chief", "1",
                          "--workers", "2", "--ps", "1", "--namespace", "ml", "--pvc-name", "tfk8s-data"])
    printed = capsys.readouterr()
    docs = list(yaml.safe_load_all(printed.out))
    # outside a launcher pod: why the objects have no ownerReferences, on stderr (stdout stays YAML)
    assert printed.err.startswith("# TFK8S_LAUNCHER_POD_NAME/TFK8S_LAUNCHER_POD_UID are not set (outside a launcher "
                                  "pod): the replica objects get no ownerReferences")
    assert all("ownerReferences" not in d["metadata"] for d in docs)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("NetworkPolicy", "tfk8s-run-42")] + [
        (kind, f"tfk8s-run-42-{r}") for kind in ("Service", "Job") for r in ("chief-0", "worker-0", "worker-1",
                                                                            "ps-0")]
    for d in docs:
        kubernetes_validate.validate(d, version, strict=True)


# -- settings --------------------------------------------------------------------------------------------------------
def test_a_replica_type_with_gpus_runs_the_gpu_image_unless_told_otherwise():
    """The project image is tensorflow-cpu (no CUDA): a type with gpus > 0 gets its GPU variant by default; a
    given gpu_image wins; a user's own image is kept for every type; a type's own image always wins."""
    from tfk8s import DEFAULT_GPU_IMAGE, DEFAULT_IMAGE

    def images(**params) -> dict[str, str]:
        settings = KubernetesSettings.from_params(namespace="ml", **params)
        return {t.value: r.image for t, r in settings.replicas.items() if t.value in ("chief", "worker", "ps")}

    mixed = json.dumps({"worker": {"gpus": 1}, "chief": {"gpus": 2, "image": "mine:3"}})
    assert images(replica_overrides=mixed) == {"chief": "mine:3", "worker": DEFAULT_GPU_IMAGE, "ps": DEFAULT_IMAGE}
    assert images(gpus=1, replica_overrides='{"ps": {"gpus": 0}}') == {
        "chief": DEFAULT_GPU_IMAGE, "worker": DEFAULT_GPU_IMAGE, "ps": DEFAULT_IMAGE}
    assert images(gpus=1, gpu_image="reg/tf-gpu:2") == dict.fromkeys(("chief", "worker", "ps"), "reg/tf-gpu:2")
    assert images(gpus=1, image="reg/own:1") == dict.fromkeys(("chief", "worker", "ps"), "reg/own:1")
    assert images() == dict.fromkeys(("chief", "worker", "ps"), DEFAULT_IMAGE)  # no GPU: the CPU image
    assert DEFAULT_GPU_IMAGE == DEFAULT_IMAGE + "-gpu"


def test_from_params_takes_exactly_the_kubernetes_params_and_names_an_unknown_one():
    assert KubernetesParams.names() == (
        "namespace", "image", "gpu_image", "pvc_name", "cpu", "memory", "gpus", "node_selector", "tolerations",
        "service_account", "shm_size", "annotations", "labels", "priority_class_name", "replica_overrides",
        "cluster_domain", "schedule_timeout_s",
        "ttl_seconds_after_finished", "kueue_queue", "scheduler_name", "spread", "gang", "network_policy",
        "network_policy_from", "node_lost_toleration_s")
    with pytest.raises(ValueError, match=r"unknown keys \['memroy'\] \(did you mean memory\?\)"):
        KubernetesSettings.from_params(image="i", memroy="1Gi")
    # structured values as parsed objects (the pipeline's dict parameter) or as JSON text (a CLI flag)
    assert make_settings(node_selector={"pool": "gpu"}, replica_overrides={"ps": {"cpu": "500m"}}) == make_settings(
        node_selector='{"pool": "gpu"}', replica_overrides='{"ps": {"cpu": "500m"}}')


@pytest.mark.parametrize(("params", "message"), [
    ({"node_selector": "{pool: gpu}"}, "node_selector is not valid JSON"),
    ({"node_selector": '["pool"]'}, "node_selector must be a JSON object"),
    ({"tolerations": '{"key": "x"}'}, "tolerations must be a JSON list"),
    ({"tolerations": '[{"key": "x", "opertor": "Exists"}]'}, "tolerations: each entry"),
    ({"replica_overrides": '{"master": {"cpu": "1"}}'}, "unknown replica types ['master']"),
    ({"replica_overrides": '{"ps": {"cpus": "1"}}'}, 'replica_overrides["ps"] has unknown keys [\'cpus\']'),
    ({"replica_overrides": '{"ps": {"memory": "lots"}}'}, 'replica_overrides["ps"]: memory: \'lots\' is not'),
    ({"cpu": "two"}, "cpu: 'two' is not a Kubernetes quantity"),
    ({"memory": "4Gi", "replica_overrides": '{"worker": {"memory_limit": "2Gi"}}'},
     "memory_limit '2Gi' is below the request memory='4Gi'"),
    ({"gpus": -1}, "gpus must be an integer >= 0"),
    ({"gpus": "two"}, "gpus must be an integer, got 'two'"),
    ({"image": ""}, "image must name the container image"),
    ({"namespace": "ML_Team"}, "namespace 'ML_Team' is not a valid namespace name"),
    ({"ttl_seconds_after_finished": -1}, "ttl_seconds_after_finished must be an integer >= 0"),
    ({"schedule_timeout_s": 0}, "schedule_timeout_s must be > 0"),
    ({"kueue_queue": "bad queue"}, "kueue_queue 'bad queue' must be"),
    ({"replica_overrides": '{"ps": {"env": {"TF_CONFIG": "{}"}}}'}, "env must not set TF_CONFIG"),
    ({"spread": "always"}, "spread must be one of ['preferred', 'required', 'none']"),
    ({"gang": "volcano"}, "gang must be '' (none) or 'native'"),
    ({"network_policy": "maybe"}, "network_policy must be true or false"),
    ({"network_policy_from": '[{"pods": {}}]'}, "network_policy_from: each entry must be a NetworkPolicyPeer"),
    ({"shm_size": "big"}, "shm_size: 'big' is not a Kubernetes quantity"),
    ({"shm_size": "2Gi"}, "shm_size '2Gi' (the /dev/shm) is not below the memory limit '2Gi'"),
    ({"replica_overrides": '{"ps": {"shm_size": "4Gi"}}'}, 'replica_overrides["ps"]: shm_size \'4Gi\''),
    ({"labels": {"tfk8s.dev/job-name": "x"}}, "labels must not set 'tfk8s.dev/job-name': the tfk8s.dev/ keys are"),
    ({"replica_overrides": {"ps": {"labels": {"app.kubernetes.io/component": "x"}}}},
     'replica_overrides["ps"]: labels must not set \'app.kubernetes.io/component\': tfk8s sets it'),
    ({"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "set it with the kueue_queue setting"),
    ({"annotations": {"sidecar.istio.io/inject": "true"}}, "annotations must not set 'sidecar.istio.io/inject'"),
    ({"labels": {"Team.Example/cost": "ml"}},
     "labels: key 'Team.Example/cost' is not a valid Kubernetes label key: its prefix 'Team.Example' is not"),
    ({"annotations": {"a b": "x"}}, "annotations: key 'a b' is not a valid Kubernetes annotation key"),
    ({"labels": {"cost": "machine learning"}}, "labels: label cost='machine learning': a label value is at most 63"),
    ({"annotations": {"x.io/flag": False}}, "annotations: the value of 'x.io/flag' must be a string"),
    ({"replica_overrides": {"worker": {"annotations": '["x"]'}}},
     'replica_overrides["worker"].annotations must be a JSON object'),
    ({"priority_class_name": "High"}, "priority_class_name 'High' is not a valid PriorityClass name"),
])
def test_bad_parameters_raise_value_error_naming_the_parameter(params, message):
    with pytest.raises(ValueError) as e:
        make_settings(**params)
    assert message in str(e.value)


def test_quantities_parse_like_kubernetes():
    assert parse_quantity("500m") * 2 == 1
    assert parse_quantity("2Gi") == 2 * 2**30
    assert parse_quantity("1.5") == parse_quantity("1500m")
    assert parse_quantity("1e3") == 1000
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity("1 GB")


def test_cli_flags_build_the_same_settings():
    parser = argparse.ArgumentParser()
    add_kubernetes_arguments(parser)
    args = parser.parse_args(["--namespace", "ml", "--image", "img:2", "--gpus", "2",
                              "--replica-overrides", '{"ps": {"gpus": 0}}', "--schedule-timeout-s", "30",
                              "--kueue-queue", "q", "--scheduler-name", "volcano", "--gang", "native",
                              "--spread", "required", "--network-policy", "false"])
    assert settings_from_args(args) == KubernetesSettings.from_params(
        namespace="ml", image="img:2", gpus=2, replica_overrides='{"ps": {"gpus": 0}}',
        schedule_timeout_s=30, kueue_queue="q", scheduler_name="volcano", gang="native", spread="required",
        network_policy=False)
    assert settings_from_args(args).network_policy is False
    flags = {a.dest for a in parser._actions} - {"help"}
    # one flag per KubernetesParams field; the mount path is the launch step's --volume-root
    assert flags == set(KubernetesParams.names())


# -- failure classification (Training Operator rules) ------------------------------------------------------------------
def pod(phase: str, state: dict | None = None, **status) -> dict:
    statuses = [{"name": "tensorflow", "state": state}] if state else []
    return {"metadata": {"name": "p"}, "spec": {}, "status": {"phase": phase, "containerStatuses": statuses, **status}}


def terminated(code: int, reason: str = "Error", **kw) -> dict:
    return {"terminated": {"exitCode": code, "reason": reason, **kw}}


@pytest.mark.parametrize(("obj", "kind", "reason", "exit_code"), [
    (pod("Failed", terminated(1)), FailureKind.PERMANENT, "Error", 1),
    (pod("Failed", terminated(127)), FailureKind.PERMANENT, "Error", 127),
    (pod("Failed", terminated(128, "StartError", message="exec: python: not found")), FailureKind.PERMANENT,
     "StartError", 128),
    (pod("Failed", terminated(137, "OOMKilled")), FailureKind.RETRYABLE, "OOMKilled", 137),
    (pod("Failed", terminated(143)), FailureKind.RETRYABLE, "Signal", 143),
    # preemptions: not the program's fault, not counted against max_restarts
    (pod("Failed", terminated(137), reason="Evicted", message="low on memory"), FailureKind.PREEMPTED,
     "Evicted", 137),
    (pod("Failed", None, reason="NodeLost"), FailureKind.PREEMPTED, "NodeLost", None),
    (pod("Failed", terminated(143), conditions=[{"type": "DisruptionTarget", "status": "True",
                                                 "reason": "PreemptionByScheduler"}]),
     FailureKind.PREEMPTED, "PreemptionByScheduler", 143),
    (pod("Failed", terminated(42), reason="Terminated", message="Pod was terminated in response to imminent node "
         "shutdown."), FailureKind.PREEMPTED, "Terminated", 42),
    (pod("Failed", None, reason="UnexpectedAdmissionError"), FailureKind.RETRYABLE, "UnexpectedAdmissionError",
     None),
    # TensorFlow's TerminationConfig restart code: saved on SIGTERM, asks to be restarted
    (pod("Failed", terminated(42)), FailureKind.RETRYABLE, "RestartRequested", 42),
    (pod("Pending", {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}),
     FailureKind.IMAGE_PULL, "ImagePullBackOff", None),
    # a sidecar keeps the pod Running after the tensorflow container exited
    (pod("Running", terminated(137, "OOMKilled")), FailureKind.RETRYABLE, "OOMKilled", 137),
    (pod("Running", terminated(1)), FailureKind.PERMANENT, "Error", 1),
    (pod("Pending", {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "s" not found'}}),
     FailureKind.CONTAINER_CONFIG, "CreateContainerConfigError", None),
])
def test_pod_failures_are_classified_like_the_training_operator(obj, kind, reason, exit_code):
    state = classify_pod(obj)
    assert (state.failure.kind, state.failure.reason, state.failure.exit_code) == (kind, reason, exit_code)


def test_pod_phases_and_the_schedulers_message():
    assert classify_pod(pod("Succeeded", terminated(0, "Completed"))).phase is Phase.SUCCEEDED
    assert classify_pod(pod("Succeeded", terminated(0, "Completed"))).failure is None
    running = classify_pod(pod("Running", {"running": {}}))
    assert (running.phase, running.started, running.scheduled, running.failure) == (Phase.RUNNING, True, True, None)
    pending = classify_pod(pod("Pending", conditions=[{"type": "PodScheduled", "status": "False",
                                                       "reason": "Unschedulable",
                                                       "message": "0/3 nodes are available: 3 Insufficient cpu."}]))
    assert (pending.phase, pending.scheduled, pending.waiting_reason, pending.waiting_message) == (
        Phase.PENDING, False, "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.")


def test_job_conditions_are_read():
    assert classify_job({"spec": {"suspend": True}}).suspended
    failed = classify_job({"status": {"conditions": [{"type": "Failed", "status": "True",
                                                      "reason": "DeadlineExceeded", "message": "too long"}]}})
    assert (failed.failed_reason, failed.failed_message) == ("DeadlineExceeded", "too long")
    assert classify_job({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}).complete


# -- RBAC ------------------------------------------------------------------------------------------------------------
def rbac_docs() -> list[dict]:
    return list(yaml.safe_load_all(RBAC.read_text()))


def test_rbac_is_namespaced_and_grants_exactly_the_calls_the_launcher_makes():
    docs = {d["kind"]: d for d in rbac_docs()}
    assert sorted(docs) == ["Role", "RoleBinding", "ServiceAccount"]  # nothing cluster-wide
    assert all("namespace" not in d["metadata"] for d in docs.values())  # kubectl apply -n NAMESPACE
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in docs["Role"]["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == kube_api.required_rules()
    assert granted == {
        ("batch", "jobs"): {"create", "delete", "list", "patch", "watch"},  # patch: the owner, on re-attach
        ("", "pods"): {"delete", "list", "watch"},
        ("", "pods/log"): {"get"},
        ("", "services"): {"create", "delete", "list", "patch"},
        ("", "events"): {"list"},
        ("", "persistentvolumeclaims"): {"create", "get"},  # the ensure-volume step
        ("networking.k8s.io", "networkpolicies"): {"create", "delete", "list", "patch"},  # one per job
        ("scheduling.k8s.io", "podgroups"): {"create", "delete", "list", "patch"},  # gang=native
        ("kueue.x-k8s.io", "localqueues"): {"get"},  # kueue_queue: checked before the Jobs are created
        ("kueue.x-k8s.io", "workloads"): {"list"},  # kueue_queue: a held Job's reason
        ("serving.kserve.io", "inferenceservices"): {"create", "patch"},  # the push step's kserve=apply
    }
    binding = docs["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tfk8s-launcher"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tfk8s-launcher"}]
    assert docs["ServiceAccount"]["metadata"]["name"] == "tfk8s-launcher"


def test_every_api_method_is_in_the_rbac_table_and_nothing_else_calls_the_client():
    public = {n for n, f in inspect.getmembers(kube_api.KubeApi, inspect.isfunction) if not n.startswith("_")}
    assert public == set(kube_api.API_CALLS) | set(kube_api.NON_RESOURCE_CALLS)  # discovery: no Role rule
    assert kube_api.NON_RESOURCE_CALLS == {"kueue_versions": "/apis/kueue.x-k8s.io",
                                           "kserve_versions": "/apis/serving.kserve.io"}
    package = Path(kube_backend.__file__).parent
    for module in package.glob("*.py"):
        if module.name in ("api.py", "__init__.py"):  # __init__: load_api_client builds the ApiClient
            continue
        source = module.read_text()
        for client_class in ("CoreV1Api", "BatchV1Api", "ApiClient(", "CustomObjectsApi", "NetworkingV1Api"):
            assert client_class not in source, (module.name, client_class)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_rbac_manifest_validates_strictly(version):
    for doc in rbac_docs():
        kubernetes_validate.validate(doc, version, strict=True)


# -- list-then-watch (without a server) ----------------------------------------------------------------------------------
class _Stream:
    """A streamed response: ``lines``, then (if ``block``) nothing until it is shut down."""

    def __init__(self, lines: list[bytes], block: threading.Event | None = None):
        self.lines, self.block = lines, block

    def stream(self, amt=None, decode_content=False):
        yield from self.lines
        if self.block is not None:
            self.block.wait(10)

    def shutdown(self):
        if self.block is not None:
            self.block.set()

    def close(self):
        pass


def test_watcher_relists_after_an_http_410_and_resumes_from_the_last_version_seen():
    out: queue.Queue = queue.Queue()
    watched: list[str] = []
    third = threading.Event()
    blocked = threading.Event()
    lists = iter(["10", "20"])

    def list_fn():
        return {"metadata": {"resourceVersion": next(lists)}, "items": [{"metadata": {"name": "p"}}]}

    def watch_fn(rv, timeout_s):
        watched.append(rv)
        if len(watched) == 1:
            raise KubernetesApiError("watching pods failed: 410 Gone", 410)
        if len(watched) == 2:
            return _Stream([b'{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "22"}}}\n',
                            b'{"type": "MODIFIED", "object": {"metadata": {"name": "p", "resourceVersion": "25"}}}\n'])
        third.set()
        return _Stream([], block=blocked)

    w = Watcher("pods", list_fn, watch_fn, out, timeout_s=30, retry_s=0)
    w.start()
    assert third.wait(5)
    w.stop()
    assert watched == ["10", "20", "25"]
    items = [out.get_nowait() for _ in range(out.qsize())]
    assert items == [Synced("pods", ({"metadata": {"name": "p"}},)), Synced("pods", ({"metadata": {"name": "p"}},)),
                     Changed("pods", "MODIFIED", {"metadata": {"name": "p", "resourceVersion": "25"}})]


def test_watcher_reports_a_forbidden_watch_at_once():
    out: queue.Queue = queue.Queue()

    def watch_fn(rv, timeout_s):
        raise KubernetesApiError("watching pods failed: 403 forbidden", 403)

    w = Watcher("pods", lambda: {"metadata": {"resourceVersion": "1"}, "items": []}, watch_fn, out,
                retry_s=10)
    w.start()
    assert out.get(timeout=5) == Synced("pods", ())
    failed = out.get(timeout=5)  # no retry (retry_s=10 would be longer than the timeout)
    assert isinstance(failed, WatchFailed) and failed.error.status == 403
    w.stop()


def test_watcher_reports_an_api_that_keeps_failing_for_give_up_s_with_backoff():
    out: queue.Queue = queue.Queue()
    calls: list[float] = []

    def watch_fn(rv, timeout_s):
        calls.append(time.monotonic())
        raise KubernetesApiError("watching pods failed: 503 Service Unavailable", 503)

    w = Watcher("pods", lambda: {"metadata": {"resourceVersion": "1"}, "items": []}, watch_fn, out,
                retry_s=0.05, max_retry_s=0.2, give_up_s=1.2)
    w.start()
    assert out.get(timeout=5) == Synced("pods", ())
    failed = out.get(timeout=5)
    assert isinstance(failed, WatchFailed) and failed.error.status == 503
    assert "no progress for" in str(failed.error) and "rerun the step" in str(failed.error)
    w.stop()
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    # doubling (0.05, 0.1, 0.2 s), then capped at max_retry_s: wide enough that a loaded machine's jitter
    # (70 ms seen with both cores busy) cannot reorder them
    assert gaps[0] < gaps[2] and max(gaps) < 0.2 + 0.5
    assert calls[-1] - calls[0] >= 0.25


# -- placement, gang, network policy ----------------------------------------------------------------------------------
def test_default_spread_keeps_trainers_apart_and_the_ps_off_their_nodes_softly():
    manifests = by_name(render_manifests(make_job(), make_settings()))
    worker = manifests["Job", "tfk8s-run-42-worker-0"]["spec"]["template"]["spec"]
    (constraint,) = worker["topologySpreadConstraints"]
    assert constraint == {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                          "nodeTaintsPolicy": "Honor", "labelSelector": {
                              "matchLabels": {"tfk8s.dev/job-name": "tfk8s-run-42"},
                              "matchExpressions": [{"key": "tfk8s.dev/replica-type", "operator": "In",
                                                    "values": ["chief", "worker"]}]}}
    assert "affinity" not in worker
    ps = manifests["Job", "tfk8s-run-42-ps-0"]["spec"]["template"]["spec"]
    (term,) = ps["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["labelSelector"]["matchExpressions"][0]["values"] == ["chief", "worker"]
    assert ps["topologySpreadConstraints"][0]["labelSelector"]["matchExpressions"][0]["values"] == ["ps"]


def test_spread_required_is_hard_and_none_leaves_placement_to_the_scheduler():
    hard = by_name(render_manifests(make_job(), make_settings(spread="required")))
    spec = hard["Job", "tfk8s-run-42-ps-0"]["spec"]["template"]["spec"]
    assert spec["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"
    assert "requiredDuringSchedulingIgnoredDuringExecution" in spec["affinity"]["podAntiAffinity"]
    free = by_name(render_manifests(make_job(), make_settings(spread="none")))
    spec = free["Job", "tfk8s-run-42-worker-0"]["spec"]["template"]["spec"]
    assert "topologySpreadConstraints" not in spec and "affinity" not in spec


def test_gang_native_adds_a_pod_group_of_the_whole_replica_set_and_opts_every_pod_in():
    manifests = render_manifests(make_job(), make_settings(gang="native", network_policy=False))
    assert [m["kind"] for m in manifests][:1] == ["PodGroup"]
    group = manifests[0]
    assert group["apiVersion"] == "scheduling.k8s.io/v1beta1" and group["metadata"]["name"] == "tfk8s-run-42"
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    for m in manifests:
        if m["kind"] == "Job":
            assert m["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "tfk8s-run-42"}


def test_network_policy_admits_every_port_between_the_jobs_pods_and_only_the_port_from_the_users_peers():
    """NCCL connects ranks on ports of its own (NVIDIA/nccl#388): between the job's pods every port is open (a
    rule without ``ports``); the user's peers reach the gRPC port only; no one else gets in."""
    peer = {"namespaceSelector": {"matchLabels": {"team": "ml"}}}
    (policy,) = [m for m in render_manifests(make_job(), make_settings(network_policy_from=[peer]))
                 if m["kind"] == "NetworkPolicy"]
    own = {"matchLabels": {"tfk8s.dev/job-name": "tfk8s-run-42"}}
    assert policy["spec"] == {"podSelector": own, "policyTypes": ["Ingress"], "ingress": [
        {"from": [{"podSelector": own}]},
        {"from": [peer], "ports": [{"protocol": "TCP", "port": 2222}]}]}
    (alone,) = [m for m in render_manifests(make_job(), make_settings()) if m["kind"] == "NetworkPolicy"]
    assert alone["spec"]["ingress"] == [{"from": [{"podSelector": own}]}]  # no peers: no second rule
    assert [m["kind"] for m in render_manifests(make_job(), make_settings(network_policy=False))].count(
        "NetworkPolicy") == 0


def test_replicas_without_gpus_see_no_gpu_whatever_their_image_and_the_users_value_wins():
    """A CUDA image's NVIDIA_VISIBLE_DEVICES=all would show a gpus-0 pod every GPU of a node whose default
    runtime is NVIDIA's (NVIDIA/k8s-device-plugin#61): such replicas get ``void``, the GPU image included; a type
    with GPUs gets no value (the device plugin sets it); the user's own value (the type's env, the job's) wins."""
    settings = make_settings(gpus=0, replica_overrides={
        "worker": {"gpus": 2, "image": "ghcr.io/tfk8s/tfk8s:0.1.0-gpu"},
        "evaluator": {"image": "ghcr.io/tfk8s/tfk8s:0.1.0-gpu", "env": {"NVIDIA_VISIBLE_DEVICES": "none"}}})
    jobs = by_name(render_manifests(make_job(evaluator=1), settings))
    assert env_of(jobs["Job", "tfk8s-run-42-chief-0"])["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env_of(jobs["Job", "tfk8s-run-42-ps-0"])["NVIDIA_VISIBLE_DEVICES"] == "void"
    worker = jobs["Job", "tfk8s-run-42-worker-0"]
    assert "NVIDIA_VISIBLE_DEVICES" not in env_of(worker)
    assert container(worker)["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert env_of(jobs["Job", "tfk8s-run-42-evaluator-0"])["NVIDIA_VISIBLE_DEVICES"] == "none"
    job = TrainingJob("tfk8s-run-42", ReplicaCounts(chief=0, worker=1, ps=0), COMMAND,
                      env={"NVIDIA_VISIBLE_DEVICES": "0"})
    job_wide = render_manifests(job, make_settings())
    (worker,) = [m for m in job_wide if m["kind"] == "Job"]
    assert env_of(worker)["NVIDIA_VISIBLE_DEVICES"] == "0"


def test_a_replica_classifies_its_pod_and_job_again_only_when_the_watch_replaced_them(monkeypatch):
    """The launcher looks at every replica after each batch of watch events; an unchanged replica must cost no
    new classification (1,024 replicas: bench/launcher_scale.py), a replaced object must be classified again."""
    from tfk8s.core.cluster import Replica, ReplicaType
    from tfk8s.launcher.kubernetes import state
    from tfk8s.launcher.kubernetes.classify import Phase

    pods, jobs = [], []
    real_pod, real_job = state.classify_pod, state.classify_job
    monkeypatch.setattr(state, "classify_pod", lambda pod, code: pods.append(pod) or real_pod(pod, code))
    monkeypatch.setattr(state, "classify_job", lambda job: jobs.append(job) or real_job(job))
    rep = state.ReplicaState(Replica(ReplicaType.WORKER, 0), "j-worker-0")
    assert rep.pod_state(42) is None and rep.job_state() is None and not pods and not jobs
    rep.pods["p"] = {"metadata": {"name": "p", "creationTimestamp": "2026-12-02T10:00:00Z"},
                     "status": {"phase": "Running"}}
    first = rep.pod_state(42)
    assert rep.pod_state(42) is first and first.phase is Phase.RUNNING and len(pods) == 1  # same object: kept
    rep.pods["p"] = {**rep.pods["p"], "status": {"phase": "Succeeded"}}  # the watch's update: a new object
    assert rep.pod_state(42).phase is Phase.SUCCEEDED and len(pods) == 2
    assert rep.pod_state(0) is not None and len(pods) == 3  # another restart exit code: classified for it
    rep.job = {"metadata": {"name": "j-worker-0"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert rep.job_state().complete and rep.job_state().complete and len(jobs) == 1
    rep.job = {"metadata": {"name": "j-worker-0"}, "status": {}}
    assert not rep.job_state().complete and len(jobs) == 2


def test_replica_pods_carry_autoscaler_annotations_labels_and_priority_per_type():
    settings = make_settings(
        annotations={"karpenter.sh/do-not-disrupt": None, "example.com/note": "job"},
        labels='{"team.example.com/cost-center": "ml"}', priority_class_name="training",
        replica_overrides={"ps": {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
                                                  "example.com/note": None},
                                  "labels": {"team.example.com/tier": "ps"}, "priority_class_name": "ps-high"},
                           "worker": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}})
    jobs = by_name(render_manifests(make_job(), settings))
    chief, worker, ps = (jobs["Job", f"tfk8s-run-42-{t}-0"] for t in ("chief", "worker", "ps"))
    # job-wide: the safe-to-evict default kept, do-not-disrupt dropped by null, the user's own added
    assert chief["spec"]["template"]["metadata"]["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false", "example.com/note": "job",
        "sidecar.istio.io/inject": "false"}
    # a type's override merges over the job's (and may bring a dropped default back)
    assert worker["spec"]["template"]["metadata"]["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false", "example.com/note": "job",
        "karpenter.sh/do-not-disrupt": "true", "sidecar.istio.io/inject": "false"}
    assert ps["spec"]["template"]["metadata"]["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "true", "sidecar.istio.io/inject": "false"}
    # labels on the Job and its pod, beside tfk8s' own (which still select the replica)
    for obj in (ps["metadata"], ps["spec"]["template"]["metadata"]):
        assert obj["labels"]["team.example.com/cost-center"] == "ml"
        assert obj["labels"]["team.example.com/tier"] == "ps"
        assert obj["labels"]["tfk8s.dev/replica-type"] == "ps"
    assert "team.example.com/tier" not in chief["spec"]["template"]["metadata"]["labels"]
    assert chief["spec"]["template"]["spec"]["priorityClassName"] == "training"
    assert ps["spec"]["template"]["spec"]["priorityClassName"] == "ps-high"
    assert "priorityClassName" not in job_manifest(make_job(), Replica(ReplicaType.PS, 0), make_settings())[
        "spec"]["template"]["spec"]
    for obj in (chief, worker, ps):
        kubernetes_validate.validate(obj, "1.30", strict=True)
