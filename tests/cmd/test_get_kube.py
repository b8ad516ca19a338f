"""`tfk8s get/describe/logs/wait` of Kubernetes jobs against the fake API server (tests/fakes/kube_fixtures.py):
asking the cluster by label while the job runs and reading the volume after its pods are gone; a job only the
cluster knows found by label; a running record whose objects are gone reads as Lost."""

from __future__ import annotations

import time

import pytest

pytest.register_assert_rewrite("tests.fakes.kube_fixtures")

from tests.fakes.kube_fixtures import NAMESPACE, FakeCluster
from tests.fakes.kube_jobs import JOB, _outside_a_pod, ctl, launch, settings  # noqa: F401 (_outside_a_pod: autouse)
from tfk8s.cmd import EXIT_OK
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.job import TrainingJob
from tfk8s.core.progress import Progress, write_progress
from tfk8s.tracking import records as jobs

pytest_plugins = ["tests.fakes.kube_fixtures"]
pytestmark = pytest.mark.timeout(60)


def test_get_logs_describe_wait_while_running_and_logs_after_the_pods_are_deleted(cluster, tmp_path):
    train = tmp_path / "runs" / "run-9" / "train"
    job = TrainingJob(JOB, ReplicaCounts(worker=2), ("python", "-m", "trainer.task"), grace_period_s=0.2,
                      stop_grace_s=0)
    seen: dict[str, object] = {}

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run("worker-0")  # worker-1 stays Pending for now
        c.log("worker-0", "epoch 1/2 step 1", "epoch 1/2 step 2")
        c.wait_for(lambda: "[worker-0] epoch 1/2 step 2" in c.output, "worker-0's lines")
        write_progress(train / "progress" / "worker-0.json",
                       Progress("worker-0", time.time(), epoch=1, epochs=2, step=2, steps=8, examples_per_sec=900.0))
        seen["get"] = ctl(c, tmp_path, "get", "-n", NAMESPACE)
        seen["logs"] = ctl(c, tmp_path, "logs", JOB, "worker-0")
        seen["describe"] = ctl(c, tmp_path, "describe", JOB)
        seen["wait"] = ctl(c, tmp_path, "wait", JOB, "--timeout", "0.2")
        c.run("worker-1")
        c.log("worker-1", "worker-1 training")
        c.log("worker-0", "epoch 2/2 step 8", "saved")
        c.wait_for(lambda: "[worker-0] saved" in c.output and "[worker-1] worker-1 training" in c.output, "lines")
        c.succeed("worker-1")
        c.succeed("worker-0")

    launch(cluster, job, settings(), train, script)
    _, out = seen["get"]
    row = out.splitlines()[1].split()
    # live: the pods' phases by label (worker-1 still Pending), progress from the volume
    assert row[:9] == [JOB, "kubernetes", "worker", "1/2", "Running", "25%", "1/2", "900", "0"]
    assert seen["logs"] == (EXIT_OK, "epoch 1/2 step 1\nepoch 1/2 step 2\n")
    describe = seen["describe"][1]
    assert f"Namespace:     {NAMESPACE}" in describe and f"Selector:      tfk8s.dev/job-name={JOB}" in describe
    assert f"{JOB}-worker-1.{NAMESPACE}.svc:2222" in describe and "worker-1   Pending" in describe
    assert seen["wait"][0] == 3

    # every pod, Job and Service is gone now; the logs are still there, whole, on the volume
    assert cluster.remaining() == {}
    _, out = ctl(cluster, tmp_path, "logs", JOB, "worker-0")
    assert out == "epoch 1/2 step 1\nepoch 1/2 step 2\nepoch 2/2 step 8\nsaved\n"
    assert (train / "replica-logs" / "worker-1.log").read_text() == "worker-1 training\n"
    assert ctl(cluster, tmp_path, "wait", JOB) == (EXIT_OK, f"{JOB} Succeeded\n")
    _code, out = ctl(cluster, tmp_path, "get")
    assert out.splitlines()[1].split()[:6] == [JOB, "kubernetes", "worker", "2/2", "Succeeded", "100%"]
    record = jobs.find_record(tmp_path, JOB)
    assert record["namespace"] == NAMESPACE and record["cluster_spec"]["worker"][0].endswith(".svc:2222")


def test_a_job_only_the_cluster_knows_is_found_by_label(cluster, tmp_path):
    """No record on this volume (the caller has not mounted the PVC): get -n and describe -n ask the cluster."""
    from tfk8s.launcher.kubernetes.objects import render_manifests

    job = TrainingJob("tfk8s-elsewhere", ReplicaCounts(chief=1, worker=1), ("python", "x"), stop_grace_s=0)
    for manifest in render_manifests(job, settings()):
        cluster.create(manifest)
    cluster.wait_pods("chief-0", "worker-0")
    cluster.run("chief-0")
    _code, out = ctl(cluster, tmp_path, "get", "-n", NAMESPACE)
    assert out.splitlines()[1].split()[:4] == ["tfk8s-elsewhere", "kubernetes", "chief", "1/1,worker"]
    assert out.splitlines()[1].split()[4:6] == ["0/1", "Running"]
    cluster.log("chief-0", "hello from the chief")
    assert ctl(cluster, tmp_path, "logs", "tfk8s-elsewhere", "chief-0", "-n", NAMESPACE) == \
        (EXIT_OK, "hello from the chief\n")
    assert ctl(cluster, tmp_path, "delete", "tfk8s-elsewhere", "-n", NAMESPACE)[0] == EXIT_OK
    cluster.wait_for(lambda: cluster.remaining() == {}, "every object deleted")


def test_a_running_record_whose_objects_are_gone_reads_as_lost(cluster, tmp_path):
    """The launcher pod was deleted (the garbage collector took every replica) before it recorded the outcome."""
    train = tmp_path / "runs" / "run-9" / "train"
    record = {"name": JOB, "backend": "kubernetes", "namespace": NAMESPACE, "state": "Running",
              "created": time.time() - 600, "updated": time.time() - 120, "replicas": {"worker": 1},
              "replica_states": {"worker-0": "Running"}, "paths": {"train_dir": str(train)}}
    jobs.write_record(train / "job.json", record)
    _, out = ctl(cluster, tmp_path, "get")
    assert out.splitlines()[1].split()[:5] == [JOB, "kubernetes", "worker", "0/1", "Lost"]
    code, out = ctl(cluster, tmp_path, "wait", JOB)
    assert code == 1 and out.startswith(f"{JOB} Lost: the cluster has no objects of this job")
    jobs.write_record(train / "job.json", {**record, "updated": time.time()})  # just written: give it time
    assert ctl(cluster, tmp_path, "get")[1].splitlines()[1].split()[4] == "Running"



def test_logs_f_of_every_replica_started_before_any_log_follows_until_the_job_ends(cluster, tmp_path):
    """A `tfk8s logs JOB -f` started as the job starts (its pods there, no line on the volume yet) read each pod's
    log as it was then, printed nothing and exited 0 (seen on the real node: the follower of
    tests/realnode/test_training.py); it follows the volume's logs, which the launcher writes line by line, until
    the job ends."""
    import threading

    train = tmp_path / "runs" / "run-7" / "train"
    job = TrainingJob(JOB, ReplicaCounts(worker=2), ("python", "-m", "trainer.task"), grace_period_s=0.2,
                      stop_grace_s=0)
    followed: dict[str, tuple[int, str]] = {}

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.wait_for(lambda: (jobs.find_record(tmp_path, JOB) or {}).get("state") == "Running", "the job record")
        follower = threading.Thread(target=lambda: followed.update(f=ctl(c, tmp_path, "logs", JOB, "-f")))
        follower.start()
        time.sleep(1.0)  # it has looked at the pods (no line yet) and must still be following
        assert follower.is_alive(), followed
        c.run("worker-0")
        c.run("worker-1")
        c.log("worker-0", "epoch 1/1 step 1")
        c.log("worker-1", "worker-1 training")
        c.wait_for(lambda: "[worker-1] worker-1 training" in c.output, "the lines")
        c.succeed("worker-1")
        c.succeed("worker-0")
        followed["thread"] = follower  # type: ignore[assignment]

    launch(cluster, job, settings(), train, script)
    followed["thread"].join(timeout=20)  # type: ignore[union-attr]
    code, out = followed["f"]
    assert code == EXIT_OK
    assert "[worker-0] epoch 1/1 step 1" in out and "[worker-1] worker-1 training" in out, out
