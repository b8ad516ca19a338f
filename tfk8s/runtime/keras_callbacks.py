"""The tf-keras callbacks of :func:`tfk8s.runtime.callbacks`, one class each. Importing this module imports
TensorFlow and tf-keras (the runtime imports it only when a program asks for its callbacks)."""

from __future__ import annotations

import contextlib
import math
import os
import signal
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


class _SigtermSave:
    """What tf-keras asks of a ``PreemptionCheckpointHandler`` (``backup_if_preempted`` calls
    ``_check_preemption_and_maybe_checkpoint`` after every batch), for one process (the default or a mirrored
    strategy), which TensorFlow's handler does not serve: SIGTERM sets a flag (a Python handler, run between two
    steps), and the next batch end saves the backup at that step and calls ``exit_fn``."""

    def __init__(self, state, exit_fn):
        self._run_counter = 0
        self.state, self.exit_fn, self.received = state, exit_fn, False
        try:
            self.previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:  # fit outside the main thread: no handler can be set, SIGTERM ends the process as before
            self.previous = None

    def _on_sigterm(self, signum, frame):
        if self.received and self.previous is not None:  # a second SIGTERM: the first one's save is stuck
            self.close()
            os.kill(os.getpid(), signum)
            return
        _STATE["sigterm_at"] = time.monotonic()
        self.received = True

    def _check_preemption_and_maybe_checkpoint(self):
        if self.received:
            self.state.back_up(epoch=None)  # the model and the epoch/batch variables BackupAndRestore keeps
            self.exit_fn()

    @contextlib.contextmanager
    def watch_preemption_scope(self):
        yield

    def close(self):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None


class Resume(tf_keras.callbacks.BackupAndRestore):
    """``BackupAndRestore`` that says where it resumed: ``resumed from epoch k of N (backup in DIR)``, and
    records k (:func:`tfk8s.runtime.resumed_from_epoch`); and that saves and exits promptly on SIGTERM.

    SIGTERM (a stop: Ctrl-C, ``tfk8s delete``, a cancelled run; or a preemption notice: an eviction, a drain)
    makes every replica save the backup at the same step, print ``stopped by SIGTERM: saved in epoch E at step S
    ...`` and exit with ``restart_exit_code`` (42, TensorFlow's ``TerminationConfig`` restart code), within a
    step and one checkpoint: under MultiWorkerMirroredStrategy through TensorFlow's
    ``PreemptionCheckpointHandler`` (its SIGTERM notifier otherwise swallows the signal, and the replicas trained
    on for the whole stop grace: tf-keras turns it on only on Google Cloud), in one process through a Python
    SIGTERM handler (which otherwise ended the process at once, the epoch's steps lost). A restarted replica
    resumes at the next step: ``resumed in epoch E at step S+1 of N (saved on SIGTERM; backup in DIR)``. Not
    under ParameterServerStrategy (whose replicas tf-keras does not back up per step).
    """

    def __init__(self, *args, save_on_sigterm: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.save_on_sigterm = save_on_sigterm

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        state, strategy = self._training_state, self.model.distribute_strategy
        if self.save_on_sigterm and not isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
            self._watch_sigterm(state, strategy)
        epoch = int(state._ckpt_saved_epoch.numpy())  # -1 when there is no backup
        batch = int(state._ckpt_saved_batch.numpy())
        steps = (self.params or {}).get("steps") or 0
        mid_epoch = state._enable_save_before_preemption and 0 <= batch < steps - 1 and epoch >= 0
        done = epoch if mid_epoch else epoch + 1  # epochs finished
        _STATE["resumed_from"] = max(0, done)
        if mid_epoch:
            print(f"resumed in epoch {epoch + 1} of {self.params.get('epochs')} at step {batch + 2} of {steps} (saved "
                  f"on SIGTERM; backup in {self.backup_dir})", flush=True)
        elif done > 0:
            print(f"resumed from epoch {done} of {self.params.get('epochs')} (backup in {self.backup_dir})",
                  flush=True)

    def _watch_sigterm(self, state, strategy):
        def exit_fn():
            from tfk8s.core.policy import DEFAULT_RESTART_EXIT_CODE
            from tfk8s.runtime.outputs import finish

            since = _STATE.get("sigterm_at")
            took = f"; {time.monotonic() - since:.2f} s after SIGTERM" if since else ""
            print(f"stopped by SIGTERM: saved in epoch {int(state._ckpt_saved_epoch.numpy()) + 1} at step "
                  f"{int(state._ckpt_saved_batch.numpy()) + 1} (backup in {self.backup_dir}{took}); exit "
                  f"{DEFAULT_RESTART_EXIT_CODE}: a restart resumes at the next step", flush=True)
            finish(DEFAULT_RESTART_EXIT_CODE)

        if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            from tensorflow.python.distribute.failure_handling import failure_handling_util as platform
            from tensorflow.python.util import deprecation

            # The handler asks GCE's metadata server whether it runs on Google Cloud (an HTTP request of up to
            # 5 s per replica, through any http_proxy: a proxy that never answers held it). Here SIGTERM is the
            # notice on every platform, so it is told the plain platform.
            detect = platform.detect_platform
            platform.detect_platform = lambda: (platform.PlatformDevice.INTERNAL_GPU
                                                if tf.config.list_logical_devices("GPU")
                                                else platform.PlatformDevice.INTERNAL_CPU)
            try:
                with deprecation.silence():
                    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                        strategy.cluster_resolver, state.write_checkpoint_manager,
                        termination_config=tf.distribute.experimental.TerminationConfig(grace_period=0,
                                                                                        exit_fn=exit_fn))
            except Exception as e:  # noqa: BLE001 - training must go on; a stop then waits for the SIGKILL
                print(f"note: no save on SIGTERM ({type(e).__name__}: {str(e)[:200]}); a stop ends this replica "
                      "at the stop grace's SIGKILL", flush=True)
                return
            finally:
                platform.detect_platform = detect
            handler._read_checkpoint_manager = state.read_checkpoint_manager  # as tf-keras does on Google Cloud
        else:
            handler = _SigtermSave(state, exit_fn)
        state.preemption_handler = handler
        state._enable_save_before_preemption = True  # backup_if_preempted after every batch; resume at a batch
        self.model._preemption_handler = handler

    def _implements_train_batch_hooks(self):
        return True  # backup_if_preempted runs at every batch end

    def on_train_batch_end(self, batch, logs=None):
        from tensorflow.python.util import deprecation

        if not isinstance(self.model.distribute_strategy, tf.distribute.experimental.ParameterServerStrategy):
            # the last step done: with steps_per_execution > 1, on_train_batch_begin got the execution's first
            # step, and a backup saved now would resume steps that were done
            self._training_state._ckpt_saved_batch.assign(int(batch))
        with deprecation.silence():  # PreemptionCheckpointHandler.total_run_calls' warning, once per process
            super().on_train_batch_end(batch, logs)

    def on_train_end(self, logs=None):
        handler = getattr(self.model, "_preemption_handler", None)
        if isinstance(handler, _SigtermSave):
            handler.close()
        self.model._preemption_handler = None
        super().on_train_end(logs)


class Progress(tf_keras.callbacks.Callback):
    """This replica's progress file (at most every ``reporter.min_interval_s``, and at once after the first
    step of this attempt, without a rate, so that the first step shows without that delay; epoch, global step,
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
        self._first_reported = False  # the first step of this attempt is reported at once
        self._update(force=True)

    def on_epoch_begin(self, epoch, logs=None):
        epoch = int(epoch)  # a NumPy integer when tf-keras resumes from a backup saved mid-epoch
        self.epoch, self._epoch_t0 = epoch, time.perf_counter()
        self.step = max(self.step, epoch * ((self.params or {}).get("steps") or 0))
        self._epoch_step0 = self.step
        self._t, self._t_step = self._epoch_t0, self.step
        # a rate over at least min_interval_s: one step (under PSS: merely scheduled) is not a throughput
        self._next_update = self._epoch_t0 + self.reporter.min_interval_s

    def _rate(self, steps, seconds):
        return round(steps * self.batch_size / seconds, 1) if self.batch_size and seconds > 0 else None

    def on_train_batch_end(self, batch, logs=None):
        batch = int(batch)  # a NumPy integer in the epoch a mid-epoch backup resumed
        self.step = self.epoch * ((self.params or {}).get("steps") or 0) + batch + 1
        if self.stop_on_nan:
            loss = as_float(logs_of(logs, False).get("loss"))
            if loss is not None and not math.isfinite(loss):
                _STATE["diverged"] = True
                self.model.stop_training = True
                print(f"training diverged: loss {loss} at epoch {self.epoch + 1} step {self.step}; stopping "
                      "(reported as diverged=true)", flush=True)
        now = time.perf_counter()
        if self.progress and self.reporter.path is not None and not self._first_reported:
            # the first step (its trace included): reported now, the rate measured from here on
            self._first_reported = True
            self._t, self._t_step, self._next_update = now, self.step, now + self.reporter.min_interval_s
            self._update(force=True, examples_per_sec=None, loss=as_float(logs_of(logs, False).get("loss")))
        elif self.progress and self.reporter.path is not None and now >= self._next_update:
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
