"""`tfk8s logs` of a running local job: its replicas' logs are on the volume as their lines arrive."""

from __future__ import annotations

import pytest

from tests.fakes.local_jobs import _dead, _launch_with_pids, ctl, wait_for
from tfk8s.cmd import EXIT_OK

pytestmark = pytest.mark.timeout(120)


def test_a_running_local_jobs_replica_logs_are_on_the_volume_as_their_lines_arrive(tmp_path):
    launch, pid_dir = _launch_with_pids(tmp_path, "r6", {"worker-0": "sleep:60", "worker-1": "sleep:60"})
    try:
        logs = tmp_path / "runs" / "r6" / "train" / "replica-logs"
        wait_for(lambda: all((logs / f"{r}.log").is_file() and f"{r} attempt 0" in (logs / f"{r}.log").read_text()
                             for r in ("worker-0", "worker-1")), "both replicas' lines on the volume")
        assert launch.poll() is None  # while the job runs, not once it has ended
        code, out, _ = ctl(tmp_path, "logs", "r6", "worker-1")
        assert code == EXIT_OK and out.splitlines()[0].startswith("TF_CONFIG=") and "worker-1 attempt 0" in out
        assert ctl(tmp_path, "delete", "r6")[0] == EXIT_OK
    finally:
        if launch.poll() is None:
            launch.terminate()  # a failed assertion above leaves nothing running either
        launch.communicate(timeout=30)
    assert _dead(pid_dir)

