"""The reader of the prepared data: the shards the prepare step writes -> ``tf.data`` batches.

The format is :mod:`tfk8s.core.data_format` (the writer: :mod:`tfk8s.steps.prepare_dataset`); this module is its
one reader, used by
:func:`tfk8s.runtime.dataset` (training programs), the built-in trainer and evaluator replica, and the
evaluate step. TensorFlow is imported on first use, so importing this module is cheap.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from tfk8s.core import data_format
from tfk8s.core.cluster import parse_tf_config
from tfk8s.core.data_format import DatasetMetadata

if TYPE_CHECKING:
    import tensorflow as tf

SHUFFLE_BUFFER = 10_000  # examples (~8 MB of serialised MNIST records); >= one shard's worth for MNIST/4
# A training split whose decoded images take at most this many bytes is decoded once and served from memory
# (make_dataset's in_memory): full MNIST is 47 MB. bench/trainer_overhead.py: the TFRecord pipeline's threads
# took ~8% of the 2 cores from training.
IN_MEMORY_MAX_BYTES = 256 * 2**20


def __getattr__(name: str):
    if name == "AutoShardPolicy":  # tf.data.experimental.AutoShardPolicy, without importing TF at import time
        import tensorflow as tf

        return tf.data.experimental.AutoShardPolicy
    raise AttributeError(name)


def load_metadata(data_dir: str | os.PathLike) -> DatasetMetadata:
    """:func:`tfk8s.core.data_format.load_metadata`, also of a URL (``gs://...``: read with ``tf.io.gfile``;
    TensorFlow is imported only then).

    Raises:
        FileNotFoundError: no ``metadata.json`` there. ValueError: it is malformed or of an unknown version.
    """
    if "://" not in os.fspath(data_dir):
        return data_format.load_metadata(data_dir)
    import tensorflow as tf

    def read_text(path: str) -> str:
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(path)
        with tf.io.gfile.GFile(path) as f:
            return f.read()

    return data_format.load_metadata(data_dir, read_text)


def num_workers_from_tf_config(value: str | None = None) -> int:
    """Number of training processes (chief + workers) in TF_CONFIG; 1 without TF_CONFIG.

    Args:
        value: a TF_CONFIG value; None reads ``$TF_CONFIG``.

    Raises:
        tfk8s.core.cluster.ClusterConfigError: if TF_CONFIG is not valid.
    """
    spec, _ = parse_tf_config(os.environ.get("TF_CONFIG") if value is None else value)
    return max(1, len(spec.get("chief", [])) + len(spec.get("worker", [])))


def worker_position_from_tf_config(value: str | None = None) -> int:
    """This process's position among the training processes of TF_CONFIG, chief first then the workers (how
    MultiWorkerMirroredStrategy numbers its input pipelines); 0 without TF_CONFIG.

    Raises:
        tfk8s.core.cluster.ClusterConfigError: if TF_CONFIG is not valid.
    """
    spec, replica = parse_tf_config(os.environ.get("TF_CONFIG") if value is None else value)
    if replica is None:
        return 0
    if replica.replica_type.value == "worker":
        return len(spec.get("chief", [])) + replica.index
    return replica.index


def _in_memory(tf, files, counts, data_shard, meta, *, batch_size: int, seed: int | None, shuffle: bool,
               repeat: bool):
    """The examples of ``files`` (at most ``counts`` each, ``data_shard`` of their records) decoded once into
    memory: batches of indices into them, shuffled over all of them every epoch (make_dataset's in_memory)."""
    import numpy as np

    height, width, channels = meta.image_shape

    def read(path, n):
        records = tf.data.TFRecordDataset(path).take(n)
        return records.shard(*data_shard) if data_shard is not None else records

    records = tf.data.Dataset.from_tensor_slices((files, tf.constant(counts, tf.int64))).flat_map(read)
    images, labels = [], []
    for batch in records.batch(8192).map(_parser(tf, height, width, channels)):
        images.append(batch[0].numpy())
        labels.append(batch[1].numpy())
    x = tf.constant(np.concatenate(images) if images else np.zeros((0, height, width, channels), np.uint8))
    y = tf.constant(np.concatenate(labels) if labels else np.zeros((0,), np.int64))
    n = int(y.shape[0])
    ds = tf.data.Dataset.range(n)
    if shuffle:
        ds = ds.shuffle(max(n, 1), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size).map(lambda i: (tf.gather(x, i), tf.gather(y, i))).prefetch(2)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.autotune.enabled = False  # see make_dataset
    return ds.with_options(options)


def _parser(tf, height: int, width: int, channels: int):
    """A batch of serialised records -> ``(uint8 [B, H, W, C], int64 [B])``."""
    def parse(records):
        ex = tf.io.parse_example(records, {"image": tf.io.FixedLenFeature([], tf.string),
                                           "label": tf.io.FixedLenFeature([], tf.int64)})
        images = tf.reshape(tf.io.decode_raw(ex["image"], tf.uint8), [-1, height, width, channels])
        return images, ex["label"]
    return parse


def choose_shard_policy(num_files: int, num_workers: int) -> tf.data.experimental.AutoShardPolicy:
    """The auto-shard policy for ``num_files`` input files read by ``num_workers`` workers.

    ``FILE`` when ``num_files >= num_workers`` (each worker reads only its own files: no wasted reads),
    else ``DATA`` (every worker reads every file and keeps every ``num_workers``-th element). With fewer
    files than workers ``FILE`` raises an error (a worker would get no file), and ``AUTO`` tries ``FILE``
    first; hence the explicit choice (``tf.data.experimental.AutoShardPolicy``).

    Raises:
        ValueError: if either count is < 1.
    """
    import tensorflow as tf

    if num_files < 1 or num_workers < 1:
        raise ValueError(f"num_files and num_workers must be >= 1, got {num_files} and {num_workers}")
    AutoShardPolicy = tf.data.experimental.AutoShardPolicy
    return AutoShardPolicy.FILE if num_files >= num_workers else AutoShardPolicy.DATA


def _take_counts(num_files: int, max_examples: int) -> list[int]:
    """Records to read from each round-robin shard so that together they are the first ``max_examples``.

    Source example ``j`` is record ``j // n`` of shard ``j % n``, so shard ``i`` holds
    ``ceil((max_examples - i) / n)`` of the first ``max_examples`` examples.
    """
    return [max(0, math.ceil((max_examples - i) / num_files)) for i in range(num_files)]


def make_dataset(
    data_dir: str,
    split: str,
    *,
    batch_size: int,
    shuffle: bool,
    repeat: bool,
    shard_policy: tf.data.experimental.AutoShardPolicy | None = None,
    num_workers: int | None = None,
    max_examples: int | None = None,
    seed: int | None = None,
    metadata: DatasetMetadata | None = None,
    shard: tuple[int, int] | None = None,
    in_memory: bool | None = None,
) -> tf.data.Dataset:
    """Batches of ``split`` from a prepared data directory.

    Args:
        data_dir: directory holding ``metadata.json`` and the shards (see ``tfk8s.steps.prepare_dataset``).
        split: a split listed in the metadata, e.g. ``"train"`` or ``"test"``.
        batch_size: examples per batch. Under a multi-worker strategy this is the GLOBAL batch: Keras'
            ``fit`` splits each batch across the replicas in sync.
        shuffle: shuffle the file order and the examples (buffer of :data:`SHUFFLE_BUFFER`), reshuffled every
            epoch. False: files in shard order, interleaved deterministically.
        repeat: repeat forever (then give ``steps_per_epoch`` to ``fit``).
        shard_policy: auto-shard policy set in the dataset's options; None: :func:`choose_shard_policy` of the
            number of files and ``num_workers``. Only takes effect when a ``tf.distribute`` strategy
            distributes the dataset.
        num_workers: training processes; None: from ``$TF_CONFIG`` (1 without it).
        max_examples: use only the first ``max_examples`` examples of the split (the same set whichever
            shard policy is used: a per-file cap, not a ``take`` after sharding); None: all.
        seed: shuffle seed (None: random).
        metadata: already loaded metadata of ``data_dir`` (saves re-reading it).
        shard: ``(num_shards, index)``: shard explicitly, for input pipelines that no strategy auto-shards
            (``ParameterServerStrategy``'s per-worker datasets): keep files ``index::num_shards`` when there
            are at least ``num_shards`` files, else every ``num_shards``-th record of each file from record
            ``index`` on. The auto-shard policy is then ``OFF`` (``shard_policy`` and ``num_workers`` must
            not be given).
        in_memory: decode this pipeline's examples once (its shards, or its part of them under
            MultiWorkerMirroredStrategy: its files ``index::num_workers`` when there are enough, else every
            ``num_workers``-th record, ``index`` its position among chief + workers in TF_CONFIG) and serve
            batches shuffled over all of them every epoch, auto-sharding off. None: when ``shuffle`` and
            ``repeat`` (training), executing eagerly (not inside a traced dataset function) and the split's
            decoded images take at most :data:`IN_MEMORY_MAX_BYTES`.

    Returns:
        A dataset of ``(images, labels)``: images ``uint8 [B, H, W, C]`` (``H, W, C`` from the metadata),
        labels ``int64 [B]``; the last batch may be smaller (``B <= batch_size``) when ``repeat`` is False.

    Raises:
        FileNotFoundError / ValueError: from ``load_metadata``; KeyError: unknown split;
        ValueError: ``batch_size < 1``, ``max_examples < 1``, a ``shard`` that is out of range or given
            together with ``shard_policy``/``num_workers``, or ``in_memory=True`` in graph mode or with a
            ``shard_policy``.
    """
    import tensorflow as tf

    AutoShardPolicy = tf.data.experimental.AutoShardPolicy
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_examples is not None and max_examples < 1:
        raise ValueError(f"max_examples must be None or >= 1, got {max_examples}")
    meta = metadata if metadata is not None else load_metadata(data_dir)
    files = list(meta.files_for(split))
    counts = _take_counts(len(files), max_examples) if max_examples is not None else [-1] * len(files)
    data_shard: tuple[int, int] | None = None
    height, width, channels = meta.image_shape
    if in_memory is None:  # eager only: a dataset function traced in a graph (ParameterServerStrategy) cannot read
        in_memory = (shuffle and repeat and shard_policy is None and tf.executing_eagerly()
                     and meta.splits[split].num_examples * height * width * channels <= IN_MEMORY_MAX_BYTES)
    elif in_memory and not tf.executing_eagerly():
        raise ValueError("in_memory=True needs eager execution (it reads the data when called); inside a traced "
                         "dataset function (ParameterServerStrategy's per-worker datasets) pass in_memory=False")
    elif in_memory and shard_policy is not None:
        raise ValueError(f"in_memory=True keeps this worker's own part itself (auto-sharding off); leave out "
                         f"shard_policy={shard_policy}, or pass in_memory=False to stream with that policy")
    if in_memory and shard is None:
        workers = num_workers or num_workers_from_tf_config()
        if workers > 1:  # this worker's part, as the FILE or DATA auto-shard policy would give it
            shard, num_workers = (workers, worker_position_from_tf_config()), None
    if shard is not None:
        num_shards, index = shard
        if not 0 <= index < num_shards:
            raise ValueError(f"shard must be (num_shards, index) with 0 <= index < num_shards, got {shard}")
        if shard_policy is not None or num_workers is not None:
            raise ValueError("give either shard or shard_policy/num_workers, not both")
        shard_policy = AutoShardPolicy.OFF
        if len(files) >= num_shards:
            files, counts = files[index::num_shards], counts[index::num_shards]
        else:
            data_shard = shard
    if shard_policy is None:
        shard_policy = choose_shard_policy(len(files), num_workers or num_workers_from_tf_config())
    if in_memory:
        return _in_memory(tf, files, counts, data_shard, meta, batch_size=batch_size, seed=seed,
                          shuffle=shuffle, repeat=repeat)

    ds = tf.data.Dataset.from_tensor_slices((files, tf.constant(counts, tf.int64)))
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)

    def read(path: tf.Tensor, n: tf.Tensor) -> tf.data.Dataset:
        records = tf.data.TFRecordDataset(path).take(n)
        return records.shard(*data_shard) if data_shard is not None else records  # a partition per file

    ds = ds.interleave(
        read,
        cycle_length=min(len(files), 4),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not shuffle,
    )
    if shuffle:
        ds = ds.shuffle(SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=False)

    ds = ds.map(_parser(tf, height, width, channels), num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = shard_policy
    # No autotuning thread: destroying an iterator waits until that thread wakes up, and its sleep doubles
    # up to 60 s (TF 2.21), so fit/evaluate returned seconds after their last step (tfk8s.runtime.distribute).
    # AUTOTUNE above then takes TensorFlow's fixed defaults; the input still outruns the trainer >= 5x
    # (bench/input_headroom.py).
    options.autotune.enabled = False
    return ds.with_options(options)
