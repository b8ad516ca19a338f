"""The prepared data as ``tf.data`` batches for a training program (:func:`dataset`, read by
:mod:`tfk8s.runtime.shards`), and :func:`distribute`, which hands ``fit`` one iterator that lives until the process
ends."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfk8s.runtime.replica import DATA_DIR_ENV, context

if TYPE_CHECKING:
    import tensorflow as tf

    from tfk8s.core.data_format import DatasetMetadata


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
    from tfk8s.runtime.shards import load_metadata

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
            split (shuffled, repeated) of at most 256 MiB of images (``tfk8s.runtime.shards.make_dataset``).

    Raises:
        ValueError / FileNotFoundError / KeyError: no data dir, bad metadata, unknown split.
    """
    from tfk8s.runtime.shards import make_dataset

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
