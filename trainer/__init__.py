"""The training program every replica runs: ``python -m trainer.task`` (see :mod:`trainer.task`).

- :mod:`trainer.data`: prepared TFRecord shards -> batches (``make_dataset``), explicit auto-shard policy;
- :mod:`trainer.model`: the CNN (``build_model``), uint8 images in, class probabilities out;
- :mod:`trainer.task`: CLI, TF_CONFIG -> strategy, fit with backup/restore, SavedModel + training summary.

Importing this package does not import TensorFlow.
"""
