"""The built-in training program: ``python -m trainer.task`` (see :mod:`trainer.task`), one program among others:
it uses only the contract (docs/training-program.md), through :mod:`tfk8s.runtime`.

- :mod:`trainer.model`: the CNN (``build_model``), uint8 images in, class probabilities out;
- :mod:`trainer.task`: CLI, the plan (role, steps, threads) checked before TensorFlow starts, training with
  the runtime's strategy, data, callbacks, save and report; the evaluator replica's loop.

The prepared shards are read by :mod:`tfk8s.runtime.shards`. Importing this package does not import TensorFlow.
"""
