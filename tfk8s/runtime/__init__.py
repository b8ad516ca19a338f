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

Importing this package does not import TensorFlow; the functions do. Its modules, one job each:
:mod:`~tfk8s.runtime.replica` (this replica, its progress and state), :mod:`~tfk8s.runtime.strategies` (the
strategy, the peers' wait, the thread pools), :mod:`~tfk8s.runtime.data` (the prepared data as batches, one kept
iterator), :mod:`~tfk8s.runtime.shards` (the data format's reader), :mod:`~tfk8s.runtime.training` (fit's
callbacks), :mod:`~tfk8s.runtime.outputs` (the model, the metrics, the end). This layer imports
:mod:`tfk8s.core` only: a replica needs nothing else of tfk8s.
"""

from tfk8s.runtime.data import dataset, distribute, metadata
from tfk8s.runtime.outputs import finish, report, save
from tfk8s.runtime.replica import (
    CHECKPOINT_DIR_ENV,
    DATA_DIR_ENV,
    DEFAULT_OUTPUT_DIR,
    JOB_NAME_ENV,
    METRICS_FILE_ENV,
    MODEL_DIR_ENV,
    PROGRESS_FILE_ENV,
    TENSORBOARD_DIR_ENV,
    Context,
    context,
    diverged,
    epoch_times,
    progress,
    resumed_from_epoch,
)
from tfk8s.runtime.strategies import (
    COMMUNICATIONS,
    DEFAULT_PEER_TIMEOUT_S,
    PSS_MIN_INTER_OP_THREADS,
    PeerTimeoutError,
    default_threads,
    serve,
    strategy,
    wait_for_peers,
)
from tfk8s.runtime.training import BACKUP_SUBDIR, CHECKPOINT_PATTERN, callbacks, write_scalars

__all__ = [
    "BACKUP_SUBDIR", "CHECKPOINT_DIR_ENV", "CHECKPOINT_PATTERN", "COMMUNICATIONS", "DATA_DIR_ENV",
    "DEFAULT_OUTPUT_DIR", "DEFAULT_PEER_TIMEOUT_S", "JOB_NAME_ENV", "METRICS_FILE_ENV", "MODEL_DIR_ENV",
    "PROGRESS_FILE_ENV", "PSS_MIN_INTER_OP_THREADS", "TENSORBOARD_DIR_ENV", "Context", "PeerTimeoutError",
    "callbacks", "context", "dataset", "default_threads", "distribute", "diverged", "epoch_times", "finish",
    "metadata", "progress", "report", "resumed_from_epoch", "save", "serve", "strategy", "wait_for_peers",
    "write_scalars",
]
