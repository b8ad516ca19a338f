"""tfk8s.runtime, the optional helper for training programs: the contract read from the environment, peers'
wait, the prepared shards per worker, the standard callbacks (progress, NaN stop, resume line), report()."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.trainer.test_task import REPO, _tf_config, contract_env
from tfk8s import runtime
from tfk8s.core.cluster import ReplicaType
from tfk8s.core.contract import CONTRACT_ENV, read_metrics


@pytest.fixture
def clean_env(monkeypatch):
    """No TF_CONFIG and no contract variable; the runtime's per-process state reset (and restored after)."""
    for var in (*CONTRACT_ENV, "TF_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    from tfk8s.runtime import replica

    for key, value in {"strategy": None, "diverged": False, "reporter": None, "resumed_from": 0,
                       "epoch_times": []}.items():
        monkeypatch.setitem(replica._STATE, key, value)
    return monkeypatch


def _set(monkeypatch, env: dict) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)


# --- the contract, read (no TensorFlow) -----------------------------------------------------------------------

def test_outside_tfk8s_a_program_is_one_coordinator_writing_under_the_working_dir(clean_env, tmp_path):
    clean_env.chdir(tmp_path)
    ctx = runtime.context()
    assert (ctx.label, ctx.is_coordinator, ctx.strategy_kind, ctx.num_workers) == ("chief-0", True, "default", 1)
    assert ctx.model_dir == str(tmp_path / "tfk8s-output" / "saved_model")
    assert ctx.checkpoint_dir == str(tmp_path / "tfk8s-output" / "checkpoints")
    assert (ctx.data_dir, ctx.progress_file, ctx.metrics_file) == (None, None, None)
    with pytest.raises(ValueError, match=r"no data: \$TFK8S_DATA_DIR is not set"):
        runtime.metadata()


def test_the_contract_and_tf_config_give_each_replica_its_role_and_directories(tmp_path, mnist_subset_dir):
    env = {**contract_env(tmp_path, mnist_subset_dir, "worker-1", coordinator=False), "TF_CONFIG": _tf_config(2, 1)}
    w1 = runtime.context(env)
    assert (w1.label, w1.is_coordinator, w1.num_workers, w1.strategy_kind) == (
        "worker-1", False, 2, "multi_worker_mirrored")
    assert w1.model_dir == str(tmp_path / "scratch" / "worker-1" / "saved_model")
    assert w1.progress_file == str(tmp_path / "progress" / "worker-1.json")
    assert w1.data_dir == str(mnist_subset_dir)
    assert runtime.context({"TF_CONFIG": _tf_config(2, 0)}).is_coordinator
    with_chief = _tf_config(2, 0, chief=1)
    assert not runtime.context({"TF_CONFIG": with_chief}).is_coordinator  # worker-0: the chief coordinates
    pss = runtime.context({"TF_CONFIG": _tf_config(1, 0, chief=1, ps=1, rtype=ReplicaType.CHIEF)})
    assert (pss.strategy_kind, pss.is_coordinator) == ("parameter_server", True)
    evaluator = runtime.context({"TF_CONFIG": _tf_config(2, 0, rtype=ReplicaType.EVALUATOR)})
    assert (evaluator.label, evaluator.is_coordinator) == ("evaluator-0", False)


def test_threads_are_split_among_the_processes_of_one_host_and_pss_gets_two_inter_op_threads():
    cores = len(os.sched_getaffinity(0))
    assert runtime.default_threads(runtime.context({"TF_CONFIG": _tf_config(2, 0)})) == (max(1, cores // 2),) * 2
    remote = json.dumps({"cluster": {"worker": ["a.svc:2222", "b.svc:2222"]}, "task": {"type": "worker", "index": 0}})
    assert runtime.default_threads(runtime.context({"TF_CONFIG": remote})) == (0, 0)  # a pod per replica
    pss = runtime.context({"TF_CONFIG": _tf_config(4, 0, chief=1, ps=1, rtype=ReplicaType.CHIEF)})
    assert runtime.default_threads(pss)[1] >= 2  # 6 processes; one inter-op thread deadlocks a ps/worker


def test_waiting_for_peers_says_whom_it_waits_for_and_gives_up_after_the_bound(capsys):
    with socket.socket() as up, socket.socket() as down:
        up.bind(("127.0.0.1", 0))
        up.listen()
        down.bind(("127.0.0.1", 0))  # bound, not listening: refused
        up_addr, down_addr = (f"127.0.0.1:{s.getsockname()[1]}" for s in (up, down))
        assert runtime.wait_for_peers({"worker-1": up_addr}, timeout_s=5) < 2
        t0 = time.monotonic()
        with pytest.raises(runtime.PeerTimeoutError,
                           match=re.escape(f"gave up after 2s waiting for ps-0 at {down_addr}: never accepted")):
            runtime.wait_for_peers({"worker-1": up_addr, "ps-0": down_addr}, timeout_s=2, interval_s=0.5)
        assert time.monotonic() - t0 < 5
    out = capsys.readouterr().out
    assert f"waiting for peers: ps-0 ({down_addr}) (" in out and "of at most 2s)" in out
    assert "worker-1" not in out  # only the missing ones are named


def test_while_waiting_a_worker_listens_on_its_own_port_so_its_peers_see_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        own = s.getsockname()[1]
    seen = []

    def probe():
        time.sleep(0.5)
        socket.create_connection(("127.0.0.1", own), timeout=1).close()
        seen.append(True)

    threading.Thread(target=probe, daemon=True).start()
    with pytest.raises(runtime.PeerTimeoutError):
        runtime.wait_for_peers({"worker-1": "127.0.0.1:9"}, timeout_s=1.5, listen_port=own)
    assert seen == [True]
    with pytest.raises(OSError):  # and stops listening afterwards (the TensorFlow server takes the port)
        socket.create_connection(("127.0.0.1", own), timeout=1).close()


def test_a_peer_connecting_wakes_the_wait_at_once_instead_of_after_the_poll_interval():
    # The last replica to start finds every other at once and connects to each: the others must go on then,
    # not a poll interval later (issue 26: up to 0.5 s of every multi-worker start). The poll here is 30 s, so
    # only the wake-up can end the wait in time.
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    waited: list[float] = []

    def first():
        waited.append(runtime.wait_for_peers({"worker-1": f"127.0.0.1:{ports[1]}"}, timeout_s=60,
                                             listen_port=ports[0], poll_s=30))

    t = threading.Thread(target=first, daemon=True)
    t.start()
    time.sleep(1.0)  # the first one polled once (worker-1 down) and sleeps
    t0 = time.monotonic()
    assert runtime.wait_for_peers({"worker-0": f"127.0.0.1:{ports[0]}"}, timeout_s=10, listen_port=ports[1],
                                  poll_s=30) < 5
    time.sleep(0.2)  # worker-1's listener is closed; then its TensorFlow server takes the port
    with socket.socket() as server:
        server.bind(("127.0.0.1", ports[1]))
        server.listen()
        t.join(20)
    assert waited and waited[0] >= 1.0, waited
    assert time.monotonic() - t0 < 15  # not the 30 s poll: woken by worker-1's connection


def test_report_writes_valid_json_on_the_coordinator_only_with_non_finite_values_said_in_words(clean_env, tmp_path):
    import numpy as np

    metrics_file = tmp_path / "metrics" / "chief-0.json"
    clean_env.setenv("TFK8S_METRICS_FILE", str(metrics_file))
    written = runtime.report({"accuracy": np.float32(0.5), "loss": float("nan"), "epochs": np.int64(2),
                              "epoch_times_s": [1.5, float("inf")]})
    assert written["diverged"] is False and written["epochs"] == 2
    data = json.loads(metrics_file.read_text())  # strict JSON: a bare NaN would not parse in every reader
    assert data == {"accuracy": 0.5, "loss": "NaN", "epochs": 2, "epoch_times_s": [1.5, "Infinity"],
                    "diverged": False}
    _, numbers, notes = read_metrics(metrics_file)
    assert numbers == {"accuracy": 0.5, "epochs": 2.0}
    assert notes == ["loss is NaN (not a finite number): left out of the metrics"]
    with pytest.raises(TypeError, match="metric 'model' is a object"):
        runtime.report({"model": object()})

    worker = tmp_path / "metrics" / "worker-1.json"
    clean_env.setenv("TF_CONFIG", _tf_config(2, 1))
    clean_env.setenv("TFK8S_METRICS_FILE", str(worker))
    assert runtime.report({"accuracy": 0.5}) is None and not worker.exists()


# --- the data --------------------------------------------------------------------------------------------------

def test_dataset_gives_each_input_pipeline_its_own_shards_in_per_replica_batches(clean_env, mnist_subset_dir):
    import tensorflow as tf

    clean_env.setenv("TFK8S_DATA_DIR", str(mnist_subset_dir))
    parts = []
    for i in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i, num_replicas_in_sync=2)
        ds = runtime.dataset("train", batch_size=64, input_context=ctx, repeat=False, seed=0)
        images, labels = ds.element_spec
        assert (images.dtype, images.shape.as_list(), labels.dtype, labels.shape.as_list()) == (
            tf.uint8, [None, 28, 28, 1], tf.int64, [None])
        assert ds.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.OFF
        batches = list(ds.as_numpy_iterator())
        sizes = sorted(len(b[1]) for b in batches)  # shuffled input parses batches out of order: the partial
        assert set(sizes[1:]) == {32} and 0 < sizes[0] <= 32  # one may come first; the global 64 over 2 replicas
        parts.append(sum(len(b[1]) for b in batches))
    assert sum(parts) == 3000 and all(parts)  # 7 files: 4 and 3 of them

    clean_env.setenv("TF_CONFIG", _tf_config(8, 3))
    assert runtime.dataset("train", batch_size=64, in_memory=False).options().experimental_distribute.auto_shard_policy \
        == tf.data.experimental.AutoShardPolicy.DATA  # 7 files for 8 workers: by record
    assert runtime.dataset("train", batch_size=64).options().experimental_distribute.auto_shard_policy == (
        tf.data.experimental.AutoShardPolicy.OFF)  # in memory by default: this worker's part already
    test = runtime.dataset("test", batch_size=1000)  # not shuffled, not repeated: the split once
    assert sum(int(y.shape[0]) for _, y in test) == 3000
    assert runtime.metadata().num_classes == 10


# --- callbacks during a real fit --------------------------------------------------------------------------------

def _fit(epochs: int, learning_rate: float, *extra_callbacks, steps: int = 20):
    import tf_keras

    from trainer.model import build_model

    tf_keras.utils.set_random_seed(0)
    model = build_model(runtime.metadata(), learning_rate)
    train = runtime.dataset("train", batch_size=32, seed=0)
    history = model.fit(train, epochs=epochs, steps_per_epoch=steps, verbose=0,
                        callbacks=[*runtime.callbacks(batch_size=32), *extra_callbacks])
    return model, history


_DISTRIBUTE = """
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
from tfk8s import runtime
one = tf.distribute.get_strategy()
plain = tf.data.Dataset.range(8).batch(2)
assert runtime.distribute(plain, one) is plain  # one process: the dataset itself
mwms = tf.distribute.MultiWorkerMirroredStrategy()  # no TF_CONFIG: one local worker
kept = runtime.distribute(plain.repeat(), mwms)
first = iter(kept)
assert iter(kept) is first and isinstance(kept, tf.distribute.DistributedDataset)
seen = [int(x) for x in next(first)] + [int(x) for x in next(iter(kept))]
finite = runtime.distribute(plain, mwms)
assert iter(finite) is not iter(finite)  # a finite dataset gets a fresh iterator every epoch
import atexit
atexit.register(lambda: print("atexit ran"))
print("seen", seen, end="")  # no newline: finish() flushes
runtime.finish(3)
"""


def test_distribute_keeps_one_iterator_of_a_repeated_dataset_and_finish_exits_at_once():
    out = subprocess.run([sys.executable, "-c", _DISTRIBUTE], check=False, cwd=REPO, capture_output=True, text=True,
                         timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert out.returncode == 3, out.stderr[-2000:]
    assert out.stdout == "seen [0, 1, 2, 3]"  # the second iter() went on where the first stopped; no atexit


@pytest.mark.slow
def test_progress_file_is_updated_during_fit_and_marked_done_at_the_end(clean_env, tmp_path, mnist_subset_dir):
    import tf_keras

    from tfk8s.core.progress import read_progress

    _set(clean_env, contract_env(tmp_path, mnist_subset_dir))
    progress = tmp_path / "progress" / "chief-0.json"
    seen = {}

    class Spy(tf_keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch:
                if batch == 0:  # a new epoch's first step is no throughput (under PSS it is merely scheduled)
                    seen["second_epoch_first_step"] = read_progress(progress)
                return
            if batch == 0:  # the first step is reported at once, not up to 2 s later (issue 26)
                seen["first_step"] = read_progress(progress)
            if batch == 2:
                time.sleep(2.2)  # the reporter writes at most every 2 s: the next batch's update is due
            if batch == 3:
                seen["mid"] = read_progress(progress)

        def on_epoch_end(self, epoch, logs=None):
            seen[epoch] = read_progress(progress)
            if epoch == 0:
                time.sleep(2.2)  # an update is due again when the next epoch starts

    _fit(2, 3e-3, Spy())
    mid, first, done = seen["mid"], seen[0], read_progress(progress)
    assert (seen["first_step"].state, seen["first_step"].step, seen["first_step"].examples_per_sec) == \
        ("running", 1, None)  # one step (its trace included) is no throughput
    assert (mid.state, mid.epoch, mid.epochs, mid.step, mid.steps) == ("running", 1, 2, 4, 40)
    assert mid.examples_per_sec > 0 and 0 < mid.loss < 5
    assert (first.state, first.epoch, first.step) == ("running", 1, 20)
    assert seen["second_epoch_first_step"].step == 20  # no rate over a single step: the epoch's end stands
    assert (done.state, done.epoch, done.step, done.replica) == ("done", 2, 40, "chief-0")
    assert list((tmp_path / "logs" / "train").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("ckpt-*.index")) == ["ckpt-1.index", "ckpt-2.index"]


@pytest.mark.slow
def test_a_nan_loss_stops_training_at_that_step_and_marks_it_diverged(clean_env, tmp_path, mnist_subset_dir, capsys):
    _set(clean_env, contract_env(tmp_path, mnist_subset_dir))
    _, history = _fit(3, 1e9)  # measured: the loss is NaN from the second step on
    assert runtime.diverged()
    assert len(history.history["loss"]) == 1  # stopped in the first epoch, not after 3
    assert re.search(r"training diverged: loss nan at epoch 1 step \d+; stopping", capsys.readouterr().out)
    clean_env.setenv("TFK8S_METRICS_FILE", str(tmp_path / "m.json"))
    written = runtime.report({"loss": history.history["loss"][-1]})
    assert written["diverged"] is True and written["loss"] != written["loss"]  # NaN
    assert json.loads((tmp_path / "m.json").read_text()) == {"loss": "NaN", "diverged": True}


@pytest.mark.slow
def test_after_a_kill_the_rerun_resumes_from_the_backup_and_says_so(tmp_path, mnist_subset_dir):
    train = tmp_path / "train"
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(contract_env(train, mnist_subset_dir), TF_CPP_MIN_LOG_LEVEL="2")
    argv = [sys.executable, "-m", "trainer.task", "--epochs", "3", "--batch-size", "64", "--steps-per-epoch", "60",
            "--seed", "0"]
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in proc.stdout:  # the epoch line comes after BackupAndRestore's backup of that epoch
            if line.startswith("epoch 2/3"):
                proc.send_signal(signal.SIGKILL)
                break
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (train / "saved_model").exists()

    rerun = subprocess.run(argv, check=False, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resumed from epoch 2 of 3 (backup in {train / 'checkpoints' / 'backup'})" in rerun.stdout
    assert [ln.split(":")[0] for ln in rerun.stdout.splitlines() if ln.startswith("epoch ")] == ["epoch 3/3"]
    reported, _, _ = read_metrics(train / "metrics" / "chief-0.json")
    assert (reported["resumed_from_epoch"], reported["epochs_run"], reported["epochs"]) == (2, 1, 3)
    assert (train / "saved_model" / "saved_model.pb").is_file()


def test_runtime_imports_no_tensorflow_kfp_or_kubernetes():
    code = ("import sys, tfk8s.runtime; bad = [m for m in ('tensorflow', 'kfp', 'kubernetes') if m in sys.modules];"
            " print(bad)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "[]"


def test_docs_describe_every_public_function_of_the_runtime():
    doc = (Path(REPO) / "docs" / "training-program.md").read_text()
    for name in ("context", "strategy", "wait_for_peers", "serve", "dataset", "metadata", "callbacks", "progress", "save",
                 "report", "diverged", "write_scalars"):
        assert f"runtime.{name}(" in doc, name
