"""Tracking local jobs for real: a launch step (tests/fakes/fake_launch.py: the real tracking around the local
backend) runs stand-in replicas (tests/fakes/fake_replica.py) that report progress; ``tfk8s get/describe/logs/wait/
delete`` read the job record and files it leaves on the volume, while it runs and after it has ended."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfk8s.cmd import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_STOPPED, EXIT_TIMEOUT, main
from tfk8s.tracking import records as jobs
from tfk8s.tracking.progress_view import ProgressMonitor, plain_line, tty_line
from tfk8s.tracking.records import JobStatus

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


def ctl(volume: Path, *args: str) -> tuple[int, str, str]:
    """Run ``tfk8s ARGS --volume VOLUME`` in this process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = main([*args, "--volume", str(volume)])
    finally:
        sys.stdout, sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def start_launch(volume: Path, run_id: str, behaviour: dict, workers: int = 2, max_restarts: int = 0
                 ) -> subprocess.Popen:
    train = volume / "runs" / run_id / "train"
    train.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TFK8S_PROGRESS_INTERVAL_S": "0.5"}
    return subprocess.Popen([sys.executable, str(REPO / "tests" / "fakes" / "fake_launch.py"), str(train),
                             json.dumps(behaviour), str(workers), str(max_restarts)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def wait_for(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_get_describe_logs_wait_while_a_local_job_runs_and_after_it_ended(tmp_path):
    launch = start_launch(tmp_path, "r1", {"worker-0": "train:6", "worker-1": "train:6"})
    try:
        # running: a progress file says how far; the record says which replicas are up
        wait_for(lambda: (jobs.job_status(jobs.find_record(tmp_path, "r1")).step or 0) >= 3
                 if (tmp_path / "runs/r1/train/job.json").exists() else False, "3 steps reported")
        code, out, _ = ctl(tmp_path, "get")
        assert code == EXIT_OK
        head, row = out.splitlines()
        assert head.split() == ["JOB", "BACKEND", "REPLICAS", "STATE", "PROGRESS", "EPOCH", "EX/S", "RESTARTS", "AGE"]
        cells = row.split()
        assert cells[:5] == ["tfk8s-r1", "local", "worker", "2/2", "Running"]
        assert 10 <= int(cells[5].rstrip("%")) < 100 and cells[6] in ("1/2", "2/2") and int(cells[7]) > 1000

        code, out, _ = ctl(tmp_path, "wait", "tfk8s-r1", "--timeout", "0.3")
        assert code == EXIT_TIMEOUT

        # one job by name or run id, as `kubectl get pods NAME`; an unknown one is an error (exit 4)
        for name in ("tfk8s-r1", "r1"):
            code, out, _ = ctl(tmp_path, "get", name)
            assert code == EXIT_OK and out.splitlines()[1].split()[:2] == ["tfk8s-r1", "local"]
        code, out, err = ctl(tmp_path, "get", "tfk8s-r1", "nope")
        assert code == EXIT_NOT_FOUND and len(out.splitlines()) == 2 and "error: no job 'nope'" in err
        assert ctl(tmp_path, "get", "nope")[:2] == (EXIT_NOT_FOUND, "")

        code, out, _ = ctl(tmp_path, "get", "-o", "json")
        (item,) = json.loads(out)
        assert item["state"] == "Running" and item["total"] == {"worker": 2} and item["ready"] == {"worker": 2}
        assert 0 < item["progress"] < 1 and item["record"]["launcher"]["pid"] == launch.pid

        code, out, _ = ctl(tmp_path, "describe", "r1")
        assert "State:         Running" in out and "TF_CONFIG of worker-0" in out
        assert '"task": {"type": "worker", "index": 0}' in out and "127.0.0.1:" in out
        assert f"replica logs:      {tmp_path.resolve()}/runs/r1/train/replica-logs" in out
        assert f"{tmp_path.resolve()}/runs/r1/report.html  (not there)" in out  # not written while it runs
        assert out.rstrip().splitlines()[-2].strip() == "Events:" or "Events:" in out.split("Files:")[1]

        # follow worker-1's log from the volume until the job ends
        code, out, _ = ctl(tmp_path, "logs", "tfk8s-r1", "worker-1", "-f")
        assert code == EXIT_OK
        lines = out.splitlines()
        assert lines[0].startswith("TF_CONFIG=") and '"index":1' in lines[0]
        assert [x for x in lines if " step " in x] == [f"worker-1 step {i}/20" for i in range(1, 21)]
        assert lines[-1] == "worker-1 done training"
    finally:
        out, _ = launch.communicate(timeout=30)
    assert launch.returncode == 0, out
    # off a terminal the launch step printed plain progress lines, no bar or control characters
    progress = [x for x in out.splitlines() if x.startswith("tfk8s: progress tfk8s-r1 Running")]
    assert progress and "\x1b" not in out and "\r" not in out and "[#" not in out
    assert out.splitlines()[-1].startswith("tfk8s: progress tfk8s-r1 Succeeded  100%  epoch 2/2  step 20/20")

    # ended: the same commands answer from the record
    assert ctl(tmp_path, "wait", "r1")[:2] == (EXIT_OK, "tfk8s-r1 Succeeded\n")
    code, out, _ = ctl(tmp_path, "get")
    assert out.splitlines()[1].split()[:7] == ["tfk8s-r1", "local", "worker", "2/2", "Succeeded", "100%", "2/2"]
    code, out, _ = ctl(tmp_path, "logs", "r1")
    assert "[worker-0] worker-0 step 20/20" in out and "[worker-1] worker-1 done training" in out
    record = jobs.find_record(tmp_path, "r1")
    assert record["replica_states"] == {"worker-0": "Succeeded", "worker-1": "Succeeded"}
    assert record["finished"] >= record["created"] and record["wall_time_s"] > 5
    assert record["cluster_spec"]["worker"][1].startswith("127.0.0.1:")
    assert any(e["message"].startswith("tfk8s-r1 succeeded in ") for e in record["events"])


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


def _launch_with_pids(volume: Path, run_id: str, behaviour: dict) -> tuple[subprocess.Popen, Path]:
    pid_dir = volume / f"pids-{run_id}"
    pid_dir.mkdir()
    os.environ["FAKE_PIDFILE_DIR"] = str(pid_dir)
    try:
        return start_launch(volume, run_id, behaviour), pid_dir
    finally:
        del os.environ["FAKE_PIDFILE_DIR"]


def _dead(pid_dir: Path) -> bool:
    return all(not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
               for pid in (int(p.read_text()) for p in pid_dir.glob("*.pid")))


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


def test_a_job_whose_launcher_died_reads_as_lost_and_unknown_jobs_exit_4(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    train = tmp_path / "runs" / "r4" / "train"
    record = {"name": "tfk8s-r4", "backend": "local", "state": "Running", "created": time.time() - 5 * 3600 - 60,
              "replicas": {"worker": 1}, "replica_states": {"worker-0": "Running"},
              "launcher": {"pid": dead.pid, "host": __import__("socket").gethostname()},
              "paths": {"train_dir": str(train)}}
    jobs.write_record(train / "job.json", record)
    _, out, _ = ctl(tmp_path, "get")
    assert out.splitlines()[1].split()[:5] == ["tfk8s-r4", "local", "worker", "0/1", "Lost"]
    assert out.splitlines()[1].split()[-1] == "5h"
    assert ctl(tmp_path, "wait", "r4")[0] == EXIT_FAILED
    code, _, err = ctl(tmp_path, "describe", "nope")
    assert code == EXIT_NOT_FOUND and "no job 'nope'" in err and "tfk8s-r4" in err and "--volume" in err


def _status(**kw) -> JobStatus:
    base = {"name": "tfk8s-7", "backend": "local", "state": "Running", "ready": {"worker": 2}, "total": {"worker": 2},
                "fraction": 0.25, "epoch": 1, "epochs": 2, "step": 10, "steps": 40, "examples_per_sec": 5120.0, "eta_s": 95.0}
    return JobStatus(**{**base, **kw})


def test_progress_lines_plain_and_on_a_terminal():
    assert plain_line(_status()) == ("tfk8s: progress tfk8s-7 Running   25%  epoch 1/2  step 10/40  5,120 ex/s  "
                                     "ETA 1m35s  replicas 2/2 up")
    assert tty_line(_status()) == ("tfk8s-7 [######------------------]  25%  epoch 1/2  step 10/40  5,120 ex/s  "
                                   "ETA 1m35s  2/2 up")
    # a program that reports nothing still shows its replicas
    assert plain_line(_status(fraction=None, epoch=None, step=None, examples_per_sec=None, eta_s=None,
                              ready={"worker": 1})) == "tfk8s: progress tfk8s-7 Running  replicas 1/2 up"
    # once it has ended: how many succeeded (the chief; a ps stopped after it is not "up")
    ended = _status(state="Succeeded", fraction=1.0, eta_s=None, ready={"chief": 1}, total={"chief": 1, "ps": 1})
    assert plain_line(ended).endswith("100%  epoch 1/2  step 10/40  5,120 ex/s  replicas 1/2 succeeded")


def test_monitor_redraws_one_line_on_a_terminal_and_prints_other_output_above_it():
    out = io.StringIO()
    with ProgressMonitor(lambda: _status(), out, tty=True, interval_s=0.05) as m:
        time.sleep(0.2)
        m.print_line("[worker-0] hello")
    text = out.getvalue()
    assert text.count("\n") == 2  # the printed line and the bar's final state
    assert "\r\x1b[K[worker-0] hello\ntfk8s-7 [######" in text
    assert text.endswith("2/2 up\n")
    plain = io.StringIO()
    with ProgressMonitor(lambda: _status(), plain, tty=False, interval_s=0.05):
        time.sleep(0.18)
    assert "\r" not in plain.getvalue() and plain.getvalue().count("\n") == 1  # unchanged: said once


def test_console_script_and_module_entry_point():
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tfk8s"] == "tfk8s.cmd:entry_point"
    done = subprocess.run([sys.executable, "-m", "tfk8s", "--help"], capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert done.returncode == 0
    for verb in ("get", "describe", "logs", "wait", "delete", "report", "run"):
        assert verb in done.stdout


def test_the_live_eta_comes_from_the_step_rate_since_the_job_was_first_seen_running():
    steps = iter([0, 10, 11, 20])
    m = ProgressMonitor(lambda: _status(step=next(steps), steps=100, eta_s=999.0), io.StringIO(), tty=False,
                        interval_s=100)
    assert m._current().eta_s is None  # step 0: tracing and handshakes, no rate yet
    before_first = time.monotonic()
    assert m._current().eta_s is None  # the first sample
    assert m._current().eta_s is None  # one step since: too few
    time.sleep(0.2)
    eta = m._current().eta_s  # 10 steps since the first sample, 80 to go: 8 times the time those 10 took
    took = time.monotonic() - before_first
    assert 8 * 0.2 <= eta <= 8 * took, (eta, took)


def test_no_eta_while_the_job_stops_restarts_or_does_not_step(monkeypatch):
    """Issue 34: the ETA grew while a job stopped or restarted (the step count stood still, the time ran on); it is
    left out while a replica is down, while a new attempt reports no step yet, and once no step came for a few step
    times; a new attempt's rate is measured from its own steps."""
    from tfk8s.tracking import progress_view

    clock = [1000.0]
    monkeypatch.setattr(progress_view.time, "monotonic", lambda: clock[0])
    feed: list[JobStatus] = []
    m = ProgressMonitor(lambda: feed[-1], io.StringIO(), tty=False, interval_s=100)

    def at(t: float, **kw) -> str:
        clock[0] = 1000.0 + t
        feed.append(_status(steps=100, **kw))
        return plain_line(m._current())

    at(0, step=10, fraction=0.10)
    at(1, step=11, fraction=0.11)
    assert "ETA 1m28s" in at(2, step=12, fraction=0.12)  # 1 step/s, 88 to go
    assert "ETA" not in at(3, step=12, fraction=0.12, ready={"worker": 1})  # stopping: worker-1 is down
    assert "ETA" not in at(4, step=12, fraction=0.12, ready={"worker": 0})
    # recreated (attempt 2): it reports no step while it starts up; the line keeps its place, without an ETA
    line = at(30, step=None, fraction=None, epoch=None, restarts=1, ready={"worker": 2})
    assert "12%" in line and "step 12/100" in line and "ETA" not in line and "attempt 2 (restarts 1)" in line
    at(40, step=12, fraction=0.12, restarts=1)  # resumed: the rate is measured again, from this attempt's steps
    at(42, step=13, fraction=0.13, restarts=1)
    assert "ETA 2m52s" in at(44, step=14, fraction=0.14, restarts=1)  # 0.5 step/s, 86 to go
    assert "ETA 2m52s" in at(46, step=14, fraction=0.14, restarts=1)  # a step takes 2 s: not stalled yet
    assert "ETA" not in at(60, step=14, fraction=0.14, restarts=1)  # nothing for 16 s (> 10 s, > 3 step times)
