"""The local backend's stops with the stand-in replica (tests/fakes/fake_replica.py): SIGINT as SIGTERM, the restart
exit code, the stop grace, the evaluator's time after success, the start-up deadline, the proxy exemptions and
a failure's exception line. The real-TensorFlow cases are in tests/launcher/test_local_stops_tf.py."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.fakes.signals import signal_when_started
from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.errors import LauncherTerminatedError, ReplicaFailedError, RestartBudgetExhaustedError
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.local import run_local

FAKE = str(Path(__file__).resolve().parents[1] / "fakes" / "fake_replica.py")
pytestmark = pytest.mark.timeout(120)


def _job(counts: ReplicaCounts, behaviour: dict, tmp_path: Path, **kw) -> TrainingJob:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    env = {"FAKE_BEHAVIOUR": json.dumps(behaviour), "FAKE_PIDFILE_DIR": str(tmp_path), "FAKE_STATE_DIR": str(state),
           **kw.pop("env", {})}
    return TrainingJob(name="test-job", counts=counts, command=(sys.executable, FAKE), env=env, **kw)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _pids(pid_dir: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in pid_dir.glob("*.pid")}


def _starts(tmp_path: Path) -> dict[str, int]:
    return {p.stem: len(p.read_text().splitlines()) for p in (tmp_path / "state").glob("*.starts")}


def test_sigint_takes_the_sigterm_path_and_a_second_signal_does_not_cut_the_cleanup_short(tmp_path):
    """Ctrl-C: LauncherTerminatedError naming the interruption (not a KeyboardInterrupt halfway through the
    cleanup); the SIGTERM that arrives while the replicas are being stopped (a parent passing it on) is noted and
    ignored, and a replica ignoring SIGTERM is still killed at the grace."""
    lines: list[str] = []
    job = _job(ReplicaCounts(worker=2), {"worker-0": "sleep", "worker-1": "ignore-term"}, tmp_path)
    sender = signal_when_started(tmp_path, ["worker-0", "worker-1"], [(0.0, signal.SIGINT), (1.0, signal.SIGTERM)])
    try:
        with pytest.raises(LauncherTerminatedError) as e:
            run_local(job, log_sink=lines.append, stop_grace_s=2.5)
    finally:
        sender.cancel()
    assert e.value.signum == signal.SIGINT
    assert str(e.value) == ("the launcher was interrupted by the user (SIGINT: Ctrl-C or kill -INT); every replica "
                            "of test-job was stopped")
    assert time.monotonic() - sender.sent[0] >= 2.4  # the whole grace for the replica ignoring SIGTERM
    assert "got SIGTERM again: every replica of test-job is already being stopped" in lines
    pids = _pids(tmp_path)
    assert len(pids) == 2 and not any(_alive(pid) for pid in pids.values())


def test_the_restart_exit_code_is_retryable_and_zero_turns_it_off(tmp_path):
    """A program that saved on SIGTERM exits 42 (TensorFlow's TerminationConfig): recreated, one restart used."""
    lines: list[str] = []
    job = _job(ReplicaCounts(worker=2), {"worker-0": ["sleep", "exit:0"], "worker-1": ["exit:42", "exit:0"]},
               tmp_path)
    result = run_local(job, log_sink=lines.append, stop_grace_s=2)
    assert (result.restarts, result.exit_codes) == (1, {"worker-0": 0, "worker-1": 0})
    assert any("replica worker-1 exited 42 (RestartRequested); retryable: recreating worker-0, worker-1 (restart 1 "
               "of max_restarts=3)" in line for line in lines), lines
    for p in (tmp_path / "state").glob("*.starts"):
        p.unlink()
    job = _job(ReplicaCounts(worker=1), {"worker-0": ["exit:42", "exit:0"]}, tmp_path, restart_exit_code=0)
    with pytest.raises(ReplicaFailedError, match="replica worker-0 failed with exit code 42: Error"):
        run_local(job, log_sink=lambda _: None, stop_grace_s=2)


def test_a_preempted_replica_saves_within_stop_grace_and_its_exit_42_recreates_the_set(tmp_path):
    """The notice (SIGTERM to one replica) lets it save and exit 42 by itself; the launcher recreates the set."""
    lines: list[str] = []
    job = _job(ReplicaCounts(worker=2), {"worker-0": ["sleep", "exit:0"], "worker-1": ["term:42", "exit:0"]},
               tmp_path)

    def preempt() -> None:
        deadline = time.monotonic() + 60
        while not (tmp_path / "worker-1.ready").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # until its SIGTERM handler is installed, however loaded the machine
        os.kill(_pids(tmp_path)["worker-1"], signal.SIGTERM)

    threading.Thread(target=preempt, daemon=True).start()
    result = run_local(job, log_sink=lines.append, stop_grace_s=2)
    assert result.restarts == 1 and _starts(tmp_path) == {"worker-0": 2, "worker-1": 2}
    assert "[worker-1] worker-1 got SIGTERM: saving, then exit 42" in lines


def test_stop_grace_s_is_the_time_between_sigterm_and_sigkill(tmp_path):
    job = _job(ReplicaCounts(worker=1), {"worker-0": "ignore-term"}, tmp_path, timeout_s=0.5, stop_grace_s=3)
    t0 = time.monotonic()
    with pytest.raises(Exception, match="timeout"):
        run_local(job, log_sink=lambda _: None)  # the job's stop_grace_s, not the default 10 s
    took = time.monotonic() - t0
    assert 3.0 <= took < 8, took
    assert not any(_alive(pid) for pid in _pids(tmp_path).values())


def test_the_evaluator_may_finish_by_itself_within_its_grace_after_the_chiefs_success(tmp_path):
    job = _job(ReplicaCounts(chief=1, worker=1, evaluator=1), {"chief-0": "sleep:1", "evaluator-0": "sleep:3"},
               tmp_path, evaluator_grace_s=20)
    result = run_local(job, log_sink=lambda _: None, stop_grace_s=2)
    assert result.exit_codes == {"chief-0": 0, "worker-0": 0, "evaluator-0": 0} and result.stopped == []
    job = _job(ReplicaCounts(chief=1, worker=1, evaluator=1), {"chief-0": "sleep:1", "evaluator-0": "sleep"},
               tmp_path, evaluator_grace_s=0.5)
    t0 = time.monotonic()
    result = run_local(job, log_sink=lambda _: None, stop_grace_s=2)
    assert result.stopped == ["evaluator-0"] and time.monotonic() - t0 < 10


def test_a_replica_that_never_gets_past_starting_is_hung_at_the_startup_deadline(tmp_path):
    job = _job(ReplicaCounts(worker=2), {"worker-0": "starting", "worker-1": "starting"}, tmp_path,
               train_dir=str(tmp_path / "train"), progress_timeout_s=600, startup_timeout_s=1.5, max_restarts=0)
    t0 = time.monotonic()
    with pytest.raises(RestartBudgetExhaustedError) as e:
        run_local(job, log_sink=lambda _: None, stop_grace_s=2)
    assert time.monotonic() - t0 < 20 and e.value.reason == "NoProgress"
    assert "no first step 2 s after it said it was starting" in str(e.value)
    assert not any(_alive(pid) for pid in _pids(tmp_path).values())


def test_an_evaluator_that_only_says_starting_is_not_held_to_the_startup_deadline(tmp_path):
    job = _job(ReplicaCounts(worker=1, evaluator=1), {"worker-0": "sleep:2.5", "evaluator-0": "starting"}, tmp_path,
               train_dir=str(tmp_path / "train"), startup_timeout_s=0.5, evaluator_grace_s=0)
    result = run_local(job, log_sink=lambda _: None, stop_grace_s=2)
    assert result.restarts == 0 and result.exit_codes == {"worker-0": 0}


def test_every_replica_bypasses_a_proxy_for_the_loopback_keeping_the_users_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("no_proxy", "corp.example.com")
    monkeypatch.setenv("https_proxy", "http://127.0.0.1:9")
    lines: list[str] = []
    job = _job(ReplicaCounts(worker=1), {}, tmp_path, env={"NO_PROXY": ".internal"})
    run_local(job, log_sink=lines.append, stop_grace_s=2)
    seen = json.loads(next(x for x in lines if x.startswith("[worker-0] PROXY_ENV=")).split("=", 1)[1])
    assert seen == dict.fromkeys(("NO_PROXY", "no_proxy", "no_grpc_proxy"), "corp.example.com,.internal,127.0.0.1,"
                                                                             "localhost")


def test_a_failure_says_the_exception_even_when_a_long_value_pushed_it_out_of_the_last_lines(tmp_path):
    """Keras 3 under MultiWorkerMirroredStrategy fails with a ValueError whose message is a tensor's repr (here
    80 lines): the error line and the fix are in the message all the same. The program stands for it: a frame in
    a keras/src/ folder, then the error as Keras 3 words it."""
    program = tmp_path / "fails.py"
    program.write_text("raise ValueError('Attempt to convert a value (PerReplica:{\\n' + "
                       "'\\n'.join(f'  {i}: [0.1, 0.2, 0.3]' for i in range(80)) + '\\n}) with an unsupported type "
                       "(<class PerReplica>) to a Tensor.')\n")
    frame = tmp_path / "k3" / "keras" / "src" / "trainers" / "trainer.py"
    frame.parent.mkdir(parents=True)
    frame.write_text("import runpy, sys\nrunpy.run_path(sys.argv[1])\n")
    job = TrainingJob(name="test-job", counts=ReplicaCounts(worker=1), command=(sys.executable, str(frame),
                                                                                  str(program)))
    with pytest.raises(ReplicaFailedError) as e:
        run_local(job, log_sink=lambda _: None, stop_grace_s=2)
    err = e.value
    assert len(err.last_lines) == 30 and "ValueError" not in "".join(err.last_lines)  # pushed out of the tail
    assert err.error == "ValueError: Attempt to convert a value (PerReplica:{"
    message = str(err).splitlines()
    assert message[1] == "  error: ValueError: Attempt to convert a value (PerReplica:{"
    assert message[2].startswith("  fix: Keras 3's Model.fit does not work under MultiWorkerMirroredStrategy "
                                 "(keras-team/keras#20585): use tf-keras")
