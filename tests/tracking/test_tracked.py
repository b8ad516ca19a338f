"""The launch step's tracking around the local backend (tfk8s.tracking.tracked): a restart recorded with its reason
and both attempts in the log, Ctrl-C of the launch stopping every replica and recording why, an exception without
a message still recorded. Around the Kubernetes backend: tests/tracking/test_tracked_kube.py."""

from __future__ import annotations

import signal

import pytest

from tests.fakes.local_jobs import _dead, _launch_with_pids, ctl, start_launch, wait_for
from tfk8s.cmd import EXIT_STOPPED
from tfk8s.tracking import records as jobs

pytestmark = pytest.mark.timeout(120)


def test_a_local_restart_is_recorded_with_its_reason_and_both_attempts_are_in_the_log(tmp_path):
    launch = start_launch(tmp_path, "r5", {"worker-0": ["sleep:30", "exit:0"], "worker-1": ["kill:0.5", "exit:0"]},
                          max_restarts=1)
    out, _ = launch.communicate(timeout=60)
    assert launch.returncode == 0, out
    record = jobs.find_record(tmp_path, "r5")
    assert record["state"] == "Succeeded" and record["restarts"] == 1
    (reason,) = record["restart_reasons"]
    assert reason["message"].startswith("replica worker-1 ") and "recreating worker-0, worker-1" in reason["message"]
    _, described, _ = ctl(tmp_path, "describe", "r5")
    assert "Restarts:      1" in described and reason["message"] in described
    _, log, _ = ctl(tmp_path, "logs", "r5", "worker-1")
    assert "worker-1 attempt 0" in log and "worker-1 is being killed" in log and "worker-1 attempt 1" in log
    assert log.index("worker-1 attempt 0") < log.index("worker-1 attempt 1")


def test_ctrl_c_of_a_local_launch_stops_every_replica_and_records_why(tmp_path):
    """SIGINT takes SIGTERM's path: the replicas stopped, the job recorded Stopped with the reason (it stayed
    Running, replicas Running, when the KeyboardInterrupt went through; then Failed, like a crash, until issue 25
    item 7)."""
    launch, pid_dir = _launch_with_pids(tmp_path, "r7", {"worker-0": "sleep:60", "worker-1": "sleep:60"})
    try:
        wait_for(lambda: len(list(pid_dir.glob("*.pid"))) == 2, "both replicas started")
        launch.send_signal(signal.SIGINT)
        out, _ = launch.communicate(timeout=30)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.communicate()
    assert _dead(pid_dir)
    record = jobs.find_record(tmp_path, "r7")
    assert record["state"] == "Stopped", out
    assert record["message"] == ("the launcher was interrupted by the user (SIGINT: Ctrl-C or kill -INT); every "
                                 "replica of tfk8s-r7 was stopped")
    assert record["replica_states"] == {"worker-0": "Stopped", "worker-1": "Stopped"}
    assert "Traceback" not in out
    assert ctl(tmp_path, "wait", "r7")[:2] == (EXIT_STOPPED, f"tfk8s-r7 Stopped: {record['message']}\n")
    assert "Stopped" in ctl(tmp_path, "get", "r7")[1].splitlines()[1].split()  # `get` tells it from a crash


def test_an_exception_without_a_message_is_still_recorded_as_the_jobs_outcome(tmp_path):
    from tfk8s.core.cluster import ReplicaCounts
    from tfk8s.core.job import TrainingJob
    from tfk8s.tracking.tracked import tracked

    job = TrainingJob(name="tfk8s-r8", counts=ReplicaCounts(worker=1), command=("true",))
    train = tmp_path / "runs" / "r8" / "train"
    with pytest.raises(KeyboardInterrupt), tracked(job, "local", train, lambda _: None):
        raise KeyboardInterrupt
    record = jobs.find_record(tmp_path, "r8")
    assert (record["state"], record["message"]) == ("Stopped", "interrupted (KeyboardInterrupt)")
    assert record["replica_states"] == {"worker-0": "Stopped"}

