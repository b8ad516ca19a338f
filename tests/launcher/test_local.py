"""The local backend with a stand-in replica program (tests/fakes/fake_replica.py): real processes, real signals."""

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.signals import signal_when_started
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.errors import JobTimeoutError, LauncherTerminatedError, ReplicaFailedError
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.local import run_local

FAKE = str(Path(__file__).resolve().parents[1] / "fakes" / "fake_replica.py")
pytestmark = pytest.mark.timeout(120)  # a hung launcher fails here with its stack, not after the CI limit


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


def _kept(job: TrainingJob, log_dir: Path, lines: list[str]):
    """A log sink collecting ``lines`` and keeping each replica's log under ``log_dir``, as the launch step does
    (tfk8s.tracking.replica_logs: the local backend writes no files itself)."""
    from tfk8s.tracking.replica_logs import ReplicaLogWriter

    return ReplicaLogWriter(log_dir, [r.label for r in job.counts.replicas()]).wrap(lines.append)


def _pids(pid_dir: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in pid_dir.glob("*.pid")}


def test_ps_and_evaluator_are_stopped_when_chief_succeeds(tmp_path):
    lines: list[str] = []
    # the chief outlives the others' start (else a ps may be stopped before it wrote its pid file)
    job = _job(ReplicaCounts(chief=1, worker=2, ps=1, evaluator=1), {"chief-0": "sleep:1.5"}, pid_dir=tmp_path,
               evaluator_grace_s=0)
    result = run_local(job, log_sink=_kept(job, tmp_path / "logs", lines), stop_grace_s=2)
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
    assert "chief-0 done sleeping" in (tmp_path / "logs" / "chief-0.log").read_text()


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


def test_timeout_fails_and_kills_a_replica_that_ignores_sigterm(tmp_path):
    # the one sentence of both backends (tfk8s.launcher.engine.timed_out_message)
    with pytest.raises(JobTimeoutError, match=r"did not finish within its timeout of 1s; still running: "
                                              r"\['worker-0'\]\. Raise timeout_s or train for less"):
        run_local(_job(ReplicaCounts(worker=1), {"worker-0": "ignore-term"}, pid_dir=tmp_path, timeout_s=1),
                  log_sink=lambda _: None, stop_grace_s=1)
    assert not any(_alive(pid) for pid in _pids(tmp_path).values())


def test_sigterm_to_the_launcher_stops_every_replica(tmp_path):
    sender = signal_when_started(tmp_path, ["worker-0", "worker-1"], [(0.0, signal.SIGTERM)])
    try:
        with pytest.raises(LauncherTerminatedError, match="got SIGTERM"):
            run_local(_job(ReplicaCounts(worker=2), {"worker-0": "sleep", "worker-1": "sleep"}, pid_dir=tmp_path),
                      log_sink=lambda _: None, stop_grace_s=2)
    finally:
        sender.cancel()
    pids = _pids(tmp_path)
    assert len(pids) == 2 and not any(_alive(pid) for pid in pids.values())


PARENT = """
import subprocess, sys
from tfk8s.localrun.signals import stops_reach_children
CHILD = '''
import signal, subprocess, sys, time
def stop(*_):
    open(sys.argv[1], "w").write("child stopped cleanly")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)  # before the pid is printed: the test signals as soon as it reads it
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
print(grandchild.pid, flush=True)
time.sleep(120)
'''
with stops_reach_children(grace_s=5, log_sink=lambda line: print(line, flush=True)):
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


# -- restarts and the progress watchdog (the policy shared with Kubernetes: tfk8s.core.policy) ---------------
def _starts(state: Path) -> dict[str, int]:
    return {p.stem: len(p.read_text().splitlines()) for p in state.glob("*.starts")}


def _policy_job(counts: ReplicaCounts, behaviour: dict, tmp_path: Path, **kw) -> TrainingJob:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    env = {"FAKE_BEHAVIOUR": json.dumps(behaviour), "FAKE_PIDFILE_DIR": str(tmp_path), "FAKE_STATE_DIR": str(state)}
    return TrainingJob(name="test-job", counts=counts, command=(sys.executable, FAKE), env=env, **kw)


def test_a_worker_killed_by_a_signal_recreates_the_whole_worker_set_and_counts_one_restart(tmp_path):
    lines: list[str] = []
    job = _policy_job(ReplicaCounts(worker=2), {"worker-0": ["sleep", "exit:0"], "worker-1": ["kill", "exit:0"]},
                      tmp_path, max_restarts=3)
    result = run_local(job, log_sink=_kept(job, tmp_path / "logs", lines), stop_grace_s=2)
    assert result.restarts == 1
    log = (tmp_path / "logs" / "worker-1.log").read_text().splitlines()  # both attempts, a separator between
    sep = next(i for i, line in enumerate(log) if "worker-1 recreated (restart 1)" in line)
    assert "worker-1 attempt 0" in log[:sep] and "worker-1 attempt 1" in log[sep:]
    assert result.exit_codes == {"worker-0": 0, "worker-1": 0}
    assert _starts(tmp_path / "state") == {"worker-0": 2, "worker-1": 2}  # the whole MWMS set, once
    assert any("replica worker-1 exited -9 (killed by signal SIGKILL); retryable: recreating worker-0, worker-1 "
               "(restart 1 of max_restarts=3)" in line for line in lines), lines
    assert not any(_alive(pid) for pid in _pids(tmp_path).values())


def test_exit_code_128_and_above_is_retryable_but_1_to_127_fails_at_once(tmp_path):
    job = _policy_job(ReplicaCounts(worker=1), {"worker-0": ["exit:137", "exit:0"]}, tmp_path)
    assert run_local(job, log_sink=lambda _: None, stop_grace_s=2).restarts == 1
    (tmp_path / "state" / "worker-0.starts").unlink()
    job = _policy_job(ReplicaCounts(worker=1), {"worker-0": ["exit:127", "exit:0"]}, tmp_path)
    with pytest.raises(ReplicaFailedError, match="replica worker-0 failed with exit code 127: Error"):
        run_local(job, log_sink=lambda _: None, stop_grace_s=2)
    assert _starts(tmp_path / "state") == {"worker-0": 1}


def test_the_restart_budget_is_honoured_then_the_failure_names_the_replica_and_the_budget(tmp_path):
    from tfk8s.core.errors import RestartBudgetExhaustedError

    job = _policy_job(ReplicaCounts(worker=1), {"worker-0": "kill"}, tmp_path, max_restarts=2)
    with pytest.raises(RestartBudgetExhaustedError) as err:
        run_local(job, log_sink=lambda _: None, stop_grace_s=2)
    assert _starts(tmp_path / "state") == {"worker-0": 3}
    assert err.value.replica.label == "worker-0" and err.value.exit_code == -9
    assert "restart budget is used up (2 of max_restarts=2)" in str(err.value)
    assert "worker-0 is being killed" in str(err.value)  # its last lines


def test_a_replica_that_reported_then_stalled_is_restarted_as_hung(tmp_path):
    lines: list[str] = []
    job = _policy_job(ReplicaCounts(worker=1), {"worker-0": ["stall", "exit:0"]}, tmp_path,
                      train_dir=str(tmp_path / "train"), progress_timeout_s=1)
    result = run_local(job, log_sink=lines.append, stop_grace_s=2)
    assert result.restarts == 1 and result.exit_codes == {"worker-0": 0}
    restart = next(line for line in lines if "retryable: recreating" in line)
    assert "replica worker-0 NoProgress: no progress for 1 s (last report: epoch 1/2, step 3/10 at" in restart


def test_a_hung_replica_fails_the_job_with_no_progress_and_its_last_lines_when_the_budget_is_used(tmp_path):
    from tfk8s.core.errors import RestartBudgetExhaustedError

    job = _policy_job(ReplicaCounts(worker=1, evaluator=1), {"worker-0": "stall"}, tmp_path,
                      train_dir=str(tmp_path / "train"), progress_timeout_s=1, max_restarts=1)
    t0 = time.monotonic()
    with pytest.raises(RestartBudgetExhaustedError) as err:
        run_local(job, log_sink=lambda _: None, stop_grace_s=2)
    assert time.monotonic() - t0 < 30
    e = err.value
    assert (e.replica.label, e.reason) == ("worker-0", "NoProgress")
    assert "replica worker-0 failed: NoProgress (no progress for 1 s" in str(e)
    assert "worker-0 reported step 3, now hanging" in e.last_lines
    assert _starts(tmp_path / "state")["worker-0"] == 2
    assert not any(_alive(pid) for pid in _pids(tmp_path).values())


def test_the_watchdog_spares_programs_that_never_report_keep_reporting_or_left_an_old_file(tmp_path):
    from tfk8s.core.progress import Progress, progress_file, write_progress

    train = tmp_path / "train"
    # worker-1's file is from an earlier run (an hour old): it does not count as a report of this attempt
    write_progress(progress_file(train, "worker-1"), Progress("worker-1", time.time() - 3600, step=5))
    job = _policy_job(ReplicaCounts(worker=3), {"worker-0": "report:2.5", "worker-1": "sleep:2.5",
                                                "worker-2": "sleep:2.5"},
                      tmp_path, train_dir=str(train), progress_timeout_s=0.5, success_policy="AllWorkers",
                      startup_timeout_s=0.5)  # the start-up deadline too: only a program that said "starting"
    result = run_local(job, log_sink=lambda _: None, stop_grace_s=2)
    assert result.restarts == 0 and result.exit_codes == {"worker-0": 0, "worker-1": 0, "worker-2": 0}


CUDA_PREAMBLE = r'''
import sys
for line in ["WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
             "I0000 00:00:1796535723.808627   11112 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.",
             "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
             "I0000 00:00:1796535737.433733   11112 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.",
             "E0000 00:00:1796535738.140269   11112 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
             "training starts",
             "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
             "done"]:
    print(line, file=sys.stderr, flush=True)
'''


@pytest.mark.parametrize("gpu", [False, True])
def test_tensorflows_cuda_lines_are_left_out_of_a_replicas_log_only_on_a_machine_without_a_gpu(
        tmp_path, monkeypatch, gpu):
    """Issue 34: every local replica's log opened with TensorFlow's CUDA lines ("Could not find cuda drivers...",
    "failed call to cuInit") on a machine without a GPU (no environment variable silences them in TF 2.21); they
    are left out there, and kept where a GPU is, where they may say why it is not used."""
    from tfk8s.launcher import local

    monkeypatch.setattr(local, "has_nvidia_gpu", lambda: gpu)
    job = TrainingJob(name="test-job", counts=ReplicaCounts(worker=1),
                      command=(sys.executable, "-c", CUDA_PREAMBLE))
    lines: list[str] = []
    run_local(job, log_sink=_kept(job, tmp_path / "logs", lines))
    kept = (tmp_path / "logs" / "worker-0.log").read_text().splitlines()
    if gpu:
        assert len(kept) == 8 and "cuda" in "".join(kept)
    else:
        assert kept == ["training starts",
                        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
                        "done"]
        assert not any("cuda" in line.lower() for line in lines)
