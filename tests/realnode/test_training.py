"""The project on real pods (``make test-e2e``): the launch step runs in a pod of the project image as the
``tfk8s-launcher`` ServiceAccount (in-cluster config through the ``kubernetes`` Service, the downward API,
ownerReferences to its pod), its replicas are real containers that find each other by the TF_CONFIG names
through CoreDNS and train MNIST on a real PersistentVolume; the export, evaluate and push steps run in pods too.
Fixtures: :mod:`tests.realnode.e2e_pods`. Sizes fit the 2-core node: 2,048 examples, 1 epoch, 250m CPU requested per
replica (a limit of 2, so a replica may use the idle cores).
"""

from __future__ import annotations

import re

import pytest

pytest.register_assert_rewrite("tests.realnode.e2e_fixtures", "tests.realnode.e2e_pods")

from tests.realnode.e2e_fixtures import KUEUE_QUEUE, E2EKueue, assert_admitted_by_kueue, kueue_admissions
from tests.realnode.e2e_pods import DATA_DIR, MOUNT, ProjectPods, last_json, small_job, unique, wait_for
from tfk8s.core.job import job_selector
from tfk8s.core.layout import RunLayout

pytest_plugins = ["tests.realnode.e2e_fixtures", "tests.realnode.e2e_pods"]
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _follower_log(p: ProjectPods, pod: str) -> str:
    try:
        return p.e2e.log(pod)
    except Exception:  # noqa: BLE001 - not started yet
        return ""


def test_mwms_chief_and_two_workers_train_in_pods_then_export_evaluate_and_push_in_pods(e2e_pods: ProjectPods):
    p = e2e_pods
    run = unique("mwms")
    job, train = p.job_of(run), RunLayout(MOUNT, run).train_dir
    # the namespace is production-shaped: every pod below (launcher, replicas, follower, steps) passes restricted
    # and declares requests and limits, or the API server refuses it
    labels = p.core.read_namespace(p.namespace).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted", labels
    launcher = p.launch(run, "--chief", "1", "--workers", "2", *small_job(batch=63))
    # `tfk8s logs -f` while it runs, in a pod of its own with the volume and the launcher's rights (in-cluster)
    wait_for(lambda: p.volume.host(train / "job.json").is_file(), "the job record on the volume", 120)
    p.run("follow", ["tfk8s", "logs", job, "-f", "--volume", MOUNT])
    live = wait_for(lambda: "[worker-1] replica=worker-1 strategy=multi_worker_mirrored" in (log := _follower_log(
        p, "follow")) and p.e2e.pod(launcher)["status"]["phase"] == "Running" and log, "a live replica line", 240,
        explain=lambda: (f"launcher {p.e2e.pod(launcher)['status']['phase']}:\n{p.e2e.log(launcher)[-4000:]}\n"
                         f"--- follower:\n{_follower_log(p, 'follow')[-4000:]}"))
    assert "epoch 1/1" not in live.split("[worker-1] replica=worker-1")[0]  # it came before training ended
    pod = p.wait_done(launcher, 300)
    log = p.e2e.log(launcher)
    assert pod["status"]["phase"] == "Succeeded", log[-5000:]
    result = last_json(log)
    ns = p.namespace
    # TF_CONFIG named every replica by its headless Service, and the collective ran across the three pods
    assert result["summary"]["job"]["cluster_spec"] == {
        "chief": [f"{job}-chief-0.{ns}.svc:2222"],
        "worker": [f"{job}-worker-0.{ns}.svc:2222", f"{job}-worker-1.{ns}.svc:2222"]}
    metrics = result["summary"]["metrics"]
    assert (metrics["strategy"], metrics["num_replicas_in_sync"], metrics["train_examples"]) == (
        "multi_worker_mirrored", 3, 2048)
    assert 0.3 < metrics["accuracy"] <= 1.0
    assert result["summary"]["job"]["exit_codes"] == {"chief-0": 0, "worker-0": 0, "worker-1": 0}
    for label in ("chief-0", "worker-0", "worker-1"):
        assert f"[{label}] {label}: every chief/worker is up" in log
    assert f"[launcher] deleted the Jobs, Services and pods of {job}; none remain" in log
    assert p.job_objects(job) == {}
    # the follower saw the end and stopped by itself; every replica's log is on the volume after its pods went
    follower = p.wait_done("follow", 60)
    assert follower["status"]["phase"] == "Succeeded", _follower_log(p, "follow")
    followed = p.e2e.log("follow")
    for label in ("chief-0", "worker-0", "worker-1"):
        assert re.search(rf"^\[{label}\] epoch 1/1: loss=", followed, re.MULTILINE), followed[-3000:]
    after, after_log = p.run_to_end("logs-after", ["tfk8s", "logs", job, "--volume", MOUNT], 120)
    assert after["status"]["phase"] == "Succeeded", after_log
    for label in ("chief-0", "worker-0", "worker-1"):
        assert f"[{label}] replica={label} strategy=multi_worker_mirrored" in after_log
        assert re.search(rf"^\[{label}\] epoch 1/1: loss=", after_log, re.MULTILINE)
    # the CPU image (tensorflow-cpu, issue 26): TensorFlow says nothing of CUDA in a replica's or the launcher's log
    cuda = re.compile(r"cuInit|CUDA error|cuda drivers", re.IGNORECASE)
    assert not cuda.search(after_log) and not cuda.search(log), cuda.findall(after_log + log)[:3]
    # the next steps, each in its own pod, on the same volume
    saved_model = result["saved_model"]
    assert saved_model == str(train / "saved_model")
    export = p.step("export", "export_model", "--saved-model-dir", saved_model, "--volume-root", MOUNT,
                    "--model-name", "mnist-e2e")
    assert export["path"] == f"{MOUNT}/models/mnist-e2e/{export['version']}"
    assert p.volume.host(export["path"]).joinpath("saved_model.pb").is_file()
    evaluation = p.step("evaluate", "evaluate_model", "--model-dir", export["path"], "--data-dir", DATA_DIR,
                        "--min-accuracy", "0.3", "--volume-root", MOUNT, "--model-name", "mnist-e2e",
                        "--training-summary", str(train / "training_summary.json"))
    assert (evaluation["evaluated"], evaluation["blessed"]) == (True, True), evaluation
    assert abs(evaluation["metrics"]["accuracy"] - metrics["accuracy"]) < 0.25, evaluation["metrics"]
    pushed = p.step("push", "push_model", "--model-dir", export["path"], "--volume-root", MOUNT,
                    "--model-name", "mnist-e2e")
    assert pushed["path"] == f"{MOUNT}/serving/mnist-e2e/{export['version']}"
    assert p.volume.host(pushed["path"]).joinpath("saved_model.pb").is_file()


def test_pss_chief_worker_ps_and_evaluator_train_in_pods(e2e_pods: ProjectPods):
    p = e2e_pods
    run = unique("pss")
    job = p.job_of(run)
    launcher = p.launch(run, "--chief", "1", "--workers", "1", "--ps", "1", "--evaluator", "1", *small_job(epochs=2))
    pod = p.wait_done(launcher, 300)
    log = p.e2e.log(launcher)
    assert pod["status"]["phase"] == "Succeeded", log[-5000:]
    result = last_json(log)
    ns = p.namespace
    assert result["summary"]["job"]["cluster_spec"] == {
        "chief": [f"{job}-chief-0.{ns}.svc:2222"], "worker": [f"{job}-worker-0.{ns}.svc:2222"],
        "ps": [f"{job}-ps-0.{ns}.svc:2222"]}
    assert result["summary"]["metrics"]["strategy"] == "parameter_server"
    # the chief reached the ps and the worker by their names; the evaluator read the chief's checkpoint
    assert "[chief-0] chief-0: every ps/worker accepts connections" in log
    assert f"[ps-0] ps-0: serving grpc://{job}-ps-0.{ns}.svc:2222" in log
    assert re.search(r"^\[evaluator-0\] evaluator: checkpoint [12]: loss=\S+ accuracy=", log, re.MULTILINE), log[-3000:]
    # the evaluator evaluates the final checkpoint within its grace (evaluator_grace_s) and ends by itself; the ps
    # and the worker never exit by themselves: stopped after the chief's success
    assert "[evaluator-0] evaluator: evaluated the final checkpoint (2 of 2 epochs); done" in log, log[-3000:]
    assert result["summary"]["evaluator"]["checkpoint"] == 2 and result["summary"]["evaluator"]["final"] is True
    assert "[launcher] stopping the remaining replicas: worker-0, ps-0" in log
    assert sorted(result["summary"]["job"]["stopped"]) == ["ps-0", "worker-0"]
    assert p.job_objects(job) == {}


def test_an_example_program_runs_in_pods_through_the_command_parameter_admitted_by_a_real_kueue(
        e2e_pods: ProjectPods, e2e_kueue: E2EKueue):
    """examples/keras_mwms/train.py, TensorFlow's multi-worker Keras tutorial, put on the volume (the examples
    are not in the project image: a user's program would be in their image or on the volume), with
    ``kubernetes.kueue_queue`` naming the namespace's LocalQueue of the real Kueue v0.17.0: Kueue's webhook
    suspends each replica's Job at creation, its scheduler admits their Workloads from the ClusterQueue's quota
    and unsuspends them (the launcher reading the LocalQueue and the Workloads through its own Role), and the job
    runs as without a queue."""
    from tests.realnode.e2e_pods import REPO

    p = e2e_pods
    cq = e2e_kueue.queue(p.namespace)
    program = p.volume.folder / "programs" / "keras_mwms.py"
    program.parent.mkdir()
    program.write_bytes((REPO / "examples" / "keras_mwms" / "train.py").read_bytes())
    run = unique("example")
    job = p.job_of(run)
    replica_jobs = [f"{job}-worker-0", f"{job}-worker-1"]
    launcher = p.launch(run, "--workers", "2", "--command",
                        f"python {MOUNT}/programs/keras_mwms.py --epochs 1 --per_worker_batch 32",
                        "--kueue-queue", KUEUE_QUEUE, *small_job())
    # while it runs: one Workload per replica's Job, owned by it, admitted by the namespace's ClusterQueue; the
    # Jobs unsuspended by Kueue, whose podset label is on their pods (Kueue puts it on the template it starts)
    def admitted() -> list[dict]:
        wls = [w for w in e2e_kueue.workloads(p.namespace)
               if any(o["kind"] == "Job" and o["name"] in replica_jobs for o in w["metadata"]["ownerReferences"])]
        return wls if len(wls) == 2 and all(E2EKueue.admitted(w) for w in wls) else []

    workloads = wait_for(admitted, "both replicas' Workloads admitted by Kueue", 180,
                         explain=lambda: f"{e2e_kueue.workloads(p.namespace)}\n{p.tail(launcher)}\n--- kueue:\n"
                                         f"{e2e_kueue.server.log(20)}")
    pods = wait_for(lambda: len(found := p.pods_of(job)) == 2 and found, "both replicas' pods", 120)
    jobs = {j.metadata.name: j
            for j in p.batch.list_namespaced_job(p.namespace, label_selector=job_selector(job)).items}
    pod = p.wait_done(launcher, 300)
    log = p.e2e.log(launcher)
    assert pod["status"]["phase"] == "Succeeded", log[-5000:]
    assert sorted(jobs) == replica_jobs
    for name, j in jobs.items():
        assert j.metadata.labels["kueue.x-k8s.io/queue-name"] == KUEUE_QUEUE, j.metadata.labels
        assert not j.spec.suspend, name
    for w in workloads:
        (owner,) = [o for o in w["metadata"]["ownerReferences"] if o["kind"] == "Job"]
        assert owner["uid"] == jobs[owner["name"]].metadata.uid
        assert w["spec"]["queueName"] == KUEUE_QUEUE
        assert w["status"]["admission"]["clusterQueue"] == cq
        assert w["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["cpu"] == "250m", w["status"]
    assert {pd["metadata"]["labels"].get("kueue.x-k8s.io/podset") for pd in pods} == {"main"}, pods
    # ... and after it, from Kueue's events: each Job held (a Workload created for it), then started on admission
    assert_admitted_by_kueue(kueue_admissions(p.api, p.namespace, job), replica_jobs, cq)
    result = last_json(log)
    assert result["summary"]["job"]["command"] == ["python", f"{MOUNT}/programs/keras_mwms.py", "--epochs", "1",
                                                   "--per_worker_batch", "32"]
    assert result["summary"]["job"]["exit_codes"] == {"worker-0": 0, "worker-1": 0}
    saved = p.volume.host(result["saved_model"])
    assert (saved / "saved_model.pb").is_file()
    assert p.job_objects(p.job_of(run)) == {}

