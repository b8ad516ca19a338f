"""The user's path of docs/kfp.md against a real Kubeflow Pipelines 2.17.0 backend on the e2e node
(``make test-kfp``; tests/realnode/kfp_fixtures.py): ``python pipelines/train.py --run --host URL --param ...`` compiles our
pipeline, KFP's API server turns the IR into an Argo Workflow, KFP's driver resolves each task's parameters and
PVC mount, KFP's launcher wraps each step, and the outputs land in ML Metadata (our adapter over the PyPI store)
and the object store (MinIO)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import time
import urllib.error
from pathlib import Path
from typing import Any

import pytest

pytest.register_assert_rewrite("tests.realnode.kfp_fixtures", "tests.realnode.argo_fixtures")

from tests.realnode.e2e_fixtures import KUEUE_QUEUE, E2EKueue, assert_admitted_by_kueue, kueue_admissions
from tests.realnode.kfp_fixtures import NAMESPACE, POD_SECURITY_LEVEL, KFPBackend
from tfk8s.core.job import job_name

pytestmark = [pytest.mark.kfp]
pytest_plugins = ["tests.realnode.e2e_fixtures", "tests.realnode.argo_fixtures", "tests.realnode.kfp_fixtures"]

REPO = Path(__file__).resolve().parents[2]
SMALL: dict[str, Any] = {
    "workers": 1, "epochs": 1, "max_examples": 512, "batch_size": 64,
    "tfds_data_dir": "/mnt/tfk8s/tfds", "tfds_download": "false",  # the pods reach nothing outside the node
    "kubernetes": {"cpu": "500m", "memory": "2Gi"},
}
FINISHED = ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED")


def train_py(kfp: KFPBackend, *args: str, params: dict[str, Any] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess:
    """``python pipelines/train.py ARGS --host URL --param k=v ...`` as a user runs it (docs/kfp.md)."""
    from tfk8s import DEFAULT_IMAGE

    argv = [sys.executable, str(REPO / "pipelines" / "train.py"), *args, "--host", kfp.url]
    merged = {**({"image": kfp.image} if kfp.image != DEFAULT_IMAGE else {}), **(params or {})}
    for k, v in merged.items():
        argv += ["--param", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def start_run(kfp: KFPBackend, params: dict[str, Any], *extra: str) -> str:
    """``train.py --run``; the run's id (from the line it prints)."""
    done = train_py(kfp, "--run", "--experiment", "tfk8s-e2e", *extra, params=params)
    assert done.returncode == 0, done.stdout + done.stderr
    m = re.search(r"started run (\S+)", done.stdout)
    assert m, done.stdout
    return m.group(1)


def run_and_wait(kfp: KFPBackend, params: dict[str, Any]) -> tuple[str, subprocess.CompletedProcess]:
    """``train.py --run --wait``: the run's id and the finished command (exit 1 and the failed steps' reasons,
    read through KFP's API, on stderr when the run did not succeed)."""
    done = train_py(kfp, "--run", "--experiment", "tfk8s-e2e", "--wait", "1200", params=params, timeout=1300)
    m = re.search(r"started run (\S+)", done.stdout)
    assert m, done.stdout + done.stderr
    return m.group(1), done


def wait_run(kfp: KFPBackend, run_id: str, timeout: float = 1200) -> dict[str, Any]:
    """Poll ``GET /apis/v2beta1/runs/ID`` until its state is final; the run as the API returns it."""
    deadline = time.monotonic() + timeout
    run: dict[str, Any] = {}
    while time.monotonic() < deadline:
        run = kfp.api(f"runs/{run_id}")
        if run.get("state") in FINISHED:
            return run
        time.sleep(3)
    raise AssertionError(f"run {run_id} not finished after {timeout:.0f}s: {json.dumps(run)[:3000]}\n"
                         f"{kfp.diagnostics()}")


def run_pods(kfp: KFPBackend, run_id: str) -> list[dict[str, Any]]:
    """The pods of the run's Argo Workflow (the Workflow carries KFP's label ``pipeline/runid``)."""
    from kubernetes import client

    with kfp.argo.cluster.cp.admin_client() as api:
        wfs = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "argoproj.io", "v1alpha1", NAMESPACE, "workflows", label_selector=f"pipeline/runid={run_id}")["items"]
        assert len(wfs) == 1, [w["metadata"]["name"] for w in wfs]
        name = wfs[0]["metadata"]["name"]
        return [api.sanitize_for_serialization(p) for p in client.CoreV1Api(api).list_namespaced_pod(
            NAMESPACE, label_selector=f"workflows.argoproj.io/workflow={name}").items]


STEPS = ("ensure-volume", "prepare-dataset", "launch-training", "export-model", "evaluate-model", "push-model",
         "reject-model")


def step_pods(kfp: KFPBackend, run_id: str) -> dict[str, dict[str, Any]]:
    """Our steps' pods of the run (not KFP's driver pods) by step name: image, claims mounted, phase."""
    steps: dict[str, dict[str, Any]] = {}
    for p in run_pods(kfp, run_id):
        main = [c for c in p["spec"]["containers"] if c["name"] == "main"]
        if not main or "kfp-driver-launcher" in main[0]["image"]:
            continue
        node = p["metadata"].get("annotations", {}).get("workflows.argoproj.io/node-name", p["metadata"]["name"])
        step = next((s for s in STEPS if s in node), node)
        claims = [v["persistentVolumeClaim"]["claimName"] for v in p["spec"].get("volumes", [])
                  if "persistentVolumeClaim" in v]
        steps[step] = {"image": main[0]["image"], "claims": claims, "phase": p["status"]["phase"],
                       "pod": p["metadata"]["name"]}
    return steps


def kfp_namespace_level(kfp: KFPBackend) -> str:
    """The Pod Security level the namespace of KFP and its runs enforces."""
    from kubernetes import client

    with kfp.argo.cluster.cp.admin_client() as api:
        labels = client.CoreV1Api(api).read_namespace(NAMESPACE).metadata.labels
    return labels.get("pod-security.kubernetes.io/enforce", "")


def container_shapes(pods: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, dict[str, Any]]]]:
    """Per pod: its kind (``driver``: KFP's driver image; ``step``: ours), name, and per container (init
    containers first) the limits it declared and its securityContext's restricted fields."""
    out = []
    for p in pods:
        main = [c for c in p["spec"]["containers"] if c["name"] == "main"]
        kind = "driver" if main and "kfp-driver-launcher" in main[0]["image"] else "step"
        containers = {}
        for c in p["spec"].get("initContainers", []) + p["spec"]["containers"]:
            sc = c.get("securityContext") or {}
            containers[c["name"]] = {"limits": sorted((c.get("resources") or {}).get("limits") or {}),
                                     **{k: sc.get(k) for k in ("allowPrivilegeEscalation", "capabilities",
                                                               "runAsNonRoot", "runAsUser")}}
        out.append((kind, p["metadata"]["name"], containers))
    return out


def mlmd_artifacts(kfp: KFPBackend) -> list[dict[str, Any]]:
    """Every artifact in ML Metadata, read back over gRPC with MLMD's own client: type, uri, custom properties."""
    py = subprocess.run(["bash", str(REPO / "hack/kfp/mlmd_venv.sh")], check=True, capture_output=True,
                        text=True).stdout.strip().splitlines()[-1]
    port = kfp.procs["mlmd"].port
    code = (
        "import json, sys\nfrom google.protobuf.json_format import MessageToDict\n"
        "from ml_metadata import metadata_store\nfrom ml_metadata.proto import metadata_store_pb2 as pb\n"
        "s = metadata_store.MetadataStore(pb.MetadataStoreClientConfig(host=sys.argv[1], port=int(sys.argv[2])))\n"
        "print(json.dumps([{'type': a.type, 'uri': a.uri, 'name': a.name,\n"
        "  'custom': MessageToDict(a)['customProperties'] if a.custom_properties else {}}\n"
        "  for a in s.get_artifacts()]))\n")
    from tests.realnode.realnode import NODE_IP

    done = subprocess.run([py, "-c", code, NODE_IP, str(port)], check=False, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.timeout(900)  # the first kfp test: the backend's start (~2 min) and Kueue's (~0.5-1) count
def test_the_users_run_succeeds_on_kfp_with_every_step_in_our_image_and_outputs_recorded(kfp_backend: KFPBackend,
                                                                                          e2e_kueue: E2EKueue):
    """The run queues its training in the namespace's LocalQueue of the real Kueue v0.17.0 (``--param
    kubernetes={..., "kueue_queue": ...}``): the replica's Job is held by Kueue and started on its admission."""
    kfp = kfp_backend
    cq = e2e_kueue.queue(NAMESPACE)
    t0 = time.monotonic()
    run_id = start_run(kfp, {**SMALL, "min_accuracy": 0.0,
                             "kubernetes": {**SMALL["kubernetes"], "kueue_queue": KUEUE_QUEUE}})
    run = wait_run(kfp, run_id)
    seconds = time.monotonic() - t0
    assert run["state"] == "SUCCEEDED", json.dumps(run)[:4000] + "\n" + kfp.diagnostics()
    steps = step_pods(kfp, run_id)
    print(f"\nKFP run {run_id} SUCCEEDED in {seconds:.0f}s; step pods: {json.dumps(steps)}")
    assert set(steps) == set(STEPS) - {"reject-model"}, steps  # push-model ran, inside the condition
    for task, s in steps.items():
        assert s["image"] == kfp.image, (task, s)
        # ensure-volume checks the claim before anything mounts it; every other step mounts it
        assert s["claims"] == ([] if task == "ensure-volume" else ["tfk8s-data"]), (task, s)
    # admitted in a production-shaped namespace (Pod Security restricted, a quota, a LimitRange without defaults):
    # every container of every pod of the run, KFP's drivers and its launcher init and Argo's init and wait
    # included, declared limits and restricted's securityContext
    assert kfp_namespace_level(kfp) == POD_SECURITY_LEVEL == "restricted"
    shapes = container_shapes(run_pods(kfp, run_id))
    print("containers of the run's pods:", json.dumps(shapes))
    assert {"driver", "step"} <= {kind for kind, _, _ in shapes}, shapes
    for kind, pod, containers in shapes:
        for name, shape in containers.items():
            assert shape["limits"] == ["cpu", "memory"] and shape["allowPrivilegeEscalation"] is False, (pod, name)
            assert shape["capabilities"] == {"drop": ["ALL"]}, (kind, pod, name, shape)
    # exported, and pushed to the serving folder, on the volume; the run's folder is named by KFP's run id
    assert (kfp.volume / "models" / "mnist-cnn" / "1" / "saved_model.pb").is_file()
    assert (kfp.volume / "serving" / "mnist-cnn" / "1" / "saved_model.pb").is_file()
    job = json.loads((kfp.volume / "runs" / run_id / "train" / "job.json").read_text())
    assert job["state"] == "Succeeded" and job["backend"] == "kubernetes"
    # Kueue held the replica's Job and started it on its ClusterQueue's admission (its events; the Job is gone)
    with kfp.argo.cluster.cp.admin_client() as api:
        admissions = kueue_admissions(api, NAMESPACE, job_name(run_id))
    print("Kueue's events of the run's replica Jobs:", json.dumps(admissions))
    assert_admitted_by_kueue(admissions, [f"{job_name(run_id)}-worker-0"], cq)
    arts = mlmd_artifacts(kfp)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for a in arts:
        by_type.setdefault(a["type"], []).append(a)
    print("MLMD artifact types:", {t: len(v) for t, v in by_type.items()})
    for t in ("system.Metrics", "system.ClassificationMetrics", "system.HTML", "system.Markdown", "system.Model"):
        assert t in by_type, (t, sorted(by_type))
    cm = by_type["system.ClassificationMetrics"][0]["custom"]
    assert "confusionMatrix" in cm, cm
    matrix = cm["confusionMatrix"]["structValue"]  # as KFP's SDK logs it: annotationSpecs + rows
    matrix = matrix.get("struct", matrix)  # MessageToDict of MLMD's Value wraps the Struct once more (seen)
    assert [c["displayName"] for c in matrix["annotationSpecs"]] == [str(d) for d in range(10)], matrix
    assert len(matrix["rows"]) == 10 and all(len(r["row"]) == 10 for r in matrix["rows"]), matrix
    metrics = by_type["system.Metrics"][0]["custom"]
    assert metrics, by_type["system.Metrics"]
    assert {"accuracy", "loss"} <= set(metrics), metrics
    # the files behind the HTML and Markdown artifacts, read from the object store by their MLMD URIs with a
    # signed S3 GET, as the KFP UI's server reads them
    files = {}
    for t in ("system.HTML", "system.Markdown"):
        uri = by_type[t][0]["uri"]
        assert uri.startswith(("minio://", "s3://")) and run_id in uri, uri
        files[t] = kfp.s3_get(uri).decode()
    assert files["system.HTML"].startswith("<!DOCTYPE html>") and run_id in files["system.HTML"]
    assert "data:image/png;base64," in files["system.HTML"]  # pictures embedded: the UI's iframe has no origin
    assert files["system.Markdown"].startswith("# tfk8s training run") and "## Quality gate" in files["system.Markdown"]
    # the run as the API reports it: every task's state (KFP's own driver tasks too)
    tasks = {t["display_name"]: t["state"] for t in run["run_details"]["task_details"]}
    print("API task states:", tasks)
    for step in set(STEPS) - {"reject-model"}:
        assert tasks.get(step) == "SUCCEEDED", (step, tasks)


def test_restricted_refuses_a_kfp_step_container_that_does_not_say_run_as_non_root(kfp_backend: KFPBackend,
                                                                                     tmp_path: Path):
    """What Pod Security ``restricted`` refuses of a KFP run's pods: not KFP's own (its drivers pass, the user's
    run above shows), but a step whose container does not declare ``runAsNonRoot`` (a pipeline without
    kfp-kubernetes' ``set_security_context``, which every tfk8s step has): KFP's compiler sets the executor pod's
    seccomp and its containers' privilege escalation and capabilities, not the step container's runAsNonRoot
    (docs/kubernetes.md, Pod Security)."""
    import kfp.client
    from kfp import compiler, dsl

    image = kfp_backend.image

    @dsl.container_component
    def hello():
        return dsl.ContainerSpec(image=image, command=["python", "-c", "print('hello')"])

    @dsl.pipeline(name="tfk8s-e2e-no-run-as-non-root")
    def no_run_as_non_root():
        hello().set_cpu_request("100m").set_memory_request("64Mi").set_cpu_limit("1").set_memory_limit("256Mi")

    package = tmp_path / "p.yaml"
    compiler.Compiler().compile(no_run_as_non_root, str(package))
    client = kfp.client.Client(host=kfp_backend.url)
    run_id = client.create_run_from_pipeline_package(str(package), experiment_name="tfk8s-e2e").run_id
    run = wait_run(kfp_backend, run_id, timeout=300)
    from kubernetes import client as k8s

    with kfp_backend.argo.cluster.cp.admin_client() as api:
        (wf,) = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
            "argoproj.io", "v1alpha1", NAMESPACE, "workflows", label_selector=f"pipeline/runid={run_id}")["items"]
    messages = [n.get("message", "") for n in wf["status"].get("nodes", {}).values() if "forbidden" in
                n.get("message", "")]
    print("refused:", json.dumps(messages, indent=1))
    assert run["state"] == "FAILED", json.dumps(run)[:3000]
    assert messages and all('violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container '
                            '"main" must set securityContext.runAsNonRoot=true)' in m for m in messages), messages


def test_a_not_blessed_model_with_fail_on_unblessed_fails_the_run_naming_the_gate(kfp_backend: KFPBackend):
    kfp = kfp_backend
    run_id, done = run_and_wait(kfp, {**SMALL, "min_accuracy": 0.999, "fail_on_unblessed": True})
    run = kfp.api(f"runs/{run_id}")
    print(f"\nnot-blessed KFP run {run_id}: state {run['state']}; train.py --run --wait said:\n{done.stderr[-1500:]}")
    assert run["state"] == "FAILED", json.dumps(run)[:3000]
    steps = step_pods(kfp, run_id)
    assert "push-model" not in steps and steps["reject-model"]["phase"] == "Failed", steps
    # why, as the user sees it: KFP 2.17's v2 API gives no reason (the run's error is null); `--wait` reads the
    # failed step's message from the run's Argo Workflow through the v1beta1 API (kfp_runs.run_failures)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.strip().startswith("reject-model:")]
    assert "exit code 1" in line and "not blessed" in line and "min_accuracy 0.999" in line, done.stderr


def _settled(kfp: KFPBackend, timeout: float = 120) -> dict[str, list[str]]:
    """Waits until no replica pod, Job or Service of the launcher (label ``tfk8s.dev/replica-type``) is left in
    the namespace; what is left (empty lists when settled)."""
    from kubernetes import client

    def left() -> dict[str, list[str]]:
        sel = "tfk8s.dev/replica-type"
        with kfp.argo.cluster.cp.admin_client() as api:
            core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
            return {"pods": [p.metadata.name for p in core.list_namespaced_pod(NAMESPACE, label_selector=sel).items],
                    "jobs": [j.metadata.name for j in batch.list_namespaced_job(NAMESPACE, label_selector=sel).items],
                    "services": [v.metadata.name for v in
                                 core.list_namespaced_service(NAMESPACE, label_selector=sel).items]}

    deadline = time.monotonic() + timeout
    while any((found := left()).values()) and time.monotonic() < deadline:
        time.sleep(2)
    return found


def test_a_replica_exiting_1_fails_the_run_naming_the_replica_and_leaves_nothing(kfp_backend: KFPBackend):
    kfp = kfp_backend
    command = "python -c \"import sys; print('tfk8s-e2e: giving up'); sys.exit(1)\""
    run_id, done = run_and_wait(kfp, {**SMALL, "command": command})
    run = kfp.api(f"runs/{run_id}")
    print(f"\nreplica-exit KFP run {run_id}: state {run['state']}; train.py --run --wait said:\n"
          f"{done.stderr[-1500:]}")
    assert run["state"] == "FAILED", json.dumps(run)[:3000]
    steps = step_pods(kfp, run_id)
    assert steps["launch-training"]["phase"] == "Failed" and "export-model" not in steps, steps
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.strip().startswith("launch-training:")]
    assert "worker-0" in line and "exit code 1" in line, done.stderr
    assert _settled(kfp) == {"pods": [], "jobs": [], "services": []}


def test_the_image_parameter_runs_every_step_and_every_replica_in_that_tag(kfp_backend: KFPBackend):
    """``--param image=<another tag of our image>``: the steps (KFP resolves ``set_container_image`` at run
    time) and the replicas the launch step creates all run it; the tag is one more name of the same image in
    the node's containerd (no registry here), removed after."""
    from kubernetes import client

    kfp = kfp_backend
    node = kfp.argo.cluster.node
    other = kfp.image.rsplit(":", 1)[0] + ":e2e-other-tag"
    node.ctr("images", "tag", "--force", kfp.image, other)
    replica_images: set[str] = set()
    try:
        done = train_py(kfp, "--run", "--experiment", "tfk8s-e2e", params={**SMALL, "min_accuracy": 0.0,
                                                                             "image": other})
        assert done.returncode == 0, done.stdout + done.stderr
        run_id = re.search(r"started run (\S+)", done.stdout).group(1)
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline:  # the replicas' pods are gone when the run ends: look while it runs
            with kfp.argo.cluster.cp.admin_client() as api:
                for p in client.CoreV1Api(api).list_namespaced_pod(
                        NAMESPACE, label_selector="tfk8s.dev/replica-type").items:
                    replica_images.update(c.image for c in p.spec.containers)
            if kfp.api(f"runs/{run_id}").get("state") in FINISHED:
                break
            time.sleep(2)
        run = wait_run(kfp, run_id, timeout=60)
        steps = step_pods(kfp, run_id)
    finally:
        node.ctr("images", "rm", other, check=False)
    print(f"\nimage={other} KFP run {run_id}: {run['state']}; steps {json.dumps(steps)}; replicas {replica_images}")
    assert run["state"] == "SUCCEEDED", json.dumps(run)[:3000]
    assert set(steps) == set(STEPS) - {"reject-model"}, steps
    assert {s["image"] for s in steps.values()} == {other}, steps
    assert replica_images == {other}, replica_images


def _versions(kfp: KFPBackend, name: str) -> list[str]:
    pipelines = kfp.api("pipelines?page_size=100").get("pipelines", [])
    (pipe,) = [p for p in pipelines if p["display_name"] == name] or [None]
    if pipe is None:
        return []
    return [v["display_name"] for v in
            kfp.api(f"pipelines/{pipe['pipeline_id']}/versions?page_size=100").get("pipeline_versions", [])]


FAILS_AT_ONCE = {**SMALL, "pvc_name": "tfk8s-no-such-claim"}  # ensure-volume fails: a run that ends in a minute


def test_upload_twice_unchanged_is_one_pipeline_version_and_a_changed_package_a_second(kfp_backend: KFPBackend,
                                                                                        tmp_path: Path):
    import yaml

    kfp = kfp_backend
    runs = [start_run(kfp, FAILS_AT_ONCE, "--upload"), start_run(kfp, FAILS_AT_ONCE, "--upload")]
    versions = _versions(kfp, "tfk8s-train")
    print(f"\nafter two uploads of the same package: versions {versions}")
    assert len(versions) == 1, versions
    package = tmp_path / "train.yaml"
    assert subprocess.run([sys.executable, str(REPO / "pipelines/train.py"), "--compile", "--output", str(package)],
                          check=False, capture_output=True, cwd=REPO).returncode == 0
    spec, *platform = yaml.safe_load_all(package.read_text())  # the pipeline spec, then the platform spec
    spec["root"]["inputDefinitions"]["parameters"]["epochs"]["defaultValue"] = 7.0  # a changed default
    package.write_text(yaml.safe_dump_all([spec, *platform], sort_keys=False))
    runs.append(start_run(kfp, FAILS_AT_ONCE, "--upload", "--package", str(package)))
    versions = _versions(kfp, "tfk8s-train")
    print(f"after a changed package: versions {versions}")
    assert len(versions) == 2, versions
    for r in runs:  # each run ran the uploaded version (no embedded spec)
        run = wait_run(kfp, r, timeout=600)
        assert run.get("pipeline_version_reference", {}).get("pipeline_version_id"), run
        assert run["state"] == "FAILED", run["state"]


def _runs_of(kfp: KFPBackend, recurring_run_id: str) -> list[dict[str, Any]]:
    runs = kfp.api("runs?page_size=100&sort_by=created_at").get("runs", [])
    return [r for r in runs if r.get("recurring_run_id") == recurring_run_id]


def _t(stamp: str | None) -> float:
    import datetime

    if not stamp or stamp.startswith("1970"):
        return float("inf")
    return datetime.datetime.fromisoformat(stamp).timestamp()


@pytest.mark.timeout(1200)  # two slots, a pause of two, a slot after resuming, the runs' ends: ~8 min
def test_a_recurring_run_every_minute_runs_one_at_a_time_and_never_backfills(kfp_backend: KFPBackend):
    from tfk8s.submit import kfp_client
    from tfk8s.submit.errors import KfpClientError

    kfp = kfp_backend
    before = kfp.api("recurringruns").get("recurringRuns", [])
    # refused before anything is sent: a 5-field cron, enable_caching=True
    done = train_py(kfp, "--schedule", "* * * * *", params=FAILS_AT_ONCE)
    assert done.returncode != 0 and "has 5 fields; KFP cron has 6" in done.stderr, done.stdout + done.stderr
    with pytest.raises(KfpClientError, match="enable_caching=True"):
        kfp_client.create_schedule(kfp.url, REPO / "compiled/train.yaml", "0 * * * * *", {}, enable_caching=True)
    assert kfp.api("recurringruns").get("recurringRuns", []) == before
    done = train_py(kfp, "--schedule", "0 * * * * *", "--experiment", "tfk8s-e2e", "--schedule-name",
                    "tfk8s-e2e-every-minute", params=FAILS_AT_ONCE)
    assert done.returncode == 0, done.stdout + done.stderr
    rr = re.search(r"\((\S+)\) in experiment", done.stdout).group(1)
    try:
        deadline = time.monotonic() + 600
        while len(runs := _runs_of(kfp, rr)) < 2 and time.monotonic() < deadline:
            time.sleep(5)
        assert len(runs) >= 2, (runs, kfp.diagnostics())
        # paused while the second runs, for two slots past its end; then resumed
        kfp.api(f"recurringruns/{rr}:disable", method="POST", body={})
        paused = time.time()
        runs = _runs_of(kfp, rr)
        while not all(r["state"] in FINISHED for r in runs) and time.monotonic() < deadline:
            time.sleep(5)
            runs = _runs_of(kfp, rr)
        time.sleep(max(0.0, paused + 130 - time.time()))
        assert len(_runs_of(kfp, rr)) == len(runs)  # nothing while paused
        kfp.api(f"recurringruns/{rr}:enable", method="POST", body={})
        resumed = time.time()
        time.sleep(max(0.0, 60 - time.time() % 60) + 45)  # past the next slot
        after = _runs_of(kfp, rr)
        # paused again and its runs let end before it is deleted: deleting a recurring run takes the Workflow of
        # a run still going with it (the ScheduledWorkflow owns it), and that run stays RUNNING in KFP's API
        # (seen 2026-12-04: 4 minutes later, still RUNNING)
        kfp.api(f"recurringruns/{rr}:disable", method="POST", body={})
        after = [wait_run(kfp, r["run_id"], timeout=300) for r in _runs_of(kfp, rr)]
    finally:
        kfp.api(f"recurringruns/{rr}", method="DELETE")
    new = after[len(runs):]
    spans = [(r["scheduled_at"], r["created_at"], r.get("finished_at"), r["state"]) for r in after]
    print(f"\nrecurring run {rr}: paused {time.strftime('%H:%M:%S', time.gmtime(paused))}, resumed "
          f"{time.strftime('%H:%M:%S', time.gmtime(resumed))}; runs (scheduled, created, finished, state): {spans}")
    for a, b in itertools.pairwise(after):  # never two at once
        assert _t(b["created_at"]) >= _t(a["finished_at"]), spans
    # no back-fill: the slots missed while paused got at most one run (KFP's no_catchup starts the latest
    # missed slot at once on resume), and nothing for the earlier ones
    missed = [r for r in new if _t(r["scheduled_at"]) < resumed]
    assert len(missed) <= 1, spans
    assert all(_t(r["scheduled_at"]) > resumed - 61 for r in missed), spans
    assert len(new) >= 1, spans  # it runs again after resuming
    with pytest.raises(urllib.error.HTTPError) as gone:
        kfp.api(f"recurringruns/{rr}")
    assert gone.value.code == 404, gone.value
    assert all(r["state"] in FINISHED for r in after), spans
