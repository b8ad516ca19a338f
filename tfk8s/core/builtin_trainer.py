"""What the launch step and the built-in trainer (``python -m trainer.task``, one program among others) agree
on: how it is started, its defaults and its flags. The trainer reads these defaults, the launch parameters
(:mod:`tfk8s.steps.parameters`) and the pipeline offer them; nothing else here is special about it.

Plain Python (standard library only).
"""

from __future__ import annotations

import os

TRAINER_MODULE = "trainer.task"
"""``python -m trainer.task``: the replicas' command when the pipeline's ``command`` is empty."""

TRAINER_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
"""Set in every replica of every job (a user's program too): Keras 3's ``fit`` breaks under multi-worker
strategies (keras-team/keras#20585), so ``tf.keras`` is tf-keras, as in TensorFlow's multi-worker tutorial."""

# Defaults measured with 2 workers on 2 shared CPU cores, full MNIST (60,000 training examples): ~8-9 s per
# epoch, test accuracy 0.984-0.988 over 11 runs (1 epoch: 0.980-0.982, not robust). A large global batch keeps
# the number of all-reduce steps (~20 ms each on CPU) low; the trainer's cosine decay of the learning rate to
# 0 over all steps makes 2 epochs enough. The trainer's flags, the launch step and the pipeline share them.
DEFAULT_EPOCHS = 2
DEFAULT_BATCH_SIZE = 512
DEFAULT_LEARNING_RATE = 6e-3
# The built-in trainer's steps per call of its compiled step function (not a pipeline parameter: the arithmetic
# is the same). Measured with bench/worker_scaling.py on the quiet machine (2 cores, 1 thread per worker,
# per-worker batch 256, 2026-12-01): 2 workers 16,460 examples/s with 1 step per call, 18,070 with 8 (+10%);
# 1 worker +5%. The per-batch callbacks (progress file, NaN check) then run once per 8 steps: a NaN loss stops
# training at the end of that call, on every worker alike.
DEFAULT_STEPS_PER_EXECUTION = 8


def trainer_args(data_dir: str | os.PathLike, train_dir: str | os.PathLike, epochs: int, batch_size: int,
                 learning_rate: float, max_train_examples: int = 0) -> list[str]:
    """The built-in trainer's flags (``python -m trainer.task --help``); ``batch_size`` is the global batch
    (examples per step, all replicas together).

    The launchers hand every replica its directories in the contract's variables (:mod:`tfk8s.core.contract`);
    ``--train-dir`` only fills those left unset (a trainer run by hand), with the same layout."""
    args = ["--data-dir", str(data_dir), "--train-dir", str(train_dir), "--epochs", str(epochs),
            "--batch-size", str(batch_size), "--learning-rate", repr(float(learning_rate))]
    if max_train_examples:
        args += ["--max-train-examples", str(max_train_examples)]
    return args


def is_builtin(command: tuple[str, ...] | list[str]) -> bool:
    """Whether a job's ``command`` runs the built-in trainer (``... -m trainer.task ...``)."""
    return TRAINER_MODULE in command
