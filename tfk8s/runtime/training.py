"""What ``model.fit`` needs from tfk8s: :func:`callbacks`, the standard tf-keras callbacks (backup and resume,
per-epoch checkpoints, TensorBoard scalars, progress, the NaN stop; the classes are
:mod:`tfk8s.runtime.keras_callbacks`), and :func:`write_scalars` for a custom loop's TensorBoard scalars."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tfk8s.core.layout import BACKUP_DIR
from tfk8s.runtime.replica import context, reporter

if TYPE_CHECKING:
    import tensorflow as tf
    import tf_keras

CHECKPOINT_PATTERN = "ckpt-{epoch}"  # per-epoch weights in the checkpoint dir: ckpt-1 after the first epoch
BACKUP_SUBDIR = BACKUP_DIR  # BackupAndRestore's folder under the checkpoint dir


def write_scalars(writer: tf.summary.SummaryWriter, values: Mapping[str, float], step: int) -> None:
    """Write ``values`` as TensorBoard scalars at ``step`` and flush (:func:`tfk8s.runtime.keras_callbacks.write_scalars`:
    TensorFlow 2.21 installs no ``tensorboard`` package for ``tf.summary.scalar``)."""
    from tfk8s.runtime.keras_callbacks import write_scalars as write

    write(writer, values, step)


def callbacks(*, batch_size: int | None = None, backup: bool = True, checkpoints: bool = True,
              tensorboard: bool = True, progress: bool = True, stop_on_nan: bool = True) -> list[tf_keras.callbacks.Callback]:
    """The standard tf-keras callbacks for ``model.fit`` (each can be left out):

    - ``backup``: ``BackupAndRestore`` in ``<checkpoint dir>/backup``: a restarted replica resumes after the
      last finished epoch and prints ``resumed from epoch k of N (backup in DIR)`` (k epochs were done); on
      SIGTERM (a stop or a preemption notice) every replica saves the backup at the same step and exits 42 within
      about a second, and the restart resumes at the next step (:class:`tfk8s.runtime.keras_callbacks.Resume`;
      not under ParameterServerStrategy);
    - ``checkpoints``: the weights after every epoch, ``<checkpoint dir>/ckpt-<epoch>`` (what an evaluator
      replica reads; kept after training);
    - ``tensorboard``: per-epoch scalars (``epoch_loss``, ``epoch_<metric>``, ``epoch_examples_per_sec``) in
      ``<tensorboard dir>/train``, coordinator only (:func:`tfk8s.runtime.keras_callbacks.write_scalars`);
    - ``progress``: ``TFK8S_PROGRESS_FILE`` at most every 2 s (epoch, global step, examples/sec, loss;
      ``done`` at the end) and one line per epoch on stdout (loss, metrics, examples/sec, seconds);
    - ``stop_on_nan``: stops training when the loss is NaN or inf and marks it diverged (:func:`diverged`,
      ``report()``'s ``diverged``). The batch loss is all-reduced, so every MWMS worker stops at the same step.

    Args:
        batch_size: the global batch, for examples/sec (omitted without it).
    """
    import tf_keras

    from tfk8s.runtime import keras_callbacks as kc

    ctx = context()
    out: list = []
    if backup:
        out.append(kc.Resume(backup_dir=os.path.join(ctx.checkpoint_dir, BACKUP_DIR)))
    if checkpoints:  # tf-keras writes a non-chief MWMS worker's copy to a temporary folder and removes it
        out.append(tf_keras.callbacks.ModelCheckpoint(os.path.join(ctx.checkpoint_dir, CHECKPOINT_PATTERN),
                                                      save_weights_only=True))
    if tensorboard and ctx.is_coordinator:
        out.append(kc.EpochScalars(ctx.tensorboard_dir, batch_size))
    if progress or stop_on_nan:
        out.append(kc.Progress(reporter(ctx), batch_size, progress=progress, stop_on_nan=stop_on_nan))
    return out
