"""The program every training replica runs.

    python -m trainer.task --data-dir D --model-dir M --epochs E --batch-size B [--learning-rate LR]
                           [--max-train-examples N] [--steps-per-epoch N] [--seed S]
                           [--intra-op-threads N] [--inter-op-threads N]

``B`` is the GLOBAL batch size (examples per global step, all replicas together). Each replica finds its role
in ``$TF_CONFIG`` (the layout of :mod:`tfk8s.cluster`):

- no TF_CONFIG, or a cluster with a single chief/worker: the default strategy (one process) trains;
- several chief/worker replicas and no ``ps``: ``MultiWorkerMirroredStrategy`` (synchronous all-reduce);
  every chief/worker trains on its own shards;
- a cluster with ``ps`` (it then has a chief and needs at least one worker): ``ParameterServerStrategy``
  (asynchronous updates). Each ``ps`` and ``worker`` replica starts a ``tf.distribute.Server`` (grpc) and
  joins it: it never exits by itself, the launcher stops it once the chief has succeeded (TFJob semantics).
  The ``chief`` is the coordinator: it waits until every ps/worker accepts connections, creates the
  variables on the ps, and schedules each training step (``B`` examples) on whichever worker is free, so an
  epoch is ``steps_per_epoch`` steps spread over the workers rather than an exact pass over the data; every
  worker reads its own input pipeline (shard files ``i::workers``, or every ``workers``-th record of each
  file when there are fewer files than workers; shuffled, repeated). Only the chief runs the callbacks and
  saves. A ps/worker gets at least 2 inter-op threads: with 1 it deadlocks on the first step (TF 2.21);
- the ``evaluator`` replica (not part of the cluster) trains nothing: it watches ``M/checkpoints``, evaluates
  every new checkpoint on the test split, prints ``evaluator: checkpoint N: loss=... accuracy=...`` and
  writes TensorBoard scalars to ``M/logs/eval``, until SIGTERM (the launcher stops it once the job has
  succeeded, so it may miss the last checkpoint if the chief finishes first). It works beside either strategy.

Training: ``steps_per_epoch = ceil(train_examples / B)`` unless ``--steps-per-epoch`` is given; the input
repeats, so every epoch is exactly that many global steps. Callbacks: ``BackupAndRestore`` in ``M/backup``
(a restarted worker, or under ``ParameterServerStrategy`` a restarted chief, resumes from the last finished
epoch), ``ModelCheckpoint`` weights after every epoch in ``M/checkpoints/ckpt-<epoch>`` (what the evaluator
reads; kept after training), TensorBoard scalars per epoch in ``M/logs/train`` (chief only), and one progress
line per epoch on stdout (loss, accuracy, examples/sec).

Outputs: the chief (or worker 0 without a chief, or the single process) writes the SavedModel to
``M/saved_model`` and ``M/training_summary.json``. Under ``MultiWorkerMirroredStrategy`` every other worker
also saves, into a temporary directory that it removes: saving runs collective ops, so a chief saving alone
would block (tensorflow#38635). Under ``ParameterServerStrategy`` the coordinator saves alone (it reads the
variables from the ps).

Exit codes: 0 success (the evaluator: stopped by SIGTERM); 2 bad arguments, missing data, unsupported
cluster; 1 any other error (e.g. a ps/worker unreachable for SERVER_WAIT_S seconds).
"""

from __future__ import annotations

import os

# Before TensorFlow is imported anywhere: Keras 3's fit breaks under multi-worker strategies
# (keras-team/keras#20585), so `tf.keras` must resolve to tf_keras (Keras 2). We use tf_keras directly too.
os.environ["TF_USE_LEGACY_KERAS"] = "1"

import argparse
import json
import math
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from tfk8s.cluster import (
    ClusterConfigError,
    Replica,
    ReplicaCounts,
    ReplicaType,
    coordinator,
    parse_tf_config,
)
from tfk8s.dataset import DatasetMetadata, load_metadata

_START = time.perf_counter()

EXIT_USAGE = 2
SAVED_MODEL_DIR = "saved_model"
BACKUP_DIR = "backup"
LOGS_DIR = "logs"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_PATTERN = "ckpt-{epoch}"  # ModelCheckpoint's file name: ckpt-1 after the first epoch
SUMMARY_FILE = "training_summary.json"
TRAIN_SPLIT = "train"
EVAL_SPLIT = "test"
EVAL_LOGS_DIR = "eval"  # under LOGS_DIR, beside "train"

ROLE_TRAIN = "train"  # runs model.fit (every trainer; under ParameterServerStrategy the coordinator)
ROLE_SERVE = "serve"  # ps and workers under ParameterServerStrategy: a tf.distribute.Server, joined
ROLE_EVALUATE = "evaluate"  # the evaluator replica: evaluates the checkpoints until stopped

# A ps/worker server with a single inter-op thread deadlocks on the first scheduled step (TF 2.21, measured):
# the default of cores / local processes (1 for chief + worker + ps on 2 cores) is raised to this.
PSS_MIN_INTER_OP_THREADS = 2
SERVER_WAIT_S = 600.0  # the coordinator waits this long for every ps/worker to accept connections
EVAL_POLL_S = 1.0  # the evaluator looks for a new checkpoint this often

# The measured defaults (see tfk8s.training), shared with the pipeline's parameters.
from tfk8s.training import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LEARNING_RATE


class UsageError(Exception):
    """Bad arguments, missing data or an unsupported cluster: reported on stderr, exit code 2."""


@dataclass(frozen=True)
class TrainingSummary:
    """Contents of ``training_summary.json`` (written by the chief).

    Attributes:
        epochs: epochs requested. global_batch_size: examples per global step, all replicas together.
        num_replicas_in_sync: replicas of the strategy (under ``ParameterServerStrategy``: per worker, 1 on
            CPU). num_workers: training processes (chief + workers; under ``ParameterServerStrategy`` the
            workers, which run the steps the chief schedules).
        strategy: ``"default"``, ``"multi_worker_mirrored"`` or ``"parameter_server"``
            (:meth:`tfk8s.cluster.ReplicaCounts.strategy`).
        final_loss / final_accuracy: training loss and accuracy of the last epoch (as reported by ``fit``).
        examples_per_sec: examples trained per second of ``fit``, all workers together.
        wall_time_s: seconds from the program's start to the end of saving (TensorFlow start-up included).
        train_examples: distinct training examples used (the split's size, or ``--max-train-examples``).
        steps_per_epoch: global steps per epoch. epoch_times_s: seconds per epoch run by this process.
    """

    epochs: int
    global_batch_size: int
    num_replicas_in_sync: int
    num_workers: int
    strategy: str
    final_loss: float
    final_accuracy: float
    examples_per_sec: float
    wall_time_s: float
    train_examples: int
    steps_per_epoch: int
    epoch_times_s: list[float]


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface (argparse exits with code 2 on malformed arguments)."""
    p = argparse.ArgumentParser(prog="python -m trainer.task", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True, help="directory written by the prepare-dataset step")
    p.add_argument("--model-dir", required=True,
                   help="output: saved_model/, logs/, backup/, checkpoints/, training_summary.json")
    p.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                   help="GLOBAL batch size, divisible by the number of replicas")
    p.add_argument("--learning-rate", type=float, default=DEFAULT_LEARNING_RATE,
                   help="initial Adam learning rate, cosine-decayed to 0 over epochs * steps per epoch")
    p.add_argument("--max-train-examples", type=int, default=None,
                   help="use only the first N training examples (tests, smoke runs)")
    p.add_argument("--steps-per-epoch", type=int, default=None,
                   help="global steps per epoch; default ceil(train examples / batch size)")
    p.add_argument("--seed", type=int, default=None, help="seed for weights and shuffling")
    p.add_argument("--intra-op-threads", type=int, default=None,
                   help="TensorFlow intra-op threads per process; 0: TF's default (all cores); default: "
                        "cores / training processes on this host when all run on 127.0.0.1/localhost, else 0")
    p.add_argument("--inter-op-threads", type=int, default=None,
                   help="TensorFlow inter-op threads per process; 0: TF's default; default: same rule, but at "
                        "least 2 under ParameterServerStrategy (1 deadlocks it)")
    return p


@dataclass(frozen=True)
class Plan:
    """What this process will do, decided before TensorFlow starts.

    ``role`` is :data:`ROLE_TRAIN`, :data:`ROLE_SERVE` or :data:`ROLE_EVALUATE`; ``cluster`` the cluster spec
    from TF_CONFIG (``{}`` for a single process).
    """

    metadata: DatasetMetadata
    replica: Replica | None
    num_workers: int
    is_chief: bool
    strategy: str
    role: str
    cluster: dict[str, list[str]]
    train_examples: int
    steps_per_epoch: int
    intra_op_threads: int
    inter_op_threads: int


def _usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _local_workers(spec: dict[str, list[str]]) -> int:
    """TensorFlow processes of ``spec`` (chief, workers, ps) that share this host (all loopback), else 1."""
    addrs = spec.get("chief", []) + spec.get("worker", []) + spec.get("ps", [])
    hosts = {a.rsplit(":", 1)[0] for a in addrs}
    return len(addrs) if addrs and hosts <= {"127.0.0.1", "localhost"} else 1


def make_plan(args: argparse.Namespace, tf_config: str | None) -> Plan:
    """Validate the arguments and TF_CONFIG and decide this replica's role.

    Raises:
        UsageError: with a message saying what to fix.
    """
    for flag, value, minimum in (("--epochs", args.epochs, 1), ("--batch-size", args.batch_size, 1),
                                 ("--max-train-examples", args.max_train_examples, 1),
                                 ("--steps-per-epoch", args.steps_per_epoch, 1),
                                 ("--intra-op-threads", args.intra_op_threads, 0),
                                 ("--inter-op-threads", args.inter_op_threads, 0)):
        if value is not None and value < minimum:
            raise UsageError(f"{flag} must be >= {minimum}, got {value}")
    if not args.learning_rate > 0:
        raise UsageError(f"--learning-rate must be > 0, got {args.learning_rate}")

    try:
        spec, replica = parse_tf_config(tf_config)
    except ClusterConfigError as e:
        raise UsageError(str(e)) from e
    is_evaluator = replica is not None and replica.replica_type is ReplicaType.EVALUATOR
    if replica is not None and not is_evaluator and replica.index >= len(spec.get(replica.replica_type.value, [])):
        raise UsageError(f"TF_CONFIG task {replica.label} is not in its cluster {spec}")
    if spec.get("ps"):
        if len(spec.get("chief", [])) != 1 or not spec.get("worker"):
            raise UsageError(
                f"the cluster has {len(spec['ps'])} ps replica(s): ParameterServerStrategy needs exactly one "
                f"chief (the coordinator) and at least one worker, got {spec}: set chief=1 and worker >= 1"
            )
        num_workers = len(spec["worker"])
        strategy = "parameter_server"
        is_chief = replica == Replica(ReplicaType.CHIEF, 0)
        role = ROLE_EVALUATE if is_evaluator else ROLE_TRAIN if is_chief else ROLE_SERVE
    else:
        try:
            counts = ReplicaCounts(chief=len(spec.get("chief", [])), worker=len(spec.get("worker", [])))
        except ClusterConfigError:
            counts = ReplicaCounts(chief=0, worker=1)  # no (training) cluster: a single process
        num_workers = counts.num_trainers if replica is not None else 1
        strategy = counts.strategy() if num_workers > 1 else "default"
        is_chief = not is_evaluator and (replica is None or num_workers == 1 or replica == coordinator(counts))
        role = ROLE_EVALUATE if is_evaluator else ROLE_TRAIN
        if args.batch_size % num_workers:
            raise UsageError(
                f"--batch-size {args.batch_size} is the global batch and must be divisible by the {num_workers} "
                f"workers, e.g. {math.ceil(args.batch_size / num_workers) * num_workers}"
            )

    if not os.path.isdir(args.data_dir) and "://" not in args.data_dir:
        raise UsageError(f"--data-dir {args.data_dir} does not exist: run the prepare-dataset step first")
    try:
        meta = load_metadata(args.data_dir)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from e
    split = EVAL_SPLIT if is_evaluator else TRAIN_SPLIT
    if split not in meta.splits:
        raise UsageError(f"{args.data_dir} has no {split!r} split (it has {sorted(meta.splits)})")
    available = meta.splits[TRAIN_SPLIT].num_examples if TRAIN_SPLIT in meta.splits else 0
    train_examples = min(available, args.max_train_examples or available)
    steps = args.steps_per_epoch or max(1, math.ceil(train_examples / args.batch_size))

    local = _local_workers(spec) if replica is not None else 1
    default_threads = max(1, _usable_cores() // local) if local > 1 else 0
    intra = args.intra_op_threads if args.intra_op_threads is not None else default_threads
    inter = args.inter_op_threads if args.inter_op_threads is not None else default_threads
    if strategy == "parameter_server" and inter == 1:
        if args.inter_op_threads is not None:
            raise UsageError(
                "--inter-op-threads 1 deadlocks ParameterServerStrategy (a ps/worker server with one inter-op "
                "thread never finishes the first step the chief schedules; measured on TF 2.21): use 0 or >= 2"
            )
        inter = PSS_MIN_INTER_OP_THREADS
    return Plan(meta, replica, num_workers, is_chief, strategy, role, spec, train_examples, steps, intra, inter)


def _wait_for_servers(cluster: dict[str, list[str]], timeout_s: float) -> float:
    """Block until every ps and worker of ``cluster`` accepts TCP connections; returns the seconds waited.

    The coordinator of ``ParameterServerStrategy`` creates its variables on the ps as soon as it starts; a ps
    still importing TensorFlow (or a pod still being scheduled) would fail that with ``UnavailableError``.

    Raises:
        RuntimeError: some address did not answer within ``timeout_s``; the message names them.
    """
    t0 = time.monotonic()
    pending = list(cluster.get("ps", [])) + list(cluster.get("worker", []))
    while pending:
        for addr in list(pending):
            host, port = addr.rsplit(":", 1)
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
                pending.remove(addr)
            except OSError:
                pass
        if pending:
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(
                    f"ps/worker replicas {pending} did not accept connections within {timeout_s:.0f}s: check "
                    "that they are running and that their Services resolve (kubectl get pods,svc)"
                )
            time.sleep(0.2)
    return time.monotonic() - t0


def _progress_callback(tf_keras, label: str, epochs: int, steps: int, global_batch: int, times: list[float]):
    class Progress(tf_keras.callbacks.Callback):
        """One line per epoch on stdout: loss, accuracy, examples/sec (all workers), seconds."""

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            dt = time.perf_counter() - self._t0
            times.append(dt)
            logs = logs or {}
            print(f"epoch {epoch + 1}/{epochs}: loss={logs.get('loss', float('nan')):.4f} "
                  f"accuracy={logs.get('accuracy', float('nan')):.4f} "
                  f"examples/sec={steps * global_batch / dt:.0f} time={dt:.1f}s", flush=True)

    return Progress()


def _write_scalars(tf, writer, values: dict[str, float], step: int) -> None:
    """Write ``values`` as TensorBoard scalars at ``step`` and flush.

    ``tf_keras.callbacks.TensorBoard`` (and ``SidecarEvaluator``'s summaries) need the ``tensorboard`` package
    for ``tf.summary.scalar``, which TensorFlow 2.21 no longer installs; this writes the same event records
    with TF's own ``tf.summary.write`` and the ``scalars`` plugin metadata, so TensorBoard shows them unchanged.
    """
    from tensorflow.core.framework import summary_pb2

    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    with writer.as_default():
        for tag, value in values.items():
            tf.summary.write(tag, tf.constant(value, tf.float32), step=step, metadata=meta)
    writer.flush()


def _epoch_scalars_callback(tf, tf_keras, log_dir: str, steps: int, global_batch: int):
    """TensorBoard scalars per epoch (``epoch_loss``, ``epoch_accuracy``, ``epoch_examples_per_sec``) in
    ``<log_dir>/train``, at step ``epoch`` (0-based), written by :func:`_write_scalars`."""

    class EpochScalars(tf_keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self._writer = tf.summary.create_file_writer(os.path.join(log_dir, "train"))

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            values = {f"epoch_{k}": float(v) for k, v in (logs or {}).items()}
            values["epoch_examples_per_sec"] = steps * global_batch / (time.perf_counter() - self._t0)
            _write_scalars(tf, self._writer, values, epoch)

        def on_train_end(self, logs=None):
            self._writer.close()

    return EpochScalars()


def _set_threads(tf, plan: Plan) -> None:
    if plan.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(plan.intra_op_threads)
    if plan.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(plan.inter_op_threads)


def train(args: argparse.Namespace, plan: Plan) -> TrainingSummary | None:
    """Run training under the planned strategy and save; returns the summary on the chief, else None.

    Raises:
        UsageError: the batch does not divide among the replicas in sync.
        RuntimeError: (ParameterServerStrategy) a ps/worker did not come up within :data:`SERVER_WAIT_S`.
    """
    import tensorflow as tf

    _set_threads(tf, plan)
    import tf_keras

    from trainer.data import make_dataset
    from trainer.model import build_model

    label = plan.replica.label if plan.replica else "local"
    if args.seed is not None:
        tf_keras.utils.set_random_seed(args.seed)
    if plan.strategy == "parameter_server":
        waited = _wait_for_servers(plan.cluster, SERVER_WAIT_S)
        print(f"replica={label}: every ps/worker accepts connections (waited {waited:.1f}s)", flush=True)
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver(rpc_layer="grpc")
        strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    elif plan.strategy == "multi_worker_mirrored":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    if args.batch_size % replicas:
        raise UsageError(f"--batch-size {args.batch_size} must be divisible by the {replicas} replicas in sync")

    print(f"replica={label} strategy={plan.strategy} workers={plan.num_workers} replicas_in_sync={replicas} "
          f"global_batch={args.batch_size} per_replica_batch={args.batch_size // replicas} "
          f"train_examples={plan.train_examples} steps_per_epoch={plan.steps_per_epoch} epochs={args.epochs} "
          f"threads(intra,inter)=({plan.intra_op_threads},{plan.inter_op_threads})", flush=True)

    if plan.strategy == "parameter_server":
        # Each worker builds its own pipeline (no auto-sharding under ParameterServerStrategy): its share of
        # the files, shuffled and repeated; a step takes one per-replica batch from the worker running it.
        def dataset_fn(input_context):
            return make_dataset(
                args.data_dir, TRAIN_SPLIT, batch_size=input_context.get_per_replica_batch_size(args.batch_size),
                shuffle=True, repeat=True, max_examples=plan.train_examples, seed=args.seed,
                metadata=plan.metadata,
                shard=(input_context.num_input_pipelines, input_context.input_pipeline_id))

        dataset = tf_keras.utils.experimental.DatasetCreator(dataset_fn)
    else:
        dataset = make_dataset(args.data_dir, TRAIN_SPLIT, batch_size=args.batch_size, shuffle=True, repeat=True,
                               num_workers=plan.num_workers, max_examples=plan.train_examples, seed=args.seed,
                               metadata=plan.metadata)
    with strategy.scope():
        model = build_model(plan.metadata, args.learning_rate,
                            decay_steps=args.epochs * plan.steps_per_epoch)

    epoch_times: list[float] = []
    callbacks = [
        tf_keras.callbacks.BackupAndRestore(backup_dir=os.path.join(args.model_dir, BACKUP_DIR)),
        # weights after every epoch, for the evaluator (BackupAndRestore's backup is deleted after training)
        tf_keras.callbacks.ModelCheckpoint(os.path.join(args.model_dir, CHECKPOINT_DIR, CHECKPOINT_PATTERN),
                                           save_weights_only=True),
        _progress_callback(tf_keras, label, args.epochs, plan.steps_per_epoch, args.batch_size, epoch_times),
    ]
    if plan.is_chief:  # one writer per log directory; the others' logs would be duplicates
        callbacks.append(_epoch_scalars_callback(tf, tf_keras, os.path.join(args.model_dir, LOGS_DIR),
                                                 plan.steps_per_epoch, args.batch_size))
    t0 = time.perf_counter()
    history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=plan.steps_per_epoch,
                        callbacks=callbacks, verbose=0)
    fit_s = time.perf_counter() - t0

    if plan.is_chief:
        model.save(os.path.join(args.model_dir, SAVED_MODEL_DIR), save_format="tf")
    else:  # must save too (collective ops); into a throw-away directory
        tmp = tempfile.mkdtemp(prefix=f"tfk8s-{label}-saved-model-")
        try:
            model.save(tmp, save_format="tf")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if not plan.is_chief:
        return None

    hist = history.history
    epochs_run = len(epoch_times)
    return TrainingSummary(
        epochs=args.epochs,
        global_batch_size=args.batch_size,
        num_replicas_in_sync=replicas,
        num_workers=plan.num_workers,
        strategy=plan.strategy,
        final_loss=float(hist["loss"][-1]) if hist.get("loss") else float("nan"),
        final_accuracy=float(hist["accuracy"][-1]) if hist.get("accuracy") else float("nan"),
        examples_per_sec=epochs_run * plan.steps_per_epoch * args.batch_size / fit_s if fit_s > 0 else 0.0,
        wall_time_s=time.perf_counter() - _START,
        train_examples=plan.train_examples,
        steps_per_epoch=plan.steps_per_epoch,
        epoch_times_s=[round(t, 3) for t in epoch_times],
    )


def serve(plan: Plan) -> None:
    """Run this ps/worker's ``tf.distribute.Server`` (grpc) for the coordinator; never returns.

    SIGTERM (the launcher stopping the replica) ends the process with the default action.
    """
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver(rpc_layer="grpc")
    # The remote ops this server runs for the coordinator use the server's own thread pools.
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=plan.intra_op_threads,
                                      inter_op_parallelism_threads=plan.inter_op_threads)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", config=config, start=True)
    print(f"replica={plan.replica.label if plan.replica else '?'} strategy=parameter_server: serving "
          f"{server.target} for the chief; runs until stopped", flush=True)
    server.join()


class _Stopped(BaseException):
    """SIGTERM reached the evaluator (a BaseException, so no ``except Exception`` on the way swallows it)."""


def _raise_stopped(signum, frame):
    raise _Stopped()


def _checkpoint_number(path: str) -> int:
    """The epoch in a ModelCheckpoint path ``.../ckpt-<epoch>`` (-1 if the name has no number)."""
    tail = os.path.basename(path).rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def evaluate_checkpoints(args: argparse.Namespace, plan: Plan) -> int:
    """The evaluator replica: evaluate every new checkpoint in ``M/checkpoints`` on the test split until
    SIGTERM; returns the number of evaluations.

    The newest checkpoint is evaluated each time (one written during an evaluation may be skipped, as with
    ``tf_keras.utils.SidecarEvaluator``, whose loop this is; that class is not used because its summaries need
    the ``tensorboard`` package and it does not say which checkpoint it evaluated). Per evaluation: a line
    ``evaluator: checkpoint N: loss=L accuracy=A examples=E time=Ts`` on stdout (N: the epoch after which the
    chief saved it) and ``epoch_loss``/``epoch_accuracy`` scalars in ``M/logs/eval`` at step ``N - 1``, the
    step of the same epoch's training scalars in ``M/logs/train``.
    """
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    evaluations = 0
    writer = None
    try:
        import tensorflow as tf

        _set_threads(tf, plan)
        from trainer.data import make_dataset
        from trainer.model import build_model

        model = build_model(plan.metadata, args.learning_rate)
        test = make_dataset(args.data_dir, EVAL_SPLIT, batch_size=args.batch_size, shuffle=False, repeat=False,
                            num_workers=1, metadata=plan.metadata)
        examples = plan.metadata.splits[EVAL_SPLIT].num_examples
        ckpt_dir = os.path.join(args.model_dir, CHECKPOINT_DIR)
        print(f"evaluator: watching {ckpt_dir} for checkpoints; evaluating the {EVAL_SPLIT!r} split "
              f"({examples} examples) until stopped", flush=True)
        last = unreadable = None
        while True:
            path = tf.train.latest_checkpoint(ckpt_dir)
            if path and path != last:
                t0 = time.perf_counter()
                try:
                    model.load_weights(path).expect_partial()
                except (tf.errors.OpError, ValueError) as e:  # the chief may still be writing it
                    if path != unreadable:  # say it once per checkpoint, then keep trying quietly
                        print(f"evaluator: could not read {path} ({type(e).__name__}: {str(e)[:200]}); "
                              "retrying", flush=True)
                        unreadable = path
                    time.sleep(EVAL_POLL_S)
                    continue
                results = model.evaluate(test, verbose=0, return_dict=True)
                last = path
                evaluations += 1
                number = _checkpoint_number(path)
                loss, accuracy = float(results["loss"]), float(results["accuracy"])
                print(f"evaluator: checkpoint {number}: loss={loss:.4f} accuracy={accuracy:.4f} "
                      f"examples={examples} time={time.perf_counter() - t0:.1f}s", flush=True)
                if writer is None:
                    writer = tf.summary.create_file_writer(os.path.join(args.model_dir, LOGS_DIR, EVAL_LOGS_DIR))
                _write_scalars(tf, writer, {"epoch_loss": loss, "epoch_accuracy": accuracy}, max(0, number - 1))
            time.sleep(EVAL_POLL_S)
    except _Stopped:
        print(f"evaluator: stopped by SIGTERM after {evaluations} evaluation(s)", flush=True)
        return evaluations
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not interrupt the cleanup
        if writer is not None:
            writer.close()
        signal.signal(signal.SIGTERM, previous)


def write_summary(model_dir: str, summary: TrainingSummary) -> str:
    """Write ``<model_dir>/training_summary.json`` atomically; returns its path."""
    import tensorflow as tf

    path = os.path.join(model_dir, SUMMARY_FILE)
    tmp = path + ".tmp"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(json.dumps(asdict(summary), indent=2) + "\n")
    tf.io.gfile.rename(tmp, path, overwrite=True)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (0, or 2 for usage errors; other errors raise).

    A ps/worker under ``ParameterServerStrategy`` never returns (it serves until stopped); the evaluator
    returns 0 once SIGTERM stops it.
    """
    args = build_parser().parse_args(argv)
    try:
        plan = make_plan(args, os.environ.get("TF_CONFIG"))
        if plan.role == ROLE_SERVE:
            serve(plan)
            return 0
        if plan.role == ROLE_EVALUATE:
            evaluate_checkpoints(args, plan)
            return 0
        summary = train(args, plan)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    if summary is not None:
        path = write_summary(args.model_dir, summary)
        print(f"wrote {path}: final_loss={summary.final_loss:.4f} final_accuracy={summary.final_accuracy:.4f} "
              f"examples/sec={summary.examples_per_sec:.0f} wall_time={summary.wall_time_s:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
