"""Concurrent creation: tfk8s.launcher.kubernetes.parallel.run_all, and the backend creating a job's objects with it."""

from __future__ import annotations

import threading
import time

import pytest

pytest.register_assert_rewrite("tests.fakes.kube_fixtures")

from tests.fakes.kube_fixtures import FakeCluster
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.kubernetes.api import KubeApi
from tfk8s.launcher.kubernetes.parallel import CONCURRENT_FROM, run_all
from tfk8s.launcher.kubernetes.settings import KubernetesSettings

pytest_plugins = ["tests.fakes.kube_fixtures"]
pytestmark = pytest.mark.timeout(60)


def test_run_all_keeps_the_items_order_and_runs_calls_at_the_same_time():
    barrier = threading.Barrier(4, timeout=5)  # broken (an error) unless 4 calls are in flight together

    def call(x: int) -> int:
        barrier.wait()
        return x * 10

    assert run_all(call, range(8), max_workers=4) == [x * 10 for x in range(8)]


def test_run_all_runs_every_call_then_raises_the_first_failing_items_error():
    done: list[int] = []

    def call(x: int) -> int:
        if x in (2, 4):
            raise ValueError(f"item {x}")
        done.append(x)
        return x

    with pytest.raises(ValueError, match="item 2"):
        run_all(call, range(1, 10), max_workers=2)
    assert sorted(done) == [1, 3, 5, 6, 7, 8, 9]


def test_run_all_with_one_worker_or_a_few_items_runs_in_the_callers_thread():
    me = threading.current_thread()
    assert run_all(lambda x: threading.current_thread() is me, range(9), max_workers=1) == [True] * 9
    assert run_all(lambda x: threading.current_thread() is me, range(CONCURRENT_FROM - 1)) == [True] * (
        CONCURRENT_FROM - 1)
    assert run_all(lambda x: x, []) == []


def test_the_backend_creates_services_and_jobs_concurrently(cluster: FakeCluster, monkeypatch):
    # Each create waits until 8 creates of its kind are in flight together: one after the other, the first
    # would time out (BrokenBarrierError) and the launch fail.
    barriers = {"service": threading.Barrier(8, timeout=5), "job": threading.Barrier(8, timeout=5)}
    create_service, create_job = KubeApi.create_service, KubeApi.create_job

    def service(self, body):
        barriers["service"].wait()
        return create_service(self, body)

    def job(self, body):
        barriers["job"].wait()
        return create_job(self, body)

    monkeypatch.setattr(KubeApi, "create_service", service)
    monkeypatch.setattr(KubeApi, "create_job", job)
    labels = [f"worker-{i}" for i in range(8)]
    training = TrainingJob("tfk8s-par-1", ReplicaCounts(worker=8), ("python", "-m", "trainer.task"),
                           grace_period_s=0.2)
    settings = KubernetesSettings.from_params(namespace="tfk8s-test", image="img:1")

    def script(c: FakeCluster) -> None:
        deadline = time.monotonic() + 15
        while c.server.pods_created < 8:  # one after the other, the launch fails first: end quietly then
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
        c.wait_pods(*labels)
        assert len(c.objects("services")) == 8
        c.run()
        c.succeed("worker-0")

    result = cluster.launch(training, settings, script)
    assert result.exit_codes["worker-0"] == 0
    assert cluster.count("POST", "jobs") == 8 and cluster.count("POST", "services") == 8
    assert cluster.remaining() == {}
