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
