"""`tfk8s delete` of a running local job: its launcher stops every replica and records it Deleted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fakes.local_jobs import ctl, start_launch, wait_for
from tfk8s.cmd import EXIT_OK, EXIT_STOPPED
from tfk8s.tracking import records as jobs

pytestmark = pytest.mark.timeout(120)


def test_delete_stops_a_running_local_job_and_its_replicas(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    os.environ["FAKE_PIDFILE_DIR"] = str(pid_dir)
    try:
        launch = start_launch(tmp_path, "r3", {"worker-0": "sleep:60", "worker-1": "sleep:60"})
    finally:
        del os.environ["FAKE_PIDFILE_DIR"]
    wait_for(lambda: len(list(pid_dir.glob("*.pid"))) == 2, "both replicas started")
    code, out, _ = ctl(tmp_path, "delete", "r3")
    assert (code, out) == (EXIT_OK, "tfk8s-r3 deleted\n")
    launch.communicate(timeout=30)
    record = jobs.find_record(tmp_path, "r3")
    # issue 25 item 7: recorded Deleted (it was Failed, like a crash), `wait` says so with its own exit code
    assert (record["state"], record["message"]) == ("Deleted", "deleted with tfk8s delete")
    assert record["replica_states"] == {"worker-0": "Stopped", "worker-1": "Stopped"}
    for pid in (int(p.read_text()) for p in pid_dir.glob("*.pid")):
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    assert ctl(tmp_path, "wait", "r3")[:2] == (EXIT_STOPPED, "tfk8s-r3 Deleted: deleted with tfk8s delete\n")
    assert "already ended (Deleted)" in ctl(tmp_path, "delete", "r3")[1]

