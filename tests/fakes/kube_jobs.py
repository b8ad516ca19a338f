"""Helpers of the Kubernetes-job tracking tests (tests/cmd/test_get_kube.py, tests/tracking/test_tracked_kube.py):
the launch step's tracking around the Kubernetes backend while a script plays the cluster (the fake API server of
tests/fakes/kube_fixtures.py), and ``tfk8s`` run in this process against it."""

from __future__ import annotations

import dataclasses
import io
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from tests.fakes.kube_fixtures import NAMESPACE, FakeCluster
from tfk8s.cmd import main
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.kubernetes import run_kubernetes
from tfk8s.launcher.kubernetes.api import KubeApi
from tfk8s.launcher.kubernetes.settings import KubernetesSettings
from tfk8s.tracking.tracked import tracked

JOB = "tfk8s-run-9"


@pytest.fixture(autouse=True)
def _outside_a_pod(monkeypatch, tmp_path):
    monkeypatch.delenv("TFK8S_LAUNCHER_POD_NAME", raising=False)
    monkeypatch.delenv("TFK8S_LAUNCHER_POD_UID", raising=False)
    monkeypatch.setattr("tfk8s.launcher.kubernetes.settings.SERVICEACCOUNT_NAMESPACE_FILE", tmp_path / "no-namespace")


def settings(**kw) -> KubernetesSettings:
    base = KubernetesSettings.from_params(namespace=NAMESPACE, image="img:1", **kw)
    return dataclasses.replace(base, log_wait_s=2.0, cleanup_timeout_s=5, create_retry_s=2, group_settle_s=1.0)


def launch(cluster: FakeCluster, job: TrainingJob, s: KubernetesSettings, train: Path, script) -> object:
    """The launch step's tracking around the Kubernetes backend, while ``script`` plays the cluster."""
    errors: list[BaseException] = []

    def play() -> None:
        try:
            script(cluster)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    try:
        with tracked(job, "kubernetes", train, cluster._print, namespace=NAMESPACE) as t:
            t.recorder.result = run_kubernetes(job, s, api_client=cluster.api_client(), log_sink=t.sink)
            return t.recorder.result
    finally:
        thread.join(10)
        if errors:
            raise errors[0]


def ctl(cluster: FakeCluster, volume: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    old = sys.stdout
    sys.stdout = out
    try:
        code = main([*args, "--volume", str(volume)], kube_api=lambda ns: KubeApi(cluster.api_client(), ns))
    finally:
        sys.stdout = old
    return code, out.getvalue()

