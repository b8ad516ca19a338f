"""Tracking a Kubernetes job against the real control plane (tests/realcluster/cluster_fixtures.py; `make test-cluster`):
``tfk8s get/describe/logs/wait`` as the tfk8s-launcher ServiceAccount while the real Job controller and
scheduler run the replicas, and the replicas' logs read from the volume after the real controllers have
deleted their pods."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import signal
import sys
import threading
from pathlib import Path

import pytest

pytest.register_assert_rewrite("tests.realcluster.cluster_fixtures")

from tests.realcluster.cluster_fixtures import RealCluster
from tfk8s.cmd import EXIT_OK, EXIT_TIMEOUT, main
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.kubernetes import run_kubernetes
from tfk8s.launcher.kubernetes.api import KubeApi
from tfk8s.launcher.kubernetes.settings import KubernetesSettings
from tfk8s.tracking import records as jobs
from tfk8s.tracking.tracked import tracked

pytest_plugins = ["tests.realcluster.cluster_fixtures"]
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

JOB = "tfk8s-track-1"


def ctl(kube: RealCluster, volume: Path, *args: str) -> tuple[int, str]:
    out, old = io.StringIO(), sys.stdout
    sys.stdout = out
    try:
        code = main([*args, "--volume", str(volume)], kube_api=lambda ns: KubeApi(kube.launcher_client(), ns))
    finally:
        sys.stdout = old
    return code, out.getvalue()


def test_a_tracked_job_on_a_real_control_plane(kube, tmp_path):
    train = tmp_path / "runs" / "track-1" / "train"
    job = TrainingJob(JOB, ReplicaCounts(worker=2), ("python", "-m", "trainer.task"), grace_period_s=0.5,
                      stop_grace_s=1)
    base = KubernetesSettings.from_params(namespace=kube.namespace, image="tfk8s:test", cpu="100m", memory="128Mi")
    settings = dataclasses.replace(base, log_wait_s=2.0, cleanup_timeout_s=60, create_retry_s=30, group_settle_s=2.0)
    kube.jobs.add(JOB)
    kube.job_name = JOB
    seen: dict = {}
    errors: list[BaseException] = []

    def script(c: RealCluster) -> None:
        try:
            c.wait_pods("worker-0", "worker-1")
            c.log("worker-0", "epoch 1/2 step 1", "epoch 1/2 step 2")
            c.wait_for(lambda: (train / "replica-logs" / "worker-0.log").is_file()
                       and "step 2" in (train / "replica-logs" / "worker-0.log").read_text(), "worker-0's log kept")
            seen["get"] = ctl(c, tmp_path, "get")
            seen["describe"] = ctl(c, tmp_path, "describe", JOB)
            seen["wait"] = ctl(c, tmp_path, "wait", JOB, "--timeout", "0.5")
            c.log("worker-1", "worker-1 done")
            c.succeed("worker-1")
            c.succeed("worker-0")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=script, args=(kube,), daemon=True)
    thread.start()
    try:
        with tracked(job, "kubernetes", train, kube._print, namespace=kube.namespace) as t:
            t.recorder.result = run_kubernetes(job, settings, api_client=kube.launcher_client(), log_sink=t.sink)
    finally:
        thread.join(30)
    assert not errors, errors
    row = seen["get"][1].splitlines()[1].split()
    assert row[:5] == [JOB, "kubernetes", "worker", "2/2", "Running"]  # the real pods' phases, by label
    assert f"Namespace:     {kube.namespace}" in seen["describe"][1]
    assert seen["wait"][0] == EXIT_TIMEOUT
    # the real controllers deleted every pod; the logs are on the volume
    assert kube.remaining() == {}
    assert ctl(kube, tmp_path, "logs", JOB, "worker-0") == (EXIT_OK, "epoch 1/2 step 1\nepoch 1/2 step 2\n")
    assert ctl(kube, tmp_path, "wait", JOB) == (EXIT_OK, f"{JOB} Succeeded\n")
    assert jobs.find_record(tmp_path, JOB)["replica_states"] == {"worker-0": "Succeeded", "worker-1": "Succeeded"}


def test_logs_of_a_replica_whose_container_has_not_started_say_so_and_print_the_others(kube, tmp_path, capsys):
    """``tfk8s logs JOB`` before any replica wrote a line (nothing on the volume yet: the live pods are asked)
    while worker-1 is still ContainerCreating: the real kubelet (and so the fake) answers 400 ``container ... is
    waiting to start``, which is said about worker-1 alone; worker-0's log is still read."""
    name = "tfk8s-held-1"
    train = tmp_path / "runs" / "held-1" / "train"
    job = TrainingJob(name, ReplicaCounts(worker=2), ("python", "-m", "trainer.task"), grace_period_s=0.5,
                      stop_grace_s=1)
    base = KubernetesSettings.from_params(namespace=kube.namespace, image="tfk8s:test", cpu="100m", memory="128Mi")
    settings = dataclasses.replace(base, log_wait_s=2.0, cleanup_timeout_s=60, create_retry_s=30,
                                   group_settle_s=2.0)
    kube.jobs.add(name)
    kube.job_name = name
    kube.kubelet.hold = lambda pod: pod["metadata"]["labels"].get("tfk8s.dev/replica-index") == "1"
    seen: dict = {}
    errors: list[BaseException] = []

    def script(c: RealCluster) -> None:
        try:
            c.wait_pods("worker-0")
            c.wait_pods("worker-1", running=False)
            c.wait_for(lambda: (train.parent / "train" / "job.json").is_file(), "the job record")
            seen["logs"] = ctl(c, tmp_path, "logs", name)
            c.succeed("worker-0")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=script, args=(kube,), daemon=True)
    thread.start()
    try:
        with tracked(job, "kubernetes", train, kube._print, namespace=kube.namespace) as t:
            t.recorder.result = run_kubernetes(job, settings, api_client=kube.launcher_client(), log_sink=t.sink)
    finally:
        thread.join(30)
    assert not errors, errors
    assert seen["logs"] == (EXIT_OK, "")
    err = capsys.readouterr().err
    assert re.search(rf'tfk8s: worker-1 has no log yet \(pod {name}-worker-1-\w+\): container "tensorflow" in pod '
                     rf'"{name}-worker-1-\w+" is waiting to start: ContainerCreating', err), err
    assert "worker-0 has no log" not in err
