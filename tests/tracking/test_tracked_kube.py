"""The launch step's tracking around the real Kubernetes backend against the fake API server
(tests/fakes/kube_fixtures.py): a restart recorded with its reason, the replica log keeping both attempts."""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("tests.fakes.kube_fixtures")

from tests.fakes.kube_fixtures import FakeCluster
from tests.fakes.kube_jobs import JOB, _outside_a_pod, ctl, launch, settings  # noqa: F401 (_outside_a_pod: autouse)
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.job import TrainingJob
from tfk8s.tracking import records as jobs

pytest_plugins = ["tests.fakes.kube_fixtures"]
pytestmark = pytest.mark.timeout(60)


def test_a_restart_is_recorded_with_its_reason_and_the_log_keeps_both_attempts(cluster, tmp_path):
    train = tmp_path / "runs" / "run-9" / "train"
    job = TrainingJob(JOB, ReplicaCounts(worker=2), ("python", "-m", "trainer.task"), grace_period_s=0.2,
                      stop_grace_s=0)

    def script(c: FakeCluster) -> None:
        c.wait_pods("worker-0", "worker-1")
        c.run()
        c.log("worker-1", "attempt 0 line")
        c.wait_for(lambda: "[worker-1] attempt 0 line" in c.output, "attempt 0's line")
        c.oom("worker-1")
        c.wait_pods("worker-0", "worker-1", attempt=1)
        c.run()
        c.log("worker-1", "attempt 1 line")
        c.wait_for(lambda: "[worker-1] attempt 1 line" in c.output, "attempt 1's line")
        c.succeed("worker-0")

    result = launch(cluster, job, settings(), train, script)
    assert result.restarts == 1
    lines = (train / "replica-logs" / "worker-1.log").read_text().splitlines()
    assert lines[0] == "attempt 0 line" and lines[-1] == "attempt 1 line"
    assert lines[1].startswith("----- tfk8s ") and "worker-1 recreated (restart 1)" in lines[1]
    record = jobs.find_record(tmp_path, "run-9")
    assert record["restarts"] == 1
    (reason,) = record["restart_reasons"]
    assert "worker-1 failed with exit code 137: OOMKilled" in reason["message"]
    _, out = ctl(cluster, tmp_path, "describe", JOB)
    assert "Restarts:      1" in out and "OOMKilled" in out.split("Restarts:")[1].split("Files:")[0]

