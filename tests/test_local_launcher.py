"""The local backend with a stand-in replica program (tests/fake_replica.py): real processes, real signals."""

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tfk8s.cluster import ReplicaCounts
from tfk8s.launcher import JobTimeoutError, LauncherTerminatedError, ReplicaFailedError, TrainingJob
from tfk8s.launcher.local import run_local

FAKE = str(Path(__file__).with_name("fake_replica.py"))


def _job(counts: ReplicaCounts, behaviour: dict | None = None, pid_dir: Path | None = None, **kw) -> TrainingJob:
    env = {"FAKE_BEHAVIOUR": json.dumps(behaviour or {})}
    if pid_dir:
        env["FAKE_PIDFILE_DIR"] = str(pid_dir)
    return TrainingJob(name="test-job", counts=counts, command=(sys.executable, FAKE), env=env, **kw)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); read its state
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _pids(pid_dir: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in pid_dir.glob("*.pid")}


def test_ps_and_evaluator_are_stopped_when_chief_succeeds(tmp_path):
    lines: list[str] = []
    result = run_local(_job(ReplicaCounts(chief=1, worker=2, ps=1, evaluator=1), pid_dir=tmp_path),
                       log_sink=lines.append, log_dir=tmp_path / "logs", stop_grace_s=2)
    assert result.exit_codes == {"chief-0": 0, "worker-0": 0, "worker-1": 0}
    assert sorted(result.stopped) == ["evaluator-0", "ps-0"]
    pids = _pids(tmp_path)
    assert set(pids) == {"chief-0", "worker-0", "worker-1", "ps-0", "evaluator-0"}
    assert not any(_alive(pid) for pid in pids.values())
    # output is streamed with a replica prefix and also kept per replica
    tf_lines = [json.loads(line.split("TF_CONFIG=", 1)[1]) for line in lines if line.startswith("[worker-1] TF_CONFIG=")]
    assert tf_lines[0]["task"] == {"type": "worker", "index": 1}
    assert set(tf_lines[0]["cluster"]) == {"chief", "worker", "ps"}
    ports = [a.rsplit(":", 1)[1] for addrs in tf_lines[0]["cluster"].values() for a in addrs]
    assert len(set(ports)) == 4 and all(a.startswith("127.0.0.1:") for v in tf_lines[0]["cluster"].values() for a in v)
    assert "chief-0 finishing with exit:0" in (tmp_path / "logs" / "chief-0.log").read_text()


def test_worker_failure_fails_the_job_naming_replica_exit_code_and_last_lines(tmp_path):
    with pytest.raises(ReplicaFailedError) as err:
        run_local(_job(ReplicaCounts(worker=3), {"worker-0": "sleep", "worker-2": "exit:3"}, pid_dir=tmp_path),
                  log_sink=lambda _: None, stop_grace_s=2)
    e = err.value
    assert (e.replica.label, e.exit_code) == ("worker-2", 3)
    assert "replica worker-2 failed with exit code 3" in str(e)
    assert "worker-2 finishing with exit:3" in str(e)
    assert not any(_alive(pid) for pid in _pids(tmp_path).values())


def test_lagging_worker_is_stopped_after_the_grace_period(tmp_path):
    t0 = time.monotonic()
    result = run_local(_job(ReplicaCounts(worker=2), {"worker-1": "sleep"}, pid_dir=tmp_path, grace_period_s=0.5),
                       log_sink=lambda _: None, stop_grace_s=2)
    assert result.exit_codes == {"worker-0": 0}
    assert result.stopped == ["worker-1"]
    assert time.monotonic() - t0 < 20
    assert not any(_alive(pid) for pid in _pids(tmp_path).values())


def test_all_workers_policy_waits_for_every_worker(tmp_path):
    result = run_local(_job(ReplicaCounts(worker=2), {"worker-1": "sleep:1.5"}, success_policy="AllWorkers"),
                       log_sink=lambda _: None)
    assert result.exit_codes == {"worker-0": 0, "worker-1": 0}
    assert result.stopped == []


def test_timeout_fails_and_kills_a_replica_that_ignores_sigterm(tmp_path):
    with pytest.raises(JobTimeoutError, match="timeout of 1s"):
        run_local(_job(ReplicaCounts(worker=1), {"worker-0": "ignore-term"}, pid_dir=tmp_path, timeout_s=1),
                  log_sink=lambda _: None, stop_grace_s=1)
    assert not any(_alive(pid) for pid in _pids(tmp_path).values())


def test_sigterm_to_the_launcher_stops_every_replica(tmp_path):
    timer = threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        with pytest.raises(LauncherTerminatedError, match="got SIGTERM"):
            run_local(_job(ReplicaCounts(worker=2), {"worker-0": "sleep", "worker-1": "sleep"}, pid_dir=tmp_path),
                      log_sink=lambda _: None, stop_grace_s=2)
    finally:
        timer.cancel()
    pids = _pids(tmp_path)
    assert len(pids) == 2 and not any(_alive(pid) for pid in pids.values())


PARENT = """
import subprocess, sys
from tfk8s.launcher.local import sigterm_reaches_children
CHILD = '''
import signal, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
print(grandchild.pid, flush=True)
def stop(*_):
    open(sys.argv[1], "w").write("child stopped cleanly")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
time.sleep(120)
'''
with sigterm_reaches_children(grace_s=5, log_sink=lambda line: print(line, flush=True)):
    child = subprocess.Popen([sys.executable, "-c", CHILD, sys.argv[1]])
    child.wait()
"""


def test_sigterm_to_the_local_pipeline_reaches_every_descendant(tmp_path):
    import subprocess

    marker = tmp_path / "marker"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(marker)], stdout=subprocess.PIPE, text=True)
    grandchild_pid = int(parent.stdout.readline())  # the child printed it: both are running
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=20) == 128 + signal.SIGTERM
    assert "stopping 2 child processes" in parent.stdout.read()
    assert marker.read_text() == "child stopped cleanly"  # the child's own SIGTERM handler ran
    deadline = time.monotonic() + 5
    while _alive(grandchild_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild_pid)
