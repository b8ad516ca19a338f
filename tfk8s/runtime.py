"""An optional helper for training programs run by tfk8s: plain TensorFlow + tf-keras, no KFP, no Kubernetes.

A program needs nothing of tfk8s: the contract is TF_CONFIG plus a few environment variables
(docs/training-program.md). This module reads them so that a program is short::

    import os; os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")   # tf-keras: keras-team/keras#20585
    from tfk8s import runtime

    strategy = runtime.strategy()                        # from TF_CONFIG; a ps/PSS worker serves here
    train = runtime.dataset("train", batch_size=512)     # the prepared shards, auto-sharded per worker
    train = runtime.distribute(train, strategy)          # one iterator: fit returns at once (optional)
    with strategy.scope():
        model = build_and_compile_model(runtime.metadata())
    model.fit(train, epochs=2, steps_per_epoch=118, callbacks=runtime.callbacks(batch_size=512))
    runtime.save(model)                                  # every MWMS worker saves (tensorflow#38635)
    runtime.report({"accuracy": ..., "loss": ...})       # the coordinator's metrics file
    runtime.finish(0)                                    # exit now, without the teardown (optional)

What reads which variable (defaults when a program runs alone, outside tfk8s):

- :func:`context`: TF_CONFIG (none: one process, the coordinator), ``TFK8S_JOB_NAME``;
- :func:`dataset`, :func:`metadata`: ``TFK8S_DATA_DIR`` (required);
- :func:`save`: ``TFK8S_MODEL_DIR`` (``./tfk8s-output/saved_model``; a non-coordinator
  ``./tfk8s-output/scratch/<type>-<index>/saved_model``);
- :func:`callbacks`: ``TFK8S_CHECKPOINT_DIR`` (``./tfk8s-output/checkpoints``), ``TFK8S_TENSORBOARD_DIR``
  (``./tfk8s-output/logs``), ``TFK8S_PROGRESS_FILE`` (none: no progress file);
- :func:`report`: ``TFK8S_METRICS_FILE`` (none: the metrics are only printed).

Importing this module does not import TensorFlow; the functions do.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from tfk8s import contract
from tfk8s.cluster import parse_tf_config
from tfk8s.progress import ProgressReporter

if TYPE_CHECKING:
    import tensorflow as tf
    import tf_keras

    from tfk8s.dataset import DatasetMetadata

# The contract's environment variables (tfk8s.contract; docs/training-program.md).
JOB_NAME_ENV = contract.ENV_JOB_NAME
DATA_DIR_ENV = contract.ENV_DATA_DIR
MODEL_DIR_ENV = contract.ENV_MODEL_DIR
CHECKPOINT_DIR_ENV = contract.ENV_CHECKPOINT_DIR
TENSORBOARD_DIR_ENV = contract.ENV_TENSORBOARD_DIR
PROGRESS_FILE_ENV = contract.ENV_PROGRESS_FILE
METRICS_FILE_ENV = contract.ENV_METRICS_FILE

DEFAULT_OUTPUT_DIR = "tfk8s-output"  # under the working directory, for a program run outside tfk8s
DEFAULT_PEER_TIMEOUT_S = 300.0  # how long strategy() waits for the peers' ports before giving up
PEER_MESSAGE_INTERVAL_S = 5.0  # how often strategy() says which peers it still waits for
BACKUP_SUBDIR = "backup"  # BackupAndRestore's folder under the checkpoint dir
CHECKPOINT_PATTERN = "ckpt-{epoch}"  # per-epoch weights in the checkpoint dir: ckpt-1 after the first epoch
PSS_MIN_INTER_OP_THREADS = 2  # a ps/worker server with one inter-op thread deadlocks on the first step (TF 2.21)
COMMUNICATIONS = ("AUTO", "RING", "NCCL")


class PeerTimeoutError(RuntimeError):
    """Peers did not accept connections within the bound; the message names them and what to check."""


@dataclass(frozen=True)
class Context:
    """This replica as the contract describes it (see :func:`context`).

    Attributes:
        replica_type: ``chief``, ``worker``, ``ps`` or ``evaluator`` (``chief`` for a process without TF_CONFIG).
        replica_index: 0-based index within the type.
        cluster: the cluster spec from TF_CONFIG (``{}`` for one process).
        job_name, data_dir, model_dir, checkpoint_dir, tensorboard_dir, progress_file, metrics_file: from the
            contract's variables (``data_dir``/``progress_file``/``metrics_file`` None when unset).
    """

    replica_type: str
    replica_index: int
    cluster: dict[str, list[str]] = field(default_factory=dict)
    job_name: str = "local"
    data_dir: str | None = None
    model_dir: str = ""
    checkpoint_dir: str = ""
    tensorboard_dir: str = ""
    progress_file: str | None = None
    metrics_file: str | None = None

    @property
    def label(self) -> str:
        """``<type>-<index>``, e.g. ``worker-1`` (the launchers' log prefix)."""
        return f"{self.replica_type}-{self.replica_index}"

    @property
    def num_workers(self) -> int:
        """Training processes that read data: chief + workers (1 for one process)."""
        return max(1, len(self.cluster.get("chief", [])) + len(self.cluster.get("worker", [])))

    @property
    def strategy_kind(self) -> str:
        """``parameter_server`` (the cluster has ps), ``multi_worker_mirrored`` (several chief/workers) or
        ``default`` (one process)."""
        if self.cluster.get("ps"):
            return "parameter_server"
        return "multi_worker_mirrored" if self.num_workers > 1 else "default"

    @property
    def is_coordinator(self) -> bool:
        """The replica whose outputs count: chief-0, else worker-0, else the single process; never the
        evaluator."""
        if self.replica_type == "evaluator":
            return False
        if not self.cluster:
            return True
        first = "chief" if self.cluster.get("chief") else "worker"
        return (self.replica_type, self.replica_index) == (first, 0)


def context(environ: Mapping[str, str] | None = None) -> Context:
    """This replica's :class:`Context`, from TF_CONFIG and the ``TFK8S_*`` variables of ``environ``
    (default ``os.environ``), with the module docstring's defaults for what is unset.

    Raises:
        tfk8s.cluster.ClusterConfigError: TF_CONFIG is set but not valid.
    """
    env = os.environ if environ is None else environ
    cluster, replica = parse_tf_config(env.get("TF_CONFIG"))
    rtype, index = (replica.replica_type.value, replica.index) if replica else ("chief", 0)
    ctx = Context(rtype, index, cluster, job_name=env.get(JOB_NAME_ENV) or "local",
                  data_dir=env.get(DATA_DIR_ENV) or None,
                  progress_file=env.get(PROGRESS_FILE_ENV) or None, metrics_file=env.get(METRICS_FILE_ENV) or None)
    out = Path(DEFAULT_OUTPUT_DIR).absolute()
    own_model = out / "saved_model" if ctx.is_coordinator else out / "scratch" / ctx.label / "saved_model"
    return replace(ctx, model_dir=env.get(MODEL_DIR_ENV) or str(own_model),
                   checkpoint_dir=env.get(CHECKPOINT_DIR_ENV) or str(out / "checkpoints"),
                   tensorboard_dir=env.get(TENSORBOARD_DIR_ENV) or str(out / "logs"))


_STATE: dict[str, Any] = {"strategy": None, "diverged": False, "reporter": None, "resumed_from": 0,
                          "epoch_times": []}


def _reporter(ctx: Context) -> ProgressReporter:
    if _STATE["reporter"] is None or _STATE["reporter"].replica != ctx.label:
        _STATE["reporter"] = ProgressReporter(ctx.progress_file, ctx.label)
    return _STATE["reporter"]


def diverged() -> bool:
    """Whether :func:`callbacks`' NaN check stopped a training of this process (loss NaN or inf)."""
    return bool(_STATE["diverged"])


def progress(state: str = "running", *, force: bool = False, **fields) -> bool:
    """Report this replica's progress to ``TFK8S_PROGRESS_FILE`` from a custom training loop (at most every 2 s
    unless ``force`` or the state changes; :func:`callbacks` does it for ``fit``). ``fields``: ``epoch``
    (1-based), ``epochs``, ``step`` (global steps done), ``steps`` (planned), ``examples_per_sec``, ``loss``
    (:mod:`tfk8s.progress`). Returns whether the file was written; a no-op outside tfk8s."""
    return _reporter(context()).update(state, force=force, **fields)


def resumed_from_epoch() -> int:
    """The epochs already done when :func:`callbacks`' BackupAndRestore resumed this process (0: fresh)."""
    return int(_STATE["resumed_from"])


def epoch_times() -> list[float]:
    """Seconds of each epoch this process ran (measured by :func:`callbacks`' progress callback)."""
    return list(_STATE["epoch_times"])


# --- strategy -------------------------------------------------------------------------------------------------

def default_threads(ctx: Context) -> tuple[int, int]:
    """``(intra-op, inter-op)`` threads for this process: 0 (TensorFlow's default: every core) unless the whole
    cluster runs on this host (every address on 127.0.0.1/localhost, the local backend), then the usable cores
    divided among its processes; inter-op at least :data:`PSS_MIN_INTER_OP_THREADS` under
    ParameterServerStrategy (one thread deadlocks a ps/worker server)."""
    addrs = [a for kind in ("chief", "worker", "ps") for a in ctx.cluster.get(kind, [])]
    hosts = {a.rsplit(":", 1)[0] for a in addrs}
    threads = 0
    if len(addrs) > 1 and hosts <= {"127.0.0.1", "localhost"}:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            cores = os.cpu_count() or 1
        threads = max(1, cores // len(addrs))
    inter = threads
    if ctx.strategy_kind == "parameter_server" and inter == 1:
        inter = PSS_MIN_INTER_OP_THREADS
    return threads, inter


def _peers(ctx: Context, kinds: tuple[str, ...]) -> dict[str, str]:
    return {f"{kind}-{i}": addr for kind in kinds for i, addr in enumerate(ctx.cluster.get(kind, []))
            if (kind, i) != (ctx.replica_type, ctx.replica_index)}


def wait_for_peers(peers: Mapping[str, str], timeout_s: float = DEFAULT_PEER_TIMEOUT_S, *,
                   listen_port: int | None = None, interval_s: float = PEER_MESSAGE_INTERVAL_S,
                   reporter: ProgressReporter | None = None) -> float:
    """Wait until every peer (label -> ``host:port``) accepts TCP connections; returns the seconds waited.

    Every ``interval_s`` seconds it prints which peers it still waits for (and refreshes ``reporter``'s
    ``starting`` heartbeat). With ``listen_port`` it listens on that port meanwhile (without accepting), so that
    peers doing the same see this replica: MultiWorkerMirroredStrategy's constructor blocks, holding the GIL,
    until every worker has joined, so the waiting must happen before it, when no TensorFlow server listens yet.

    Raises:
        PeerTimeoutError: some peer did not answer within ``timeout_s`` seconds (the message names it).
    """
    listener = None
    if listen_port is not None:
        try:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("", listen_port))
            listener.listen(64)
        except OSError as e:  # e.g. already bound: peers will see the real server instead
            print(f"tfk8s.runtime: cannot listen on port {listen_port} while waiting for peers ({e})", flush=True)
            listener.close()
            listener = None
    t0 = time.monotonic()
    next_message = t0 + interval_s
    pending = dict(peers)
    try:
        while pending:
            for label, addr in list(pending.items()):
                host, port = addr.rsplit(":", 1)
                try:
                    socket.create_connection((host, int(port)), timeout=1).close()
                    del pending[label]
                except OSError:
                    pass
            now = time.monotonic()
            if not pending:
                break
            waited = now - t0
            if waited > timeout_s:
                names = ", ".join(f"{k} at {v}" for k, v in pending.items())
                raise PeerTimeoutError(
                    f"gave up after {timeout_s:.0f}s waiting for {names}: never accepted connections. Check that "
                    "the replica runs (its log; on Kubernetes `kubectl get pods`) and that its address resolves; "
                    "raise the bound with runtime.strategy(peer_timeout_s=...) (trainer: --peer-timeout-s)")
            if now >= next_message:
                print(f"waiting for peers: {', '.join(f'{k} ({v})' for k, v in pending.items())} "
                      f"({waited:.0f}s of at most {timeout_s:.0f}s)", flush=True)
                if reporter is not None:
                    reporter.update("starting", force=True)
                next_message = now + interval_s
            time.sleep(0.5)
    finally:
        if listener is not None:
            listener.close()
    return time.monotonic() - t0


def strategy(*, communication: str = "AUTO", bytes_per_pack: int = 0, collective_timeout_s: float | None = None,
             peer_timeout_s: float = DEFAULT_PEER_TIMEOUT_S, intra_op_threads: int | None = None,
             inter_op_threads: int | None = None, variable_partitioner=None) -> tf.distribute.Strategy:
    """The ``tf.distribute`` strategy TF_CONFIG calls for (created once per process, then returned again).

    - no TF_CONFIG, one chief/worker, or the evaluator: the default strategy;
    - several chief/workers and no ps: ``MultiWorkerMirroredStrategy`` with
      ``CommunicationOptions(implementation=communication, bytes_per_pack=..., timeout_seconds=...)``, after
      waiting for every other chief/worker (:func:`wait_for_peers`);
    - with ps: ``ParameterServerStrategy`` (``TFConfigClusterResolver``, ``variable_partitioner``) on the
      chief, after waiting for every ps and worker; a ps or worker instead runs its server (:func:`serve`)
      and never returns, as in TensorFlow's tutorial.

    Args:
        communication: all-reduce implementation, ``AUTO``, ``RING`` (gRPC) or ``NCCL`` (GPUs).
        bytes_per_pack: gradients are packed into all-reduces of about this many bytes (0: TF's default, one
            pack); fewer, larger all-reduces cost less per step on CPU.
        collective_timeout_s: a collective that takes longer fails (None: no limit).
        peer_timeout_s: how long to wait for the peers (default :data:`DEFAULT_PEER_TIMEOUT_S`).
        intra_op_threads / inter_op_threads: TensorFlow thread pools; None: :func:`default_threads`.

    Raises:
        ValueError: unknown ``communication``; PeerTimeoutError: a peer never came up.
    """
    import tensorflow as tf

    if _STATE["strategy"] is not None:
        return _STATE["strategy"]
    if communication.upper() not in COMMUNICATIONS:
        raise ValueError(f"communication must be one of {COMMUNICATIONS}, got {communication!r}")
    ctx = context()
    auto_intra, auto_inter = default_threads(ctx)
    intra = auto_intra if intra_op_threads is None else intra_op_threads
    inter = auto_inter if inter_op_threads is None else inter_op_threads
    kind = ctx.strategy_kind if ctx.replica_type != "evaluator" else "default"
    if kind == "parameter_server" and ctx.replica_type in ("ps", "worker"):
        serve(intra_op_threads=intra, inter_op_threads=inter)
    try:
        if intra:
            tf.config.threading.set_intra_op_parallelism_threads(intra)
        if inter:
            tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError as e:  # TensorFlow already initialised by the program
        print(f"tfk8s.runtime: thread settings not applied ({e})", flush=True)
    reporter = _reporter(ctx)
    reporter.update("starting", force=True)
    if kind == "parameter_server":
        waited = wait_for_peers(_peers(ctx, ("ps", "worker")), peer_timeout_s, reporter=reporter)
        print(f"{ctx.label}: every ps/worker accepts connections (waited {waited:.1f}s)", flush=True)
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver(rpc_layer="grpc")
        result = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=variable_partitioner)
    elif kind == "multi_worker_mirrored":
        own = ctx.cluster[ctx.replica_type][ctx.replica_index]
        waited = wait_for_peers(_peers(ctx, ("chief", "worker")), peer_timeout_s,
                                listen_port=int(own.rsplit(":", 1)[1]), reporter=reporter)
        print(f"{ctx.label}: every chief/worker is up (waited {waited:.1f}s)", flush=True)
        impl = tf.distribute.experimental.CommunicationImplementation[communication.upper()]
        options = tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=bytes_per_pack, timeout_seconds=collective_timeout_s, implementation=impl)
        result = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    else:
        result = tf.distribute.get_strategy()
    _STATE["strategy"] = result
    return result


def serve(*, intra_op_threads: int = 0, inter_op_threads: int = 0) -> NoReturn:
    """Run this ps/worker's ``tf.distribute.Server`` (grpc) for the ParameterServerStrategy coordinator.

    Never returns: the launcher stops ps and workers once the chief has succeeded (TFJob semantics). The
    remote ops run on the server's own thread pools (``inter_op_threads`` 1 is raised to 2: it deadlocks).
    """
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver(rpc_layer="grpc")
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra_op_threads,
                                      inter_op_parallelism_threads=max(inter_op_threads, PSS_MIN_INTER_OP_THREADS)
                                      if inter_op_threads else 0)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", config=config, start=True)
    print(f"{resolver.task_type}-{resolver.task_id}: serving {server.target} for the chief "
          "(ParameterServerStrategy); runs until stopped", flush=True)
    server.join()
    raise SystemExit(0)  # pragma: no cover - join() does not return


# --- data -----------------------------------------------------------------------------------------------------

def _data_dir(data_dir: str | None) -> str:
    found = data_dir or context().data_dir
    if not found:
        raise ValueError(f"no data: ${DATA_DIR_ENV} is not set. tfk8s sets it to the prepared data (shards + "
                         "metadata.json); outside tfk8s, set it to a folder written by `python -m "
                         "components.prepare_dataset` or pass data_dir=")
    return found


def metadata(data_dir: str | None = None) -> DatasetMetadata:
    """The prepared data's ``metadata.json`` (image shape, classes, label names, examples per split).

    Raises:
        ValueError: no data dir (``TFK8S_DATA_DIR`` unset) or a bad metadata file; FileNotFoundError: none.
    """
    from tfk8s.dataset import load_metadata

    return load_metadata(_data_dir(data_dir))


def dataset(split: str = "train", *, batch_size: int, shuffle: bool | None = None, repeat: bool | None = None,
            max_examples: int | None = None, seed: int | None = None, input_context=None,
            data_dir: str | None = None, in_memory: bool | None = None) -> tf.data.Dataset:
    """The prepared shards of ``split`` as batches of ``(images uint8 [B, H, W, C], labels int64 [B])``.

    Args:
        batch_size: the GLOBAL batch (all replicas together): under MultiWorkerMirroredStrategy ``fit``
            splits each batch among the replicas, and each worker reads only its part of the data: the
            auto-shard policy is ``FILE`` when there are at least as many shard files as workers, else ``DATA``.
        shuffle / repeat: default True for ``train``, False otherwise (then the last batch may be smaller).
        max_examples: only the first N examples of the split. seed: shuffle seed.
        input_context: a ``tf.distribute.InputContext`` (``ParameterServerStrategy``'s per-worker datasets,
            ``distribute_datasets_from_function``): this input pipeline's own shards, batches of
            ``input_context.get_per_replica_batch_size(batch_size)``, auto-sharding off.
        data_dir: overrides ``TFK8S_DATA_DIR``.
        in_memory: decode this worker's examples once and serve shuffled batches from memory (auto-sharding
            then off: the worker keeps its own part, as ``FILE``/``DATA`` would give it); None: for a training
            split (shuffled, repeated) of at most 256 MiB of images (``tfk8s.shards.make_dataset``).

    Raises:
        ValueError / FileNotFoundError / KeyError: no data dir, bad metadata, unknown split.
    """
    from tfk8s.shards import make_dataset

    is_train = split == "train"
    common = {"shuffle": is_train if shuffle is None else shuffle,
              "repeat": is_train if repeat is None else repeat, "max_examples": max_examples, "seed": seed,
              "in_memory": in_memory}
    path = _data_dir(data_dir)
    if input_context is not None:
        return make_dataset(path, split, batch_size=input_context.get_per_replica_batch_size(batch_size),
                            shard=(input_context.num_input_pipelines, input_context.input_pipeline_id), **common)
    return make_dataset(path, split, batch_size=batch_size, num_workers=context().num_workers, **common)


_KEPT: list = []  # the distributed datasets of distribute(), alive until the process ends


def distribute(data: tf.data.Dataset, strategy_: tf.distribute.Strategy | None = None):
    """``data`` made ready for ``model.fit`` under ``strategy_`` (default: the current one), with one iterator
    that lives until the process ends.

    Why: under ``MultiWorkerMirroredStrategy`` tf-keras' ``fit`` distributes the dataset itself and, when it
    returns, destroys that iterator; the destruction waits until tf.data's autotuning thread of the per-device
    buffer (``MultiDeviceIterator``) wakes up, and that thread's sleep doubles from 10 ms up to 60 s
    (``tensorflow::data::model::Model::kOptimizationPeriodMaxMs``, TF 2.21). So ``fit`` returned up to as long
    after its last step as training had lasted, at most 60 s, while every other worker waited in the first
    collective of ``save()``: 3.0 s after 8 s of training on 2 local workers (``bench/worker_scaling.py``,
    README's Benchmarks). The dataset returned here hands ``fit`` the same iterator every time, so nothing is
    destroyed when ``fit`` returns; end the program with :func:`finish`, which skips the interpreter's
    teardown, or the wait comes back at exit.

    Only an infinite (repeated) dataset is kept: a finite one needs a fresh iterator every epoch, so it is
    returned as ``strategy_.experimental_distribute_dataset`` gives it. Under any other strategy (one process,
    ``ParameterServerStrategy``) ``data`` is returned unchanged.

    Args:
        data: batches of the GLOBAL batch size, as ``fit`` takes them (e.g. :func:`dataset`).
    """
    import tensorflow as tf

    strategy_ = strategy_ or tf.distribute.get_strategy()
    if not isinstance(strategy_, tf.distribute.MultiWorkerMirroredStrategy):
        return data
    distributed = strategy_.experimental_distribute_dataset(data)
    if int(data.cardinality()) != int(tf.data.INFINITE_CARDINALITY):
        return distributed
    base = type(distributed)

    class _KeptIterator(base):  # the same object fit expects, whose __iter__ is created once
        def __iter__(self):
            if getattr(self, "_tfk8s_iterator", None) is None:
                self._tfk8s_iterator = base.__iter__(self)
            return self._tfk8s_iterator

    distributed.__class__ = _KeptIterator
    _KEPT.append(distributed)
    return distributed


def finish(code: int = 0) -> NoReturn:
    """End this process at once with exit status ``code``, after flushing stdout and stderr (``os._exit``).

    Call it last, after :func:`save` and :func:`report`: it skips the interpreter's and TensorFlow's teardown
    (about 1 s on 2 cores, plus the iterator wait :func:`distribute` avoids), so nothing runs after it, not even
    ``atexit`` handlers; files the program wrote and closed are complete.
    """
    import logging
    import sys

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or a broken pipe: nothing more can be said there
            pass
    os._exit(code)


# --- callbacks ------------------------------------------------------------------------------------------------

def write_scalars(writer: tf.summary.SummaryWriter, values: Mapping[str, float], step: int) -> None:
    """Write ``values`` as TensorBoard scalars at ``step`` and flush.

    ``tf.summary.scalar`` and Keras' TensorBoard callback need the ``tensorboard`` package, which TensorFlow
    2.21 no longer installs; this writes the same event records with ``tf.summary.write`` and the ``scalars``
    plugin metadata, so TensorBoard shows them unchanged.
    """
    import tensorflow as tf
    from tensorflow.core.framework import summary_pb2

    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    with writer.as_default():
        for tag, value in values.items():
            tf.summary.write(tag, tf.constant(float(value), tf.float32), step=step, metadata=meta)
    writer.flush()


def _as_float(value) -> float | None:
    """A log value as a float, None if it is missing or not ready locally (a PSS RemoteValue: never fetched)."""
    if value is None or hasattr(value, "fetch"):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _logs(logs, fetch: bool) -> Mapping:
    """Keras' logs as a mapping: under ParameterServerStrategy they are a RemoteValue, fetched only where the
    step is over anyway (epoch end), never per batch (that would wait for each scheduled step)."""
    if hasattr(logs, "fetch"):
        logs = logs.fetch() if fetch else None
    return logs if isinstance(logs, Mapping) else {}


def callbacks(*, batch_size: int | None = None, backup: bool = True, checkpoints: bool = True,
              tensorboard: bool = True, progress: bool = True, stop_on_nan: bool = True) -> list[tf_keras.callbacks.Callback]:
    """The standard tf-keras callbacks for ``model.fit`` (each can be left out):

    - ``backup``: ``BackupAndRestore`` in ``<checkpoint dir>/backup``: a restarted replica resumes after the
      last finished epoch and prints ``resumed from epoch k of N (backup in DIR)`` (k epochs were done);
    - ``checkpoints``: the weights after every epoch, ``<checkpoint dir>/ckpt-<epoch>`` (what an evaluator
      replica reads; kept after training);
    - ``tensorboard``: per-epoch scalars (``epoch_loss``, ``epoch_<metric>``, ``epoch_examples_per_sec``) in
      ``<tensorboard dir>/train``, coordinator only (:func:`write_scalars`);
    - ``progress``: ``TFK8S_PROGRESS_FILE`` at most every 2 s (epoch, global step, examples/sec, loss;
      ``done`` at the end) and one line per epoch on stdout (loss, metrics, examples/sec, seconds);
    - ``stop_on_nan``: stops training when the loss is NaN or inf and marks it diverged (:func:`diverged`,
      ``report()``'s ``diverged``). The batch loss is all-reduced, so every MWMS worker stops at the same step.

    Args:
        batch_size: the global batch, for examples/sec (omitted without it).
    """
    import tensorflow as tf
    import tf_keras

    ctx = context()
    backup_dir = os.path.join(ctx.checkpoint_dir, BACKUP_SUBDIR)
    reporter = _reporter(ctx)

    class Resume(tf_keras.callbacks.BackupAndRestore):
        def on_train_begin(self, logs=None):
            super().on_train_begin(logs)
            done = int(self._training_state._ckpt_saved_epoch.numpy()) + 1  # -1 when there is no backup
            _STATE["resumed_from"] = max(0, done)
            if done > 0:
                print(f"resumed from epoch {done} of {self.params.get('epochs')} (backup in {backup_dir})",
                      flush=True)

    class Progress(tf_keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True  # logs stay tensors: converted here only when needed
            self.step = 0

        def _update(self, state="running", force=False, **fields):
            if not progress:
                return False
            self._fields = {**getattr(self, "_fields", {}), **fields}
            p = self.params or {}
            steps = (p.get("steps") or 0) * (p.get("epochs") or 0)
            return reporter.update(state, force=force, epoch=self.epoch + 1, epochs=p.get("epochs"),
                                   step=self.step, steps=steps, **self._fields)

        def on_train_begin(self, logs=None):
            self.epoch, self._t, self._t_step = 0, time.perf_counter(), 0
            self._next_update = self._t + reporter.min_interval_s
            self._update(force=True)

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch, self._epoch_t0 = epoch, time.perf_counter()
            self.step = max(self.step, epoch * ((self.params or {}).get("steps") or 0))
            self._epoch_step0 = self.step
            self._t, self._t_step = self._epoch_t0, self.step
            # a rate over at least min_interval_s: one step (under PSS: merely scheduled) is not a throughput
            self._next_update = self._epoch_t0 + reporter.min_interval_s

        def _rate(self, steps, seconds):
            return round(steps * batch_size / seconds, 1) if batch_size and seconds > 0 else None

        def on_train_batch_end(self, batch, logs=None):
            self.step = self.epoch * ((self.params or {}).get("steps") or 0) + batch + 1
            if stop_on_nan:
                loss = _as_float(_logs(logs, False).get("loss"))
                if loss is not None and not math.isfinite(loss):
                    _STATE["diverged"] = True
                    self.model.stop_training = True
                    print(f"training diverged: loss {loss} at epoch {self.epoch + 1} step {self.step}; stopping "
                          "(reported as diverged=true)", flush=True)
            now = time.perf_counter()
            if progress and reporter.path is not None and now >= self._next_update:
                rate = self._rate(self.step - self._t_step, now - self._t)
                self._t, self._t_step, self._next_update = now, self.step, now + reporter.min_interval_s
                self._update(force=True, examples_per_sec=rate, loss=_as_float(_logs(logs, False).get("loss")))

        def on_epoch_end(self, epoch, logs=None):
            logs = {k: _as_float(v) for k, v in _logs(logs, True).items()}
            dt = time.perf_counter() - self._epoch_t0
            rate = self._rate(max(self.step - self._epoch_step0, 0) or (self.params or {}).get("steps") or 0, dt)
            loss = logs.get("loss")
            if stop_on_nan and loss is not None and not math.isfinite(loss) and not _STATE["diverged"]:
                _STATE["diverged"] = True  # PSS: the batch losses are not fetched, the epoch's is
                self.model.stop_training = True
                print(f"training diverged: loss {loss} after epoch {epoch + 1}; stopping (reported as "
                      "diverged=true)", flush=True)
            shown = " ".join(f"{k}={v:.4f}" for k, v in logs.items() if v is not None)
            _STATE["epoch_times"].append(dt)
            if not progress:
                return
            print(f"epoch {epoch + 1}/{self.params.get('epochs')}: {shown} examples/sec={rate or 0:.0f} "
                  f"time={dt:.1f}s", flush=True)
            self._update(force=True, examples_per_sec=rate, loss=loss)

        def on_train_end(self, logs=None):
            self._update("done", force=True)

    class EpochScalars(tf_keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self._writer = tf.summary.create_file_writer(os.path.join(ctx.tensorboard_dir, "train"))

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            values = {f"epoch_{k}": v for k, v in ((k, _as_float(v)) for k, v in _logs(logs, True).items())
                      if v is not None}
            steps = (self.params or {}).get("steps")
            if batch_size and steps:
                values["epoch_examples_per_sec"] = steps * batch_size / (time.perf_counter() - self._t0)
            write_scalars(self._writer, values, epoch)

        def on_train_end(self, logs=None):
            self._writer.close()

    out: list = []
    if backup:
        out.append(Resume(backup_dir=backup_dir))
    if checkpoints:  # tf-keras writes a non-chief MWMS worker's copy to a temporary folder and removes it
        out.append(tf_keras.callbacks.ModelCheckpoint(os.path.join(ctx.checkpoint_dir, CHECKPOINT_PATTERN),
                                                      save_weights_only=True))
    if tensorboard and ctx.is_coordinator:
        out.append(EpochScalars())
    if progress or stop_on_nan:
        out.append(Progress())
    return out


# --- outputs --------------------------------------------------------------------------------------------------

def save(model, model_dir: str | None = None, **kwargs) -> str:
    """Save ``model`` as a SavedModel in this replica's ``TFK8S_MODEL_DIR`` (or ``model_dir``); returns the path.

    Call it on every replica that trains: under MultiWorkerMirroredStrategy saving runs collective ops, so a
    coordinator saving alone would block (tensorflow#38635). A non-coordinator's copy goes to its own scratch
    folder and is removed at once. A tf-keras model is saved with ``model.save(path, save_format="tf")``,
    anything else with ``tf.saved_model.save(model, path, **kwargs)`` (e.g. ``signatures=``).
    """
    import tensorflow as tf

    ctx = context()
    path = model_dir or ctx.model_dir
    if hasattr(model, "save") and hasattr(model, "fit"):
        model.save(path, save_format="tf", **kwargs)
    else:
        tf.saved_model.save(model, path, **kwargs)
    if ctx.is_coordinator:
        print(f"saved the model to {path}", flush=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
    return path


def _json_value(key: str, value):
    """``value`` as JSON data: numpy/tensor values as Python numbers and lists (non-finite floats are kept:
    :func:`tfk8s.contract.write_metrics` writes them as the strings ``"NaN"``/``"Infinity"``)."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        value = value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _json_value(f"{key}.{k}", v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(key, v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"metric {key!r} is a {type(value).__name__}: report numbers, strings, booleans or lists")


def report(metrics: Mapping[str, Any]) -> dict | None:
    """Write ``metrics`` to ``TFK8S_METRICS_FILE`` on the coordinator and print them on one line; returns
    the metrics written (None on any other replica, which writes nothing).

    The file is one JSON object, written atomically by :func:`tfk8s.contract.write_metrics`, always valid
    JSON: NaN/inf become the strings ``"NaN"``/``"Infinity"``/``"-Infinity"`` (the launch step leaves them out
    of the training Metrics and says so in words); numpy and tensor values become numbers. ``diverged``
    (:func:`diverged`) is added unless given. The launch step turns the finite numbers into the run's
    training Metrics and puts everything in ``training_summary.json``.

    Raises:
        TypeError: a value that is not a number, string, boolean, None, list or dict (names the key).
    """
    ctx = context()
    data = {str(k): _json_value(str(k), v) for k, v in metrics.items()}
    data.setdefault("diverged", diverged())
    if not ctx.is_coordinator:
        return None
    print(f"metrics: {json.dumps(data, sort_keys=True)}", flush=True)
    if ctx.metrics_file:
        contract.write_metrics(ctx.metrics_file, data)
    return data
