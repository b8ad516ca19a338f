"""Stops with real TensorFlow on the local backend: a program checkpointing within the preemption notice
(PreemptionCheckpointHandler) resumes after its exit 42; a proxy in the environment no longer hangs the job; a
restart tells its story on the console and the progress keeps its place; Keras 3's failure under
MultiWorkerMirroredStrategy names the fix."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from tfk8s.core.cluster import ReplicaCounts
from tfk8s.core.job import TrainingJob
from tfk8s.launcher.local import python_command, run_local

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "tests" / "fakes" / "programs"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"}


def test_a_program_checkpointing_on_sigterm_exits_42_and_resumes_where_it_saved(tmp_path):
    """PreemptionCheckpointHandler: SIGTERM to worker-1 mid-training, every worker saves at the same step and
    exits 42 (TerminationConfig's restart code), which is retryable: the set is recreated, restores the checkpoint
    and ends with w == PCH_STEPS (no step lost or done twice). Before, exit 42 failed the job as a program error."""
    lines: list[str] = []
    preempted = threading.Event()

    def sink(line: str) -> None:
        lines.append(line)
        if line == "[worker-1] step 15" and not preempted.is_set():
            preempted.set()
            pid = int(next(x for x in lines if x.startswith("[worker-1] pid ")).split()[-1])
            os.kill(pid, signal.SIGTERM)  # the preemption notice

    job = TrainingJob(name="pch-test", counts=ReplicaCounts(worker=2),
                      command=(sys.executable, str(PROGRAMS / "preemption_checkpoint.py")),
                      env={**QUIET, "PCH_STEPS": "60"}, train_dir=str(tmp_path / "train"), data_dir=str(tmp_path),
                      timeout_s=300, stop_grace_s=30)
    result = run_local(job, log_sink=sink)
    log = "\n".join(lines)
    assert preempted.is_set() and result.restarts == 1, log[-3000:]
    (restart,) = [x for x in lines if "retryable: recreating" in x]
    assert " exited 42 (RestartRequested)" in restart  # both save and exit 42, whichever the launcher saw first
    assert restart.endswith("retryable: recreating worker-0, worker-1 (restart 1 of max_restarts=3)")
    starts = [int(x.rsplit(" ", 1)[1]) for x in lines if x.startswith("[worker-0] starting at step ")]
    assert starts[0] == 0 and 15 <= starts[1] <= 20, starts  # the second attempt resumed from the saved step
    assert "[worker-0] done: w=60 step=60" in lines and "[worker-1] done: w=60 step=60" in lines


def _blackhole() -> tuple[socket.socket, list[socket.socket]]:
    """A proxy that accepts connections and never answers (what a corporate proxy is to the replicas' gRPC)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return server, held


def test_a_proxy_in_the_environment_no_longer_hangs_a_two_worker_job(mnist_subset_dir, tmp_path, monkeypatch):
    """http_proxy/https_proxy set (tensorflow#24887): the replicas' gRPC went to the proxy and the job sat at
    "replicas 2/2 up" until its deadline (measured: MultiWorkerMirroredStrategy's constructor never returned).
    With NO_PROXY/no_grpc_proxy naming the loopback, it trains; the proxy sees none of the job's traffic."""
    server, held = _blackhole()
    proxy = f"http://127.0.0.1:{server.getsockname()[1]}"
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, proxy)
    for var in ("NO_PROXY", "no_proxy", "no_grpc_proxy"):
        monkeypatch.delenv(var, raising=False)
    try:
        job = TrainingJob(name="proxy-test", counts=ReplicaCounts(worker=2), env=QUIET,
                          command=python_command("trainer.task", "--data-dir", str(mnist_subset_dir), "--epochs", "1",
                                                 "--batch-size", "128", "--max-train-examples", "1024"),
                          train_dir=str(tmp_path / "train"), data_dir=str(mnist_subset_dir), timeout_s=150,
                          progress_timeout_s=600, startup_timeout_s=120)
        t0 = time.monotonic()
        result = run_local(job, log_sink=lambda _: None, cwd=REPO, stop_grace_s=2)
        took = time.monotonic() - t0
    finally:
        server.close()
    assert result.exit_codes == {"worker-0": 0, "worker-1": 0} and result.restarts == 0
    assert held == [] and took < 120, took


def test_a_restart_tells_its_story_on_the_console_and_the_progress_keeps_its_place(mnist_subset_dir, tmp_path):
    """kill -9 of worker-1 after epoch 1, through the launch step's tracking: the console lines say the restart,
    its cause and where the coordinator resumed; worker-0's progress never drops back to epoch 1 after the kill
    (the new attempt's first report was epoch 1, step 0 before), and the progress line says the attempt."""
    from tests.launcher.test_local_recovery import _worker_pid
    from tfk8s.core.progress import progress_file, read_progress
    from tfk8s.tracking.progress_view import plain_line
    from tfk8s.tracking.records import job_status, read_record
    from tfk8s.tracking.tracked import tracked

    train = tmp_path / "runs" / "r1" / "train"
    job = TrainingJob(name="tfk8s-r1", counts=ReplicaCounts(worker=2), env=QUIET, train_dir=str(train),
                      data_dir=str(mnist_subset_dir), timeout_s=400,
                      command=python_command("trainer.task", "--epochs", "3", "--batch-size", "64",
                                             "--max-train-examples", "2000", "--seed", "0"))
    lines: list[str] = []
    reports: list[tuple[float, int | None]] = []  # (time, epoch) of each of worker-0's reports
    killed_at: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            p = read_progress(progress_file(train, "worker-0"))
            if p is not None and (not reports or reports[-1][0] != p.time):
                reports.append((p.time, p.epoch))
            time.sleep(0.05)

    def kill() -> None:
        killed_at.append(time.time())
        os.kill(_worker_pid(1), signal.SIGKILL)

    def sink(line: str) -> None:
        lines.append(line)
        if line.startswith("[worker-1] epoch 1/") and not killed_at:
            threading.Timer(0.5, kill).start()
            killed_at.append(0.0)  # armed

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with tracked(job, "local", train, sink) as t:
            t.recorder.result = run_local(job, log_sink=t.sink, cwd=REPO, stop_grace_s=5)
    finally:
        done.set()
        watcher.join(5)
    assert len(killed_at) == 2 and t.recorder.result.restarts == 1, "\n".join(lines[-40:])
    story = [x for x in lines if x.startswith("tfk8s: ") and not x.startswith("tfk8s: progress")]
    assert story[0] == ("tfk8s: restart 1 of max_restarts=3: replica worker-1 exited -9 (killed by signal SIGKILL); "
                        "recreating worker-0, worker-1")
    assert story[1] in [f"tfk8s: worker-0 resumed from epoch {k} of 3 (attempt 2)" for k in (1, 2)], story
    resumed = int(story[1].split("epoch ")[1].split()[0])
    after = [epoch for at, epoch in reports if at > killed_at[1] + 1.0]  # the new attempt's reports
    assert after and min(e for e in after if e is not None) == resumed + 1, (resumed, reports)
    assert "attempt 2 (restarts 1)" in plain_line(job_status(read_record(train / "job.json")))


def test_keras_3_under_multi_worker_mirrored_strategy_fails_naming_the_tf_keras_fix(tmp_path):
    """keras-team/keras#20585: Keras 3's fit under MultiWorkerMirroredStrategy fails with a ValueError whose
    message is a tensor's repr of a hundred lines; the failure holds the error line and the fix."""
    from tfk8s.core.errors import ReplicaFailedError

    job = TrainingJob(name="keras3-test", counts=ReplicaCounts(worker=2),
                      command=(sys.executable, str(PROGRAMS / "keras3_mwms.py")),
                      env={"TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "0"}, timeout_s=300)
    with pytest.raises(ReplicaFailedError) as e:
        run_local(job, log_sink=lambda _: None, stop_grace_s=2)
    message = str(e.value)
    assert e.value.error.startswith("ValueError: Attempt to convert a value (PerReplica:"), message[:2000]
    assert "  fix: Keras 3's Model.fit does not work under MultiWorkerMirroredStrategy (keras-team/keras#20585): use " \
           "tf-keras" in message
