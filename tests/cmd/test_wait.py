"""`tfk8s wait` on a local job: a failed job exits 1 and `describe` says why."""

from __future__ import annotations

import pytest

from tests.fakes.local_jobs import ctl, start_launch
from tfk8s.cmd import EXIT_FAILED
from tfk8s.tracking import records as jobs

pytestmark = pytest.mark.timeout(120)


def test_a_failed_job_waits_to_exit_1_and_describes_the_reason(tmp_path):
    launch = start_launch(tmp_path, "r2", {"worker-0": "sleep:30", "worker-1": "exit:3"})
    launch.communicate(timeout=60)
    code, out, _ = ctl(tmp_path, "wait", "r2", "--timeout", "10")
    assert code == EXIT_FAILED
    assert out.startswith("tfk8s-r2 Failed: replica worker-1 failed with exit code 3: Error")
    record = jobs.find_record(tmp_path, "r2")
    assert record["replica_states"] == {"worker-0": "Stopped", "worker-1": "Failed"}
    _, out, _ = ctl(tmp_path, "describe", "tfk8s-r2")
    assert "State:         Failed (replica worker-1 failed with exit code 3: Error)" in out
    assert "  worker-1   Failed" in out

