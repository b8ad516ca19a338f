"""The exported pipeline run by a real Argo Workflows controller (v3.7.3) on the real node (``make test-e2e``;
``make test-argo`` runs these alone).

``compiled/train.argo.yaml`` and ``compiled/train.cron.yaml`` are submitted unchanged with the ``argo`` CLI and
``-p`` parameters for a small run (1 worker, 1 epoch of a 512-example MNIST subset): every step runs in a real
pod of the project image with Argo's emissary executor, the data is prepared, the model trained by a replica
the launch step creates, exported, evaluated and pushed on the PersistentVolume, outputs flow from step to step
as Argo output parameters, and the gate's ``when`` conditions choose push or reject. The whole pipeline's runs
read their data from a bucket on a real MinIO (a host process on the node's bridge address), upload the blessed
model there and apply a KServe InferenceService the API server validates against KServe's own CRD (installed for
that test, no KServe controller); the second run reuses the unchanged prefix's preparation. Failures fail the Workflow
with the step's one-line reason in ``argo get``; a drained launch step is retried and the training resumes;
manifests/argo-rbac.yaml is what lets the steps report their outputs; the CronWorkflow starts on schedule and
never twice at once.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.register_assert_rewrite("tests.realnode.argo_fixtures", "tests.realcluster.kserve_crd")

from tests.realcluster.kserve_crd import installed_kserve_crd
from tests.realnode.argo_fixtures import EXECUTOR, Argo, ArgoNamespace, nodes, set_executor
from tests.realnode.e2e_fixtures import KUEUE_QUEUE, E2EKueue, assert_admitted_by_kueue, kueue_admissions
from tests.realnode.realnode import NODE_IP
from tests.steps.s3_server import NO_MINIO, S3Server, minio_binary, running_minio
from tfk8s.core.job import job_name
from tfk8s.core.layout import DEFAULT_ROOT

pytestmark = [pytest.mark.e2e]
pytest_plugins = ["tests.realnode.e2e_fixtures", "tests.realnode.e2e_pods", "tests.realnode.argo_fixtures"]

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "compiled" / "train.argo.yaml"
STEPS = ("ensure-volume", "prepare-dataset", "launch-training", "export-model", "evaluate-model")
SMALL: dict[str, Any] = {
    "workers": 1, "epochs": 1, "max_examples": 512, "batch_size": 64,
    "tfds_data_dir": "/mnt/tfk8s/tfds", "tfds_download": "false",  # the pods reach nothing outside the node
    "kubernetes": {"cpu": "500m", "memory": "2Gi"},
}


BUCKET = "tfk8s-e2e"


@dataclass
class Bucket:
    """MinIO on the node's bridge address with the MNIST subset under ``s3://tfk8s-e2e/mnist/``."""

    server: S3Server
    data_uri: str
    model_uri: str


@contextlib.contextmanager
def bucket_for_the_pipeline(argo: Argo, ns: str, data: Path) -> Iterator[Bucket]:
    """A real MinIO host process listening on :data:`NODE_IP` (where the node's pods reach the machine's own
    services), the bucket holding the prepared ``data`` (TFRecords + metadata.json), its credentials as the Secret
    ``tfk8s-s3`` of ``ns`` (the pipeline's ``s3_secret``) and KServe's InferenceService CRD installed; afterwards
    the CRD is removed, MinIO stopped by its pid and its folder removed."""
    from kubernetes import client

    if minio_binary() is None:
        pytest.skip(NO_MINIO)
    folder = Path(tempfile.mkdtemp(prefix="tfk8s-e2e-minio-"))
    try:
        with running_minio(folder, host=NODE_IP) as server, argo.cluster.cp.admin_client() as api:
            s3 = server.client()
            s3.create_bucket(Bucket=BUCKET)
            for f in sorted(p for p in data.rglob("*") if p.is_file()):
                s3.upload_file(str(f), BUCKET, f"mnist/{f.relative_to(data).as_posix()}")
            client.CoreV1Api(api).create_namespaced_secret(ns, {
                "metadata": {"name": "tfk8s-s3"}, "type": "Opaque",
                "stringData": {"AWS_ACCESS_KEY_ID": server.user, "AWS_SECRET_ACCESS_KEY": server.password}})
            with installed_kserve_crd(api):
                yield Bucket(server, f"s3://{BUCKET}/mnist", f"s3://{BUCKET}/models")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _objects(server: S3Server, prefix: str) -> dict[str, int]:
    """Key -> size of every object under ``prefix`` of the bucket."""
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}


def _inference_service(argo: Argo, ns: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    with argo.cluster.cp.admin_client() as api:
        return client.CustomObjectsApi(api).get_namespaced_custom_object(
            "serving.kserve.io", "v1beta1", ns, "inferenceservices", name)


def _pods(argo: Argo, ns: str, workflow: str = "") -> list[dict[str, Any]]:
    from kubernetes import client

    selector = f"workflows.argoproj.io/workflow={workflow}" if workflow else None
    with argo.cluster.cp.admin_client() as api:
        return [api.sanitize_for_serialization(p) for p in
                client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=selector).items]


def _running_pods(argo: Argo, ns: str) -> list[str]:
    return [p["metadata"]["name"] for p in _pods(argo, ns) if p["status"].get("phase") in ("Pending", "Running")]


def _replica_jobs(argo: Argo, ns: str) -> list[str]:
    from kubernetes import client

    with argo.cluster.cp.admin_client() as api:
        return [j.metadata.name for j in client.BatchV1Api(api).list_namespaced_job(ns).items]


def _get(argo: Argo, ns: str, name: str) -> str:
    """What `argo get` shows (its whole text)."""
    return argo.cli("get", "-n", ns, name).stdout


def _wait_settled(argo: Argo, ns: str, timeout: float = 60) -> None:
    """Until no pod of the namespace runs and no replica Job is left (the launcher's cleanup, the executor)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (_running_pods(argo, ns) or _replica_jobs(argo, ns)):
        time.sleep(1)
    assert _running_pods(argo, ns) == [] and _replica_jobs(argo, ns) == [], "left running"


def test_a_bad_parameter_fails_the_workflow_with_the_steps_one_line_reason(argo: Argo, argo_ns: ArgoNamespace):
    ns = argo_ns.name
    name = argo.submit(ns, WORKFLOW, {**SMALL, "volume_root": "/data"})
    wf = argo.wait(ns, name, timeout=300)
    n = nodes(wf)
    assert wf["status"]["phase"] == "Failed"
    assert list(n) == ["ensure-volume"]  # nothing after it started
    message = n["ensure-volume"]["message"]
    assert message.startswith("main: Error (exit code 1): ensure_volume: error: invalid pipeline parameters: "
                              "volume_root must be /mnt/tfk8s on Kubernetes"), message
    assert "\n" not in message
    assert "volume_root must be /mnt/tfk8s on Kubernetes" in _get(argo, ns, name)
    _wait_settled(argo, ns)


def test_restricted_refuses_argos_own_containers_without_the_admins_executor_setting(argo: Argo,
                                                                                     argo_ns: ArgoNamespace):
    """What Pod Security ``restricted`` and the namespace's LimitRange refuse of Argo's own ``init`` and ``wait``
    containers when the controller's ``executor`` setting gives them less than EXECUTOR (docs/kubernetes.md, Pod
    Security): the first step's pod is refused and the Workflow fails with the API server's message. The
    steps' own containers are not named: they pass (the export's securityContext)."""
    ns = argo_ns.name
    seen = {}
    cases = {"no resources": {"securityContext": EXECUTOR["securityContext"]},
             "a user only": {"resources": EXECUTOR["resources"],
                             "securityContext": {"runAsUser": 1000, "runAsNonRoot": True}}}
    try:
        for case, executor in cases.items():
            with argo.cluster.cp.admin_client() as api:
                set_executor(api, executor)
            time.sleep(5)  # the controller watches its configmap
            wf = argo.wait(ns, argo.submit(ns, WORKFLOW, SMALL), timeout=300)
            n = nodes(wf)
            assert wf["status"]["phase"] in ("Failed", "Error") and list(n) == ["ensure-volume"], (case, n)
            seen[case] = n["ensure-volume"].get("message", "")
    finally:
        with argo.cluster.cp.admin_client() as api:
            set_executor(api, EXECUTOR)
        time.sleep(5)
    print(json.dumps(seen, indent=1))
    assert ("failed quota: compute: must specify limits.cpu for: init,wait; limits.memory for: init,wait; "
            "requests.cpu for: init,wait; requests.memory for: init,wait") in seen["no resources"], seen
    refused = seen["a user only"]
    assert 'violates PodSecurity "restricted:latest"' in refused, seen
    assert 'containers "init", "wait" must set securityContext.allowPrivilegeEscalation=false' in refused, seen
    assert 'containers "init", "wait" must set securityContext.capabilities.drop=["ALL"]' in refused, seen
    assert '"main"' not in refused, seen
    _wait_settled(argo, ns)


def test_without_argo_rbac_the_first_step_with_outputs_fails(argo: Argo, argo_ns_without_argo_rbac: ArgoNamespace):
    """manifests/argo-rbac.yaml is what lets the steps report their outputs (Argo 3.4+: the executor writes a
    WorkflowTaskResult); without it the real controller fails the first step that has one."""
    ns = argo_ns_without_argo_rbac.name
    name = argo.submit(ns, WORKFLOW, SMALL)
    wf = argo.wait(ns, name, timeout=300)
    n = nodes(wf)
    assert wf["status"]["phase"] in ("Failed", "Error")
    assert list(n) == ["ensure-volume"]  # its output: the claim's name
    text = json.dumps(n["ensure-volume"]) + _get(argo, ns, name)
    assert "workflowtaskresults" in text and "forbidden" in text, text
    _wait_settled(argo, ns)


def test_a_replica_exiting_1_fails_the_workflow_naming_it_and_stops_everything(argo: Argo, argo_ns: ArgoNamespace):
    ns = argo_ns.name
    command = "python -c \"import sys; print('tfk8s-e2e: giving up'); sys.exit(1)\""
    name = argo.submit(ns, WORKFLOW, {**SMALL, "command": command})
    wf = argo.wait(ns, name, timeout=600)
    n = nodes(wf)
    assert wf["status"]["phase"] == "Failed"
    assert n["launch-training"]["phase"] == "Failed" and "export-model" not in n
    message = n["launch-training"]["message"]
    assert message.startswith("main: Error (exit code 1): launch_training: error: "), message
    assert "worker-0" in message and "exit code 1" in message.split("launch_training: error: ", 1)[1]
    assert "\n" not in message
    # a failed training is not retried (only a drained launcher is)
    attempts = [x for x in wf["status"]["nodes"].values() if x["type"] == "Pod"
                and x["displayName"].startswith("launch-training")]
    assert len(attempts) == 1
    assert "worker-0" in _get(argo, ns, name)
    _wait_settled(argo, ns)


@pytest.mark.timeout(900)  # two whole runs (~3.5 min), and Kueue's start (~0.5-1 min) when it is the first
def test_the_whole_pipeline_runs_through_argo_and_the_gate_pushes_or_rejects(argo: Argo, argo_ns: ArgoNamespace,
                                                                           e2e_mnist: Path, e2e_kueue: E2EKueue):
    """Both runs read their data from a bucket on a real MinIO (``data_uri``, ``s3_endpoint``, the credentials
    from the Secret ``s3_secret`` names); the blessed one uploads its model to the bucket (``model_uri``) and
    applies an InferenceService the API server validates against KServe's own CRD (``kserve=apply``); the second
    reuses the first one's preparation of the unchanged prefix. Both queue their training in the namespace's
    LocalQueue of the real Kueue v0.17.0 (``-p kubernetes={..., "kueue_queue": ...}``): the replica's Job is held
    by Kueue and started when its ClusterQueue admits it."""
    from tests.realnode.e2e_pods import MNIST_EXAMPLES  # (imported here: a plugin of this module, rewritten)

    ns, vol = argo_ns.name, argo_ns.volume
    cq = e2e_kueue.queue(ns)
    with bucket_for_the_pipeline(argo, ns, e2e_mnist) as bucket:
        params = {**SMALL, "data_uri": bucket.data_uri, "s3_endpoint": bucket.server.endpoint,
                  "model_uri": bucket.model_uri, "kserve": "apply",
                  "kubernetes": {**SMALL["kubernetes"], "kueue_queue": KUEUE_QUEUE}}
        t0 = time.monotonic()
        name = argo.submit(ns, WORKFLOW, {**params, "min_accuracy": 0.0})
        wf = argo.wait(ns, name, timeout=900)
        blessed_s = time.monotonic() - t0
        n = nodes(wf)
        assert wf["status"]["phase"] == "Succeeded", _get(argo, ns, name)
        assert {k: v["phase"] for k, v in n.items()} == {**dict.fromkeys(STEPS, "Succeeded"),
                                                         "push-model": "Succeeded", "reject-model": "Skipped"}
        run = vol / "runs" / wf["metadata"]["uid"]  # the run id is the Workflow's uid
        # every step ran in a pod of the project image (Argo's emissary wraps the step's own command)
        pods = _pods(argo, ns, name)
        assert len(pods) == 6
        for pod in pods:
            (main,) = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
            assert main["image"] == argo.image
            command = main["command"]
            assert command[:2] == ["/var/run/argo/argoexec", "emissary"]
            assert command[command.index("--") + 1] == "python"
            # admitted in a restricted namespace with a quota: every container, Argo's init and wait too, declared
            # requests and limits and restricted's securityContext (the export's, the executor setting's)
            for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
                assert set(c["resources"]["limits"]) >= {"cpu", "memory"}, (pod["metadata"]["name"], c["name"])
                assert c["securityContext"]["allowPrivilegeEscalation"] is False, (pod["metadata"]["name"],
                                                                                    c["name"])
            assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        # the outputs flowed: the export's versioned path is what evaluate and push were given
        exported = {p["name"]: p["value"] for p in n["export-model"]["outputs"]["parameters"]}["exported_model"]
        assert exported == "/mnt/tfk8s/models/mnist-cnn/1"
        for consumer in ("evaluate-model", "push-model"):
            given = {p["name"]: p["value"] for p in n[consumer]["inputs"]["parameters"]}
            assert given["exported_model"] == exported, consumer
        assert {p["name"]: p["value"] for p in n["evaluate-model"]["outputs"]["parameters"]}["blessed"] == "true"
        # ... the data came from the bucket into the volume's store (s3.<bucket>/<prefix>/<key>), which the run's
        # record names
        record = json.loads((run / "data.json").read_text())
        prepared = vol / Path(record["path"]).relative_to(DEFAULT_ROOT)  # the pod's path, under the PV's folder
        assert prepared.parent == vol / "datasets" / f"s3.{BUCKET}" / "mnist" and record["reused"] is False
        metadata = json.loads((prepared / "metadata.json").read_text())
        assert metadata["splits"]["train"]["num_examples"] == MNIST_EXAMPLES
        assert sorted(p.name for p in prepared.iterdir() if p.suffix == ".tfrecord") == sorted(
            p.name for p in e2e_mnist.iterdir() if p.suffix == ".tfrecord")
        job = json.loads((run / "train" / "job.json").read_text())
        assert job["state"] == "Succeeded" and job["backend"] == "kubernetes"
        assert (run / "train" / "replica-logs" / "worker-0.log").stat().st_size > 0
        # the queue came through the Workflow's `kubernetes` parameter into the launch step: Kueue held the
        # replica's Job and started it on its ClusterQueue's admission (Kueue's events; the Job is gone)
        given = {p["name"]: p["value"] for p in wf["spec"]["arguments"]["parameters"]}
        assert json.loads(given["kubernetes"])["kueue_queue"] == KUEUE_QUEUE, given["kubernetes"]
        _assert_admitted_by_kueue(argo, ns, wf["metadata"]["uid"], cq)
        assert (vol / "models" / "mnist-cnn" / "1" / "saved_model.pb").is_file()
        served = vol / "serving" / "mnist-cnn" / "1"
        assert (served / "saved_model.pb").is_file()
        # ... the blessed version is in the bucket too, file for file, and KServe's InferenceService serves it
        uploaded = _objects(bucket.server, "models/")
        assert uploaded == {f"models/mnist-cnn/1/{p.relative_to(served).as_posix()}": p.stat().st_size
                            for p in served.rglob("*") if p.is_file()}
        isvc = _inference_service(argo, ns, "mnist-cnn")
        assert isvc["spec"]["predictor"]["model"] == {"modelFormat": {"name": "tensorflow"},
                                                      "storageUri": f"s3://{BUCKET}/models/mnist-cnn"}
        assert isvc["metadata"]["annotations"]["tfk8s.dev/model-version"] == "1"
        _wait_settled(argo, ns)

        t0 = time.monotonic()
        name = argo.submit(ns, WORKFLOW, {**params, "min_accuracy": 0.999, "fail_on_unblessed": "true"})
        wf = argo.wait(ns, name, timeout=900)
        rejected_s = time.monotonic() - t0
        n = nodes(wf)
        assert wf["status"]["phase"] == "Failed"
        assert {k: v["phase"] for k, v in n.items()} == {**dict.fromkeys(STEPS, "Succeeded"),
                                                         "push-model": "Skipped", "reject-model": "Failed"}
        assert "model not blessed, so not pushed" in n["reject-model"]["message"]
        assert "< min_accuracy 0.9990" in n["reject-model"]["message"]
        assert "not blessed" in _get(argo, ns, name)
        assert (vol / "models" / "mnist-cnn" / "2" / "saved_model.pb").is_file()  # exported, evaluated, not served
        assert sorted(p.name for p in (vol / "serving" / "mnist-cnn").iterdir()) == ["1"]
        assert _objects(bucket.server, "models/") == uploaded  # nor uploaded
        assert _inference_service(argo, ns, "mnist-cnn")["metadata"]["annotations"]["tfk8s.dev/model-version"] == "1"
        # the second run reused the first one's preparation of the unchanged prefix (one listing, nothing read)
        again = json.loads((vol / "runs" / wf["metadata"]["uid"] / "data.json").read_text())
        assert (again["path"], again["reused"]) == (record["path"], True)
        _assert_admitted_by_kueue(argo, ns, wf["metadata"]["uid"], cq)
        _wait_settled(argo, ns)
    print(f"\nargo pipeline from a bucket: blessed run {blessed_s:.0f}s, rejected run {rejected_s:.0f}s")


def _assert_admitted_by_kueue(argo: Argo, ns: str, run_id: str, cq: str) -> None:
    """The run's one replica Job (``worker-0``) was held by Kueue and started on ``cq``'s admission."""
    with argo.cluster.cp.admin_client() as api:
        admissions = kueue_admissions(api, ns, job_name(run_id))
    assert_admitted_by_kueue(admissions, [f"{job_name(run_id)}-worker-0"], cq)


def test_a_drained_launch_step_is_retried_and_the_training_resumes(argo: Argo, argo_ns: ArgoNamespace):
    """The launch step's pod is deleted mid-training (what a node drain does to it): the launcher gets SIGTERM,
    stops its replicas and exits 143; Argo retries the step (retryStrategy), the new launcher creates the
    replicas again under the same job name, and the training resumes from its backup and runs to its end."""
    from kubernetes import client

    ns, vol = argo_ns.name, argo_ns.volume
    name = argo.submit(ns, WORKFLOW, {**SMALL, "epochs": 8, "max_examples": 3000, "min_accuracy": 0.0})
    uid = ""
    deadline = time.monotonic() + 600
    progress: dict[str, Any] = {}
    while time.monotonic() < deadline:  # until the replica is in its third epoch
        uid = uid or argo.workflow(ns, name)["metadata"]["uid"]
        path = vol / "runs" / uid / "train" / "progress" / "worker-0.json"
        try:
            progress = json.loads(path.read_text())
        except (OSError, ValueError):
            progress = {}
        if progress.get("state") == "running" and progress.get("epoch", 0) >= 3:  # epochs 1 and 2 backed up
            break
        time.sleep(0.5)
    assert progress.get("epoch", 0) >= 3, f"never reached epoch 3: {progress}"
    (launcher,) = [p for p in _pods(argo, ns, name)
                   if p["metadata"]["annotations"].get("workflows.argoproj.io/node-name", "").endswith(
                       ".launch-training(0)")]
    with argo.cluster.cp.admin_client() as api:
        client.CoreV1Api(api).delete_namespaced_pod(launcher["metadata"]["name"], ns)
    wf = argo.wait(ns, name, timeout=900)
    assert wf["status"]["phase"] == "Succeeded", _get(argo, ns, name)
    attempts = sorted((x for x in wf["status"]["nodes"].values() if x["type"] == "Pod"
                       and x["displayName"].startswith("launch-training")), key=lambda x: x["startedAt"])
    assert [a["phase"] for a in attempts][-1] == "Succeeded" and len(attempts) == 2, attempts
    first = attempts[0]
    assert first["phase"] in ("Failed", "Error")
    assert "143" in first.get("message", "") or first["phase"] == "Error", first
    log = (vol / "runs" / uid / "train" / "replica-logs" / "worker-0.log").read_text()  # both attempts
    assert log.count("replica=worker-0 strategy=") == 2 and "saved the model to" in log, log[-2000:]
    # the retried launcher's replica resumed from the backup of the epochs that had ended (BackupAndRestore in
    # checkpoints/backup on the volume), not from epoch 1
    # (from the last epoch's backup, or, the launcher having stopped it with SIGTERM, in the epoch it saved in)
    resumed = re.search(r"resumed (from|in) epoch (\d+) of 8", log)
    done = resumed and (int(resumed[2]) if resumed[1] == "from" else int(resumed[2]) - 1)
    assert resumed and done >= 2 and log.count("epoch 1/8") == 1, log[-2000:]
    _wait_settled(argo, ns)


def test_the_cron_workflow_starts_on_schedule_and_never_twice_at_once(argo: Argo, argo_ns: ArgoNamespace, tmp_path):
    """The CronWorkflow export with an every-minute schedule (`--compile --format argo --schedule '* * * * *'`;
    `argo cron create --schedule` would set Argo's deprecated `schedule` beside the export's `schedules`, which
    3.7 refuses) and a training that outlasts a minute: a run starts at the first minute, and at the next one the
    controller starts none (concurrencyPolicy: Forbid)."""
    import subprocess
    import sys

    ns = argo_ns.name
    cron_file = tmp_path / "every-minute.cron.yaml"
    subprocess.run([sys.executable, "pipelines/train.py", "--compile", "--format", "argo", "--schedule", "* * * * *",
                    "--output", str(cron_file)], check=True, cwd=REPO, capture_output=True, timeout=300)
    sleeper = "python -c \"import time; time.sleep(150)\""
    argv = ["cron", "create", "-n", ns, str(cron_file), *argo.params({**SMALL, "command": sleeper, "max_examples": 64})]
    created = time.time()
    argo.cli(*argv)
    cron = "tfk8s-train"  # the export's metadata.name

    def runs() -> list[dict[str, Any]]:
        from kubernetes import client

        with argo.cluster.cp.admin_client() as api:
            return client.CustomObjectsApi(api).list_namespaced_custom_object(
                "argoproj.io", "v1alpha1", ns, "workflows",
                label_selector=f"workflows.argoproj.io/cron-workflow={cron}")["items"]

    deadline = time.monotonic() + 90
    while not runs() and time.monotonic() < deadline:
        time.sleep(1)
    (first,) = runs()
    started = time.time()
    assert started - created < 75  # at the first full minute
    # past the next minute, the first run still running: no second one
    next_minute = (int(started // 60) + 1) * 60 + 15
    while time.time() < next_minute:
        time.sleep(1)
    now = runs()
    assert [w["metadata"]["name"] for w in now] == [first["metadata"]["name"]]
    assert now[0].get("status", {}).get("phase") == "Running"
    log = argo.controller_log(200)
    assert "has 'ConcurrencyPolicy: Forbid' and has an active Workflow so it was not run" in log
    argo.cli("terminate", "-n", ns, first["metadata"]["name"])
    assert argo.wait(ns, first["metadata"]["name"], timeout=120)["status"]["phase"] == "Failed"
    argo.cli("cron", "delete", "-n", ns, cron)  # (its Workflows go with it: they are owned by it)
    _wait_settled(argo, ns, timeout=90)
