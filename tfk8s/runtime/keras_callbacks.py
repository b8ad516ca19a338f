"""The tf-keras callbacks of :func:`tfk8s.runtime.callbacks`, one class each. Importing this module imports
TensorFlow and tf-keras (the runtime imports it only when a program asks for its callbacks)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from tfk8s.core.layout import TENSORBOARD_TRAIN
from tfk8s.core.progress import ProgressReporter
from tfk8s.runtime.replica import _STATE


def write_scalars(writer: tf.summary.SummaryWriter, values: Mapping[str, float], step: int) -> None:
    """Write ``values`` as TensorBoard scalars at ``step`` and flush.

    ``tf.summary.scalar`` and Keras' TensorBoard callback need the ``tensorboard`` package, which TensorFlow
    2.21 no longer installs; this writes the same event records with ``tf.summary.write`` and the ``scalars``
    plugin metadata, so TensorBoard shows them unchanged.
    """
    from tensorflow.core.framework import summary_pb2

    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    with writer.as_default():
        for tag, value in values.items():
            tf.summary.write(tag, tf.constant(float(value), tf.float32), step=step, metadata=meta)
    writer.flush()


def as_float(value) -> float | None:
    """A log value as a float, None if it is missing or not ready locally (a PSS RemoteValue: never fetched)."""
    if value is None or hasattr(value, "fetch"):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def logs_of(logs, fetch: bool) -> Mapping:
    """Keras' logs as a mapping: under ParameterServerStrategy they are a RemoteValue, fetched only where the
    step is over anyway (epoch end), never per batch (that would wait for each scheduled step)."""
    if hasattr(logs, "fetch"):
        logs = logs.fetch() if fetch else None
    return logs if isinstance(logs, Mapping) else {}


class Resume(tf_keras.callbacks.BackupAndRestore):
    """``BackupAndRestore`` that says where it resumed: ``resumed from epoch k of N (backup in DIR)``, and
    records k (:func:`tfk8s.runtime.resumed_from_epoch`)."""

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        done = int(self._training_state._ckpt_saved_epoch.numpy()) + 1  # -1 when there is no backup
        _STATE["resumed_from"] = max(0, done)
        if done > 0:
            print(f"resumed from epoch {done} of {self.params.get('epochs')} (backup in {self.backup_dir})",
                  flush=True)


class Progress(tf_keras.callbacks.Callback):
    """This replica's progress file (at most every ``reporter.min_interval_s``; epoch, global step,
    examples/sec, loss; ``done`` at the end), one line per epoch on stdout, and (``stop_on_nan``) the NaN stop.

    Args:
        reporter: writes ``TFK8S_PROGRESS_FILE``.
        batch_size: the global batch, for examples/sec (None: no rate).
        progress: report progress and print the epoch lines (False: the NaN stop only).
        stop_on_nan: stop training when the loss is NaN or inf and mark it diverged.
    """

    def __init__(self, reporter: ProgressReporter, batch_size: int | None, progress: bool = True,
                 stop_on_nan: bool = True):
        super().__init__()
        self._supports_tf_logs = True  # logs stay tensors: converted here only when needed
        self.reporter, self.batch_size = reporter, batch_size
        self.progress, self.stop_on_nan = progress, stop_on_nan
        self.step = 0

    def _update(self, state="running", force=False, **fields):
        if not self.progress:
            return False
        self._fields = {**getattr(self, "_fields", {}), **fields}
        p = self.params or {}
        steps = (p.get("steps") or 0) * (p.get("epochs") or 0)
        return self.reporter.update(state, force=force, epoch=self.epoch + 1, epochs=p.get("epochs"),
                                    step=self.step, steps=steps, **self._fields)

    def on_train_begin(self, logs=None):
        # A resumed attempt (BackupAndRestore, whose on_train_begin runs first) starts where the backup left
        # off: its first report keeps the job's place instead of dropping back to epoch 1, step 0.
        done = int(_STATE.get("resumed_from") or 0)
        self.epoch = done
        self.step = done * ((self.params or {}).get("steps") or 0)
        self._t, self._t_step = time.perf_counter(), self.step
        self._next_update = self._t + self.reporter.min_interval_s
        self._update(force=True)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self._epoch_t0 = epoch, time.perf_counter()
        self.step = max(self.step, epoch * ((self.params or {}).get("steps") or 0))
        self._epoch_step0 = self.step
        self._t, self._t_step = self._epoch_t0, self.step
        # a rate over at least min_interval_s: one step (under PSS: merely scheduled) is not a throughput
        self._next_update = self._epoch_t0 + self.reporter.min_interval_s

    def _rate(self, steps, seconds):
        return round(steps * self.batch_size / seconds, 1) if self.batch_size and seconds > 0 else None

    def on_train_batch_end(self, batch, logs=None):
        self.step = self.epoch * ((self.params or {}).get("steps") or 0) + batch + 1
        if self.stop_on_nan:
            loss = as_float(logs_of(logs, False).get("loss"))
            if loss is not None and not math.isfinite(loss):
                _STATE["diverged"] = True
                self.model.stop_training = True
                print(f"training diverged: loss {loss} at epoch {self.epoch + 1} step {self.step}; stopping "
                      "(reported as diverged=true)", flush=True)
        now = time.perf_counter()
        if self.progress and self.reporter.path is not None and now >= self._next_update:
            rate = self._rate(self.step - self._t_step, now - self._t)
            self._t, self._t_step, self._next_update = now, self.step, now + self.reporter.min_interval_s
            self._update(force=True, examples_per_sec=rate, loss=as_float(logs_of(logs, False).get("loss")))

    def on_epoch_end(self, epoch, logs=None):
        logs = {k: as_float(v) for k, v in logs_of(logs, True).items()}
        dt = time.perf_counter() - self._epoch_t0
        rate = self._rate(max(self.step - self._epoch_step0, 0) or (self.params or {}).get("steps") or 0, dt)
        loss = logs.get("loss")
        if self.stop_on_nan and loss is not None and not math.isfinite(loss) and not _STATE["diverged"]:
            _STATE["diverged"] = True  # PSS: the batch losses are not fetched, the epoch's is
            self.model.stop_training = True
            print(f"training diverged: loss {loss} after epoch {epoch + 1}; stopping (reported as "
                  "diverged=true)", flush=True)
        shown = " ".join(f"{k}={v:.4f}" for k, v in logs.items() if v is not None)
        _STATE["epoch_times"].append(dt)
        if not self.progress:
            return
        print(f"epoch {epoch + 1}/{self.params.get('epochs')}: {shown} examples/sec={rate or 0:.0f} "
              f"time={dt:.1f}s", flush=True)
        self._update(force=True, examples_per_sec=rate, loss=loss)

    def on_train_end(self, logs=None):
        self._update("done", force=True)


class EpochScalars(tf_keras.callbacks.Callback):
    """Per-epoch TensorBoard scalars (``epoch_loss``, ``epoch_<metric>``, ``epoch_examples_per_sec``) in
    ``<tensorboard dir>/train`` (:func:`write_scalars`).

    Args:
        tensorboard_dir: ``TFK8S_TENSORBOARD_DIR``.
        batch_size: the global batch, for examples/sec (None: no rate).
    """

    def __init__(self, tensorboard_dir: str, batch_size: int | None):
        super().__init__()
        self.tensorboard_dir, self.batch_size = tensorboard_dir, batch_size

    def on_train_begin(self, logs=None):
        self._writer = tf.summary.create_file_writer(os.path.join(self.tensorboard_dir, TENSORBOARD_TRAIN))

    def on_epoch_begin(self, epoch, logs=None):
        self._t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        values = {f"epoch_{k}": v for k, v in ((k, as_float(v)) for k, v in logs_of(logs, True).items())
                  if v is not None}
        steps = (self.params or {}).get("steps")
        if self.batch_size and steps:
            values["epoch_examples_per_sec"] = steps * self.batch_size / (time.perf_counter() - self._t0)
        write_scalars(self._writer, values, epoch)

    def on_train_end(self, logs=None):
        self._writer.close()
