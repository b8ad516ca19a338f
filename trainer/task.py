"""The built-in training program, one program among others: it uses only the contract (docs/training-program.md)
through :mod:`tfk8s.runtime`, like any user program may.

    python -m trainer.task [--epochs E] [--batch-size B] [--learning-rate LR] [--max-train-examples N]
                           [--steps-per-epoch N] [--seed S] [--intra-op-threads N] [--inter-op-threads N]
                           [--communication AUTO|RING|NCCL] [--bytes-per-pack N] [--steps-per-execution N]
                           [--peer-timeout-s S] [--callbacks backup,checkpoints,tensorboard,progress,stop_on_nan|none]
                           [--data-dir D] [--model-dir M] [--checkpoint-dir C] [--tensorboard-dir T]

The directories come from the contract's environment (``TFK8S_DATA_DIR``, ``TFK8S_MODEL_DIR``,
``TFK8S_CHECKPOINT_DIR``, ``TFK8S_TENSORBOARD_DIR``); the flags override them. ``B`` is the GLOBAL batch size
(examples per global step, all replicas together). Each replica finds its role in ``$TF_CONFIG``
(:func:`tfk8s.runtime.strategy`):

- no TF_CONFIG, or a cluster with a single chief/worker: the default strategy (one process) trains;
- several chief/worker replicas and no ``ps``: ``MultiWorkerMirroredStrategy`` (synchronous all-reduce,
  ``--communication``/``--bytes-per-pack``); every chief/worker trains on its own shards;
- a cluster with ``ps`` (it then has a chief and needs at least one worker): ``ParameterServerStrategy``
  (asynchronous updates). Each ``ps`` and ``worker`` serves a ``tf.distribute.Server`` until the launcher
  stops it; the ``chief`` coordinates: it waits until every ps/worker accepts connections, creates the
  variables on the ps and schedules each step (``B`` examples) on whichever worker is free, so an epoch is
  ``steps_per_epoch`` steps spread over the workers; every worker reads its own input pipeline
  (``runtime.dataset(input_context=...)``). Only the chief runs the callbacks and saves;
- the ``evaluator`` replica (not part of the cluster) trains nothing: it watches the checkpoint dir, evaluates
  every new ``ckpt-<epoch>`` on the test split, prints ``evaluator: checkpoint N: loss=... accuracy=...``,
  writes TensorBoard scalars to ``<tensorboard dir>/eval`` and its figures to its ``TFK8S_METRICS_FILE``
  (the launch step puts them in ``training_summary.json``, the report shows them), until it has evaluated the
  final checkpoint (``ckpt-<epochs>``), then exits 0; the launcher gives it ``evaluator_grace_s`` after the
  job's success for that, then stops it (SIGTERM). It works beside either strategy.

Training: ``steps_per_epoch = ceil(train_examples / B)`` unless ``--steps-per-epoch`` is given; the input
repeats, so every epoch is exactly that many global steps. Callbacks: :func:`tfk8s.runtime.callbacks`
(BackupAndRestore with the "resumed from epoch k of N" line, per-epoch checkpoints, TensorBoard scalars,
progress file and one line per epoch, stop on a NaN/inf loss).

Start-up: each trainer prints one line when its first step is done, ``startup: first step 5.5s after the
process started: python and imports 0.1s, arguments and plan 0.0s, tensorflow import 2.9s, strategy (the
peers' wait included) 0.5s, data 0.2s, model 0.2s, fit set-up and first step 1.6s`` (:mod:`trainer.startup`).

Outputs (:func:`tfk8s.runtime.save`, :func:`tfk8s.runtime.report`): every trainer saves the SavedModel to its
``TFK8S_MODEL_DIR`` (the coordinator's is the job's model; MultiWorkerMirroredStrategy needs every worker to
save, tensorflow#38635), and the coordinator writes ``TFK8S_METRICS_FILE``: ``accuracy`` and ``loss`` (last
epoch, training), ``examples_per_sec``, ``wall_time_s``, ``epochs``, ``epochs_run``, ``diverged``,
``resumed_from_epoch``, ``strategy``, ``num_workers``, ``num_replicas_in_sync``, ``global_batch_size``,
``train_examples``, ``steps_per_epoch``, ``epoch_times_s``.

A diverged training (loss NaN or inf) stops at that step, still saves and reports ``diverged: true`` with a
non-finite loss, and exits 0: the model exists, so the pipeline goes on and its gate says "not blessed:
training diverged".

Exit codes: 0 success, also after divergence (the evaluator: the final checkpoint evaluated, or stopped by
SIGTERM); 42 stopped by SIGTERM while training, after every trainer saved the backup at the same step (within
about a second: :class:`tfk8s.runtime.keras_callbacks.Resume`; a restart resumes at the next step; the
launcher's ``restart_exit_code``); 2 bad arguments, missing
data, unsupported cluster; 1 any other error (e.g. a peer that never came up: ``--peer-timeout-s``).
"""

from __future__ import annotations

import os

# Before TensorFlow is imported anywhere: Keras 3's fit breaks under multi-worker strategies
# (keras-team/keras#20585), so `tf.keras` must resolve to tf_keras (Keras 2). We use tf_keras directly too.
os.environ["TF_USE_LEGACY_KERAS"] = "1"

import argparse
import math
import signal
import sys
import time
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass

from tfk8s import runtime
from tfk8s.core.builtin_trainer import (  # the measured defaults, shared with the pipeline's parameters
    DEFAULT_BATCH_SIZE,
    DEFAULT_EPOCHS,
    DEFAULT_LEARNING_RATE,
    DEFAULT_STEPS_PER_EXECUTION,
)
from tfk8s.core.cluster import ClusterConfigError, ReplicaCounts, Strategy
from tfk8s.core.contract import write_metrics
from tfk8s.core.data_format import DatasetMetadata
from tfk8s.core.layout import TENSORBOARD_EVAL  # the evaluator's folder under the TensorBoard dir
from tfk8s.runtime.shards import load_metadata
from trainer.startup import StartupTimer

_START = time.perf_counter()


EXIT_USAGE = 2
TRAIN_SPLIT = "train"
EVAL_SPLIT = "test"

ROLE_TRAIN = "train"  # runs model.fit (every trainer; under ParameterServerStrategy the coordinator)
ROLE_SERVE = "serve"  # ps and workers under ParameterServerStrategy: a tf.distribute.Server, joined
ROLE_EVALUATE = "evaluate"  # the evaluator replica: evaluates the checkpoints until stopped
EVAL_POLL_S = 1.0  # the evaluator looks for a new checkpoint this often

# flag -> the contract's variable it overrides
_DIR_FLAGS = {"data_dir": runtime.DATA_DIR_ENV, "model_dir": runtime.MODEL_DIR_ENV,
              "checkpoint_dir": runtime.CHECKPOINT_DIR_ENV, "tensorboard_dir": runtime.TENSORBOARD_DIR_ENV}


# tfk8s.runtime.callbacks' keyword flags, each one callback (or check) the trainer can leave out
CALLBACKS = ("backup", "checkpoints", "tensorboard", "progress", "stop_on_nan")


def chosen_callbacks(args: argparse.Namespace) -> dict[str, bool]:
    """``--callbacks`` as :func:`tfk8s.runtime.callbacks`' keyword flags, e.g. ``{"backup": True, ...}``.

    Raises:
        UsageError: a name that is not one of :data:`CALLBACKS` (or ``none``).
    """
    names = {n.strip() for n in (args.callbacks or "").split(",") if n.strip()} - {"none"}
    unknown = sorted(names - set(CALLBACKS))
    if unknown:
        raise UsageError(f"--callbacks: unknown {', '.join(unknown)}; choose from {', '.join(CALLBACKS)} or none")
    return {name: name in names for name in CALLBACKS}


class UsageError(Exception):
    """Bad arguments, missing data or an unsupported cluster: reported on stderr, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface (argparse exits with code 2 on malformed arguments)."""
    p = argparse.ArgumentParser(prog="python -m trainer.task", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", help=f"prepared data (shards + metadata.json); default ${runtime.DATA_DIR_ENV}")
    p.add_argument("--model-dir", help=f"where this replica saves its SavedModel; default ${runtime.MODEL_DIR_ENV}")
    p.add_argument("--checkpoint-dir", help=f"backup/ and ckpt-<epoch>; default ${runtime.CHECKPOINT_DIR_ENV}")
    p.add_argument("--tensorboard-dir", help=f"train/ and eval/ event files; default ${runtime.TENSORBOARD_DIR_ENV}")
    p.add_argument("--train-dir", help="outside tfk8s: lay out every directory the contract has not set under this "
                                       "folder, as the launch step does (saved_model/, checkpoints/, logs/, "
                                       "progress/, metrics/, scratch/)")
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
    p.add_argument("--communication", default="AUTO", choices=runtime.COMMUNICATIONS,
                   help="MultiWorkerMirroredStrategy's all-reduce implementation")
    p.add_argument("--bytes-per-pack", type=int, default=0,
                   help="pack gradients into all-reduces of about this many bytes (0: TF's default)")
    p.add_argument("--steps-per-execution", type=int, default=DEFAULT_STEPS_PER_EXECUTION,
                   help="training steps per call of the compiled step function (fewer calls, less per-step "
                        "overhead; progress callbacks then run once per call); not under ParameterServerStrategy")
    p.add_argument("--callbacks", default=",".join(CALLBACKS),
                   help=f"comma-separated runtime callbacks to use, of {', '.join(CALLBACKS)}; 'none' for none "
                        "(bench/trainer_overhead.py measures each one's cost); default: all")
    p.add_argument("--peer-timeout-s", type=float, default=runtime.DEFAULT_PEER_TIMEOUT_S,
                   help="give up when a peer has not come up after this many seconds")
    return p


@dataclass(frozen=True)
class Plan:
    """What this process will do, decided before TensorFlow starts.

    ``role`` is :data:`ROLE_TRAIN`, :data:`ROLE_SERVE` or :data:`ROLE_EVALUATE`; ``ctx`` the replica's
    :class:`tfk8s.runtime.Context` (directories, cluster spec, coordinator or not).
    """

    metadata: DatasetMetadata
    ctx: runtime.Context
    num_workers: int
    strategy: Strategy
    role: str
    train_examples: int
    steps_per_epoch: int
    intra_op_threads: int
    inter_op_threads: int

    @property
    def is_chief(self) -> bool:
        """The coordinator: it reports the metrics (and its SavedModel is the job's)."""
        return self.ctx.is_coordinator


def apply_dir_flags(args: argparse.Namespace, environ: MutableMapping[str, str]) -> None:
    """Set the contract's variables in ``environ`` from the directory flags given: ``--data-dir`` and the
    like override the environment; ``--train-dir`` only fills what is still unset, with the launch step's
    layout (:func:`tfk8s.core.contract.replica_env`).

    Raises:
        UsageError: TF_CONFIG is not valid (with ``--train-dir``).
    """
    for attr, var in _DIR_FLAGS.items():
        if getattr(args, attr, None):
            environ[var] = str(getattr(args, attr))
    if getattr(args, "train_dir", None):
        from tfk8s.core.cluster import Replica, ReplicaType
        from tfk8s.core.contract import replica_env

        try:
            ctx = runtime.context(environ)
        except ClusterConfigError as e:
            raise UsageError(str(e)) from e
        me = Replica(ReplicaType(ctx.replica_type), ctx.replica_index)
        first = Replica(ReplicaType.CHIEF if ctx.cluster.get("chief") or not ctx.cluster else ReplicaType.WORKER, 0)
        layout = replica_env(environ.get(runtime.JOB_NAME_ENV, "local"), me, me if ctx.is_coordinator else first,
                             args.train_dir, environ.get(runtime.DATA_DIR_ENV, ""))
        for var, value in layout.items():
            if not environ.get(var) and value:
                environ[var] = value


def make_plan(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Plan:
    """Validate the arguments, TF_CONFIG and the data dir, and decide this replica's role.

    Args:
        environ: TF_CONFIG and the contract's variables (default ``os.environ``); the directory flags win.

    Raises:
        UsageError: with a message saying what to fix.
    """
    for flag, value, minimum in (("--epochs", args.epochs, 1), ("--batch-size", args.batch_size, 1),
                                 ("--max-train-examples", args.max_train_examples, 1),
                                 ("--steps-per-epoch", args.steps_per_epoch, 1),
                                 ("--intra-op-threads", args.intra_op_threads, 0),
                                 ("--inter-op-threads", args.inter_op_threads, 0),
                                 ("--bytes-per-pack", args.bytes_per_pack, 0),
                                 ("--steps-per-execution", args.steps_per_execution, 1)):
        if value is not None and value < minimum:
            raise UsageError(f"{flag} must be >= {minimum}, got {value}")
    if not args.learning_rate > 0:
        raise UsageError(f"--learning-rate must be > 0, got {args.learning_rate}")
    chosen_callbacks(args)  # a bad --callbacks fails before anything starts

    env = dict(os.environ if environ is None else environ)
    apply_dir_flags(args, env)
    try:
        ctx = runtime.context(env)
    except ClusterConfigError as e:
        raise UsageError(str(e)) from e
    spec, is_evaluator = ctx.cluster, ctx.replica_type == "evaluator"
    if spec and not is_evaluator and ctx.replica_index >= len(spec.get(ctx.replica_type, [])):
        raise UsageError(f"TF_CONFIG task {ctx.label} is not in its cluster {spec}")
    if spec.get("ps"):
        if len(spec.get("chief", [])) != 1 or not spec.get("worker"):
            raise UsageError(
                f"the cluster has {len(spec['ps'])} ps replica(s): ParameterServerStrategy needs exactly one "
                f"chief (the coordinator) and at least one worker, got {spec}: set chief=1 and worker >= 1"
            )
        num_workers = len(spec["worker"])
        role = ROLE_EVALUATE if is_evaluator else ROLE_TRAIN if ctx.replica_type == "chief" else ROLE_SERVE
    else:
        try:
            ReplicaCounts(chief=len(spec.get("chief", [])), worker=len(spec.get("worker", [])))
        except ClusterConfigError as e:
            if spec:
                raise UsageError(str(e)) from e
        num_workers = ctx.num_workers
        role = ROLE_EVALUATE if is_evaluator else ROLE_TRAIN
        if args.batch_size % num_workers:
            raise UsageError(
                f"--batch-size {args.batch_size} is the global batch and must be divisible by the {num_workers} "
                f"workers, e.g. {math.ceil(args.batch_size / num_workers) * num_workers}"
            )

    data_dir = ctx.data_dir
    if not data_dir:
        raise UsageError(f"no data: set ${runtime.DATA_DIR_ENV} (tfk8s does) or pass --data-dir, a folder "
                         "written by the prepare-dataset step")
    if not os.path.isdir(data_dir) and "://" not in data_dir:
        raise UsageError(f"--data-dir {data_dir} does not exist: run the prepare-dataset step first")
    try:
        meta = load_metadata(data_dir)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from e
    split = EVAL_SPLIT if is_evaluator else TRAIN_SPLIT
    if split not in meta.splits:
        raise UsageError(f"{data_dir} has no {split!r} split (it has {sorted(meta.splits)})")
    available = meta.splits[TRAIN_SPLIT].num_examples if TRAIN_SPLIT in meta.splits else 0
    train_examples = min(available, args.max_train_examples or available)
    steps = args.steps_per_epoch or max(1, math.ceil(train_examples / args.batch_size))

    auto_intra, auto_inter = runtime.default_threads(ctx)
    intra = args.intra_op_threads if args.intra_op_threads is not None else auto_intra
    inter = args.inter_op_threads if args.inter_op_threads is not None else auto_inter
    if ctx.strategy_kind is Strategy.PARAMETER_SERVER and inter == 1:
        raise UsageError(
            "--inter-op-threads 1 deadlocks ParameterServerStrategy (a ps/worker server with one inter-op "
            "thread never finishes the first step the chief schedules; measured on TF 2.21): use 0 or >= 2"
        )
    return Plan(meta, ctx, num_workers, ctx.strategy_kind, role, train_examples, steps, intra, inter)


def train(args: argparse.Namespace, plan: Plan) -> dict | None:
    """Train under the strategy TF_CONFIG calls for, save, and report; returns the metrics on the coordinator
    (None elsewhere). A ps/worker under ParameterServerStrategy serves inside ``runtime.strategy`` instead.

    Raises:
        UsageError: the batch does not divide among the replicas in sync.
        tfk8s.runtime.PeerTimeoutError: a peer did not come up within ``--peer-timeout-s``.
    """
    startup = StartupTimer()
    import tensorflow  # noqa: F401  (runtime.strategy imports it first anyway: timed apart here)

    startup.mark("tensorflow import")
    strategy = runtime.strategy(communication=args.communication, bytes_per_pack=args.bytes_per_pack,
                                peer_timeout_s=args.peer_timeout_s, intra_op_threads=plan.intra_op_threads,
                                inter_op_threads=plan.inter_op_threads)
    startup.mark("strategy (the peers' wait included)")
    import tf_keras

    from trainer.model import build_model

    if args.seed is not None:
        tf_keras.utils.set_random_seed(args.seed)
    replicas = strategy.num_replicas_in_sync
    if args.batch_size % replicas:
        raise UsageError(f"--batch-size {args.batch_size} must be divisible by the {replicas} replicas in sync")
    print(f"replica={plan.ctx.label} strategy={plan.strategy} workers={plan.num_workers} replicas_in_sync={replicas} "
          f"global_batch={args.batch_size} per_replica_batch={args.batch_size // replicas} "
          f"train_examples={plan.train_examples} steps_per_epoch={plan.steps_per_epoch} epochs={args.epochs} "
          f"threads(intra,inter)=({plan.intra_op_threads},{plan.inter_op_threads})", flush=True)

    common = {"batch_size": args.batch_size, "max_examples": plan.train_examples, "seed": args.seed}
    if plan.strategy is Strategy.PARAMETER_SERVER:
        # Each worker builds its own pipeline (no auto-sharding under ParameterServerStrategy): its share of
        # the files, shuffled and repeated; a step takes one per-replica batch from the worker running it.
        dataset = tf_keras.utils.experimental.DatasetCreator(
            lambda input_context: runtime.dataset(TRAIN_SPLIT, input_context=input_context, **common))
    else:  # one iterator for the whole run: fit returns at once (runtime.distribute says why)
        dataset = runtime.distribute(runtime.dataset(TRAIN_SPLIT, **common), strategy)
    startup.mark("data")
    with strategy.scope():
        model = build_model(plan.metadata, args.learning_rate, decay_steps=args.epochs * plan.steps_per_epoch,
                            steps_per_execution=1 if plan.strategy is Strategy.PARAMETER_SERVER else
                            min(args.steps_per_execution, plan.steps_per_epoch))
    startup.mark("model")

    callbacks = runtime.callbacks(batch_size=args.batch_size, **chosen_callbacks(args)) + [startup.callback()]
    t0 = time.perf_counter()
    history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=plan.steps_per_epoch,
                        callbacks=callbacks, verbose=0)
    fit_s = time.perf_counter() - t0
    runtime.save(model)

    hist = history.history
    epoch_times = runtime.epoch_times()  # empty without the progress callback (--callbacks)
    epochs_run = len(history.epoch)  # in this process (a resumed run skips the backup's epochs)
    return runtime.report({
        "accuracy": hist["accuracy"][-1] if hist.get("accuracy") else None,
        "loss": hist["loss"][-1] if hist.get("loss") else None,
        "examples_per_sec": round(epochs_run * plan.steps_per_epoch * args.batch_size / fit_s, 1) if fit_s else 0.0,
        "wall_time_s": round(time.perf_counter() - _START, 3),
        "epochs": args.epochs,
        "epochs_run": epochs_run,
        "resumed_from_epoch": runtime.resumed_from_epoch(),
        "strategy": plan.strategy.value,
        "num_workers": plan.num_workers,
        "num_replicas_in_sync": replicas,
        "global_batch_size": args.batch_size,
        "train_examples": plan.train_examples,
        "steps_per_epoch": plan.steps_per_epoch,
        "epoch_times_s": [round(t, 3) for t in epoch_times],
    })


class _Stopped(BaseException):
    """SIGTERM reached the evaluator (a BaseException, so no ``except Exception`` on the way swallows it)."""


def _raise_stopped(signum, frame):
    raise _Stopped()


def _checkpoint_number(path: str) -> int:
    """The epoch in a ModelCheckpoint path ``.../ckpt-<epoch>`` (-1 if the name has no number)."""
    tail = os.path.basename(path).rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def evaluate_checkpoints(args: argparse.Namespace, plan: Plan) -> int:
    """The evaluator replica: evaluate every new checkpoint in the checkpoint dir on the test split until it has
    evaluated the final one (``ckpt-<epochs>``) or SIGTERM comes; returns the number of evaluations.

    The newest checkpoint is evaluated each time (one written during an evaluation may be skipped, as with
    ``tf_keras.utils.SidecarEvaluator``, whose loop this is; that class is not used because its summaries need
    the ``tensorboard`` package and it does not say which checkpoint it evaluated). Per evaluation: a line
    ``evaluator: checkpoint N: loss=L accuracy=A examples=E time=Ts`` on stdout (N: the epoch after which the
    chief saved it) and ``epoch_loss``/``epoch_accuracy`` scalars in ``<tensorboard dir>/eval`` at step
    ``N - 1``, the step of the same epoch's training scalars in ``<tensorboard dir>/train``; and after each, its
    ``TFK8S_METRICS_FILE``: ``{"checkpoint": N, "epochs": E, "final": N >= E, "loss", "accuracy", "examples",
    "evaluations", "history": [{"checkpoint", "loss", "accuracy"}, ...]}``.
    """
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    evaluations = 0
    history: list[dict] = []
    writer = None
    try:
        import tensorflow as tf

        if plan.intra_op_threads:
            tf.config.threading.set_intra_op_parallelism_threads(plan.intra_op_threads)
        if plan.inter_op_threads:
            tf.config.threading.set_inter_op_parallelism_threads(plan.inter_op_threads)
        from trainer.model import build_model

        model = build_model(plan.metadata, args.learning_rate)
        test = runtime.dataset(EVAL_SPLIT, batch_size=args.batch_size, data_dir=plan.ctx.data_dir)
        examples = plan.metadata.splits[EVAL_SPLIT].num_examples
        ckpt_dir = plan.ctx.checkpoint_dir
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
                    writer = tf.summary.create_file_writer(os.path.join(plan.ctx.tensorboard_dir, TENSORBOARD_EVAL))
                runtime.write_scalars(writer, {"epoch_loss": loss, "epoch_accuracy": accuracy}, max(0, number - 1))
                history.append({"checkpoint": number, "loss": loss, "accuracy": accuracy})
                if plan.ctx.metrics_file:
                    write_metrics(plan.ctx.metrics_file, {
                        "checkpoint": number, "epochs": args.epochs, "final": number >= args.epochs, "loss": loss,
                        "accuracy": accuracy, "examples": examples, "evaluations": evaluations, "history": history})
                if number >= args.epochs:
                    print(f"evaluator: evaluated the final checkpoint ({number} of {args.epochs} epochs); done",
                          flush=True)
                    return evaluations
            time.sleep(EVAL_POLL_S)
    except _Stopped:
        last = f", the last of checkpoint {history[-1]['checkpoint']}" if history else ""
        print(f"evaluator: stopped by SIGTERM after {evaluations} evaluation(s){last}", flush=True)
        return evaluations
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not interrupt the cleanup
        if writer is not None:
            writer.close()
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (0, also after a diverged training; 2 for usage errors; other
    errors raise, exit 1).

    A ps/worker under ``ParameterServerStrategy`` never returns (it serves until stopped); the evaluator
    returns 0 once it has evaluated the final checkpoint, or SIGTERM stops it.
    """
    args = build_parser().parse_args(argv)
    try:
        apply_dir_flags(args, os.environ)  # tfk8s.runtime reads the contract from the environment
        plan = make_plan(args)
        if plan.role == ROLE_EVALUATE:
            evaluate_checkpoints(args, plan)
            return 0
        train(args, plan)  # a ps/worker under ParameterServerStrategy serves in here until stopped
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    runtime.finish(main())  # an exception still ends the usual way (traceback, exit 1)
