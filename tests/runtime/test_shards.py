"""The reader of the prepared shards (tfk8s.runtime.shards): element spec, auto-shard policy, explicit per-worker shards,
the first-N-examples cap; on a real MNIST subset."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import SUBSET_EXAMPLES
from tests.trainer.test_task import _tf_config

# --- input pipeline ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("num_files", "num_workers", "policy"),
    [(4, 2, "FILE"), (2, 2, "FILE"), (7, 1, "FILE"), (1, 2, "DATA"), (3, 4, "DATA")],
)
def test_shard_policy_is_file_when_every_worker_gets_a_file_else_data(num_files, num_workers, policy):
    from tfk8s.runtime.shards import AutoShardPolicy, choose_shard_policy

    assert choose_shard_policy(num_files, num_workers) == getattr(AutoShardPolicy, policy)


def test_shard_policy_rejects_zero_files_or_workers():
    from tfk8s.runtime.shards import choose_shard_policy

    with pytest.raises(ValueError, match="num_files and num_workers"):
        choose_shard_policy(0, 2)


def test_make_dataset_sets_the_policy_for_the_workers_in_tf_config(mnist_subset_dir, monkeypatch):
    from tfk8s.runtime.shards import AutoShardPolicy, make_dataset

    def policy(**kwargs):
        ds = make_dataset(str(mnist_subset_dir), "train", batch_size=8, shuffle=True, repeat=True, in_memory=False,
                          **kwargs)
        return ds.options().experimental_distribute.auto_shard_policy

    monkeypatch.setenv("TF_CONFIG", _tf_config(2, 0))
    assert policy() == AutoShardPolicy.FILE  # 7 files, 2 workers
    monkeypatch.setenv("TF_CONFIG", _tf_config(8, 3))
    assert policy() == AutoShardPolicy.DATA  # 7 files, 8 workers: FILE would leave a worker without data
    assert policy(num_workers=3) == AutoShardPolicy.FILE
    assert policy(shard_policy=AutoShardPolicy.OFF) == AutoShardPolicy.OFF
    monkeypatch.delenv("TF_CONFIG")
    assert policy() == AutoShardPolicy.FILE


def test_make_dataset_yields_uint8_image_batches_and_int64_labels_covering_the_split_once(mnist_subset_dir):
    from tfk8s.runtime.shards import make_dataset

    batches = list(make_dataset(str(mnist_subset_dir), "test", batch_size=512, shuffle=False, repeat=False))
    images, labels = batches[0]
    assert images.dtype.name == "uint8" and tuple(images.shape) == (512, 28, 28, 1)
    assert labels.dtype.name == "int64" and tuple(labels.shape) == (512,)
    assert [int(b[1].shape[0]) for b in batches] == [512] * 5 + [SUBSET_EXAMPLES - 5 * 512]
    all_labels = np.concatenate([b[1].numpy() for b in batches])
    assert set(all_labels.tolist()) == set(range(10))
    assert int(np.max(batches[0][0].numpy())) == 255  # raw pixels, not rescaled


def test_unshuffled_dataset_is_deterministic_and_shuffled_one_is_not(mnist_subset_dir):
    from tfk8s.runtime.shards import make_dataset

    def first_labels(shuffle, seed=None):
        ds = make_dataset(str(mnist_subset_dir), "train", batch_size=64, shuffle=shuffle, repeat=False, seed=seed)
        return next(iter(ds))[1].numpy().tolist()

    assert first_labels(False) == first_labels(False)
    assert first_labels(True, seed=1) != first_labels(True, seed=2)


@pytest.mark.parametrize(("num_files", "n"), [(7, 100), (7, 3), (4, 4000), (1, 10), (3, 1)])
def test_max_examples_reads_exactly_the_first_examples_of_the_round_robin_shards(num_files, n):
    from tfk8s.runtime.shards import _take_counts

    counts = _take_counts(num_files, n)
    assert sum(counts) == n
    # example j sits at position j // num_files of shard j % num_files; the first n are taken per file
    for i, c in enumerate(counts):
        assert c == len([j for j in range(n) if j % num_files == i])


def test_max_examples_caps_the_dataset_to_the_first_source_examples(mnist_subset_dir, mnist_tfds_data_dir):
    import tensorflow_datasets as tfds

    from tfk8s.runtime.shards import make_dataset

    ds = make_dataset(str(mnist_subset_dir), "train", batch_size=1000, shuffle=True, repeat=False,
                      max_examples=100, seed=0)
    got = sorted((int(lbl), img.tobytes()) for x, y in ds.as_numpy_iterator() for img, lbl in zip(x, y))
    src = tfds.load("mnist", split="train[:100]", data_dir=mnist_tfds_data_dir, download=False)
    want = sorted((int(ex["label"]), ex["image"].tobytes()) for ex in tfds.as_numpy(src))
    assert got == want


# --- per-worker input pipelines ----------------------------------------------------------------------------------

def _examples(ds) -> list[tuple[int, bytes]]:
    return sorted((int(lbl), img.tobytes()) for x, y in ds.as_numpy_iterator() for img, lbl in zip(x, y))


@pytest.mark.parametrize("num_shards", [2, 3, 8])  # 7 files: 2 and 3 shard by file, 8 by record
def test_explicit_shards_partition_the_examples_and_turn_auto_sharding_off(mnist_subset_dir, num_shards):
    from tfk8s.runtime.shards import AutoShardPolicy, make_dataset

    def dataset(**kwargs):
        return make_dataset(str(mnist_subset_dir), "train", batch_size=128, shuffle=True, repeat=False,
                            max_examples=500, seed=0, **kwargs)

    shards = [dataset(shard=(num_shards, i)) for i in range(num_shards)]
    parts = [_examples(ds) for ds in shards]
    assert all(parts), [len(p) for p in parts]  # every worker gets data
    assert sorted(ex for part in parts for ex in part) == _examples(dataset())  # together: all 500, once each
    assert {ds.options().experimental_distribute.auto_shard_policy for ds in shards} == {AutoShardPolicy.OFF}


def test_explicit_shard_rejects_a_bad_index_or_a_second_sharding_setting(mnist_subset_dir):
    from tfk8s.runtime.shards import AutoShardPolicy, make_dataset

    with pytest.raises(ValueError, match="0 <= index < num_shards"):
        make_dataset(str(mnist_subset_dir), "train", batch_size=8, shuffle=False, repeat=False, shard=(2, 2))
    with pytest.raises(ValueError, match="not both"):
        make_dataset(str(mnist_subset_dir), "train", batch_size=8, shuffle=False, repeat=False, shard=(2, 0),
                     num_workers=2)
    with pytest.raises(ValueError, match=r"in_memory=True keeps this worker's own part itself .* leave out "
                                         r"shard_policy=.*in_memory=False"):
        make_dataset(str(mnist_subset_dir), "train", batch_size=8, shuffle=True, repeat=True, in_memory=True,
                     shard_policy=AutoShardPolicy.FILE)




def test_under_file_auto_sharding_each_worker_reads_only_its_own_shard_files(mnist_subset_dir):
    """What MultiWorkerMirroredStrategy does with the dataset (tf.distribute's auto_shard_dataset, the rewrite it
    applies per worker): with FILE, worker i of 2 reads files i, i+2, ... of the 7; together every example once."""
    from tensorflow.python.distribute.input_ops import auto_shard_dataset

    from tfk8s.runtime.shards import make_dataset

    ds = make_dataset(str(mnist_subset_dir), "train", batch_size=100, shuffle=False, repeat=False, num_workers=2)
    parts = [_examples(auto_shard_dataset(ds, 2, i, 2)) for i in range(2)]
    per_file = [SUBSET_EXAMPLES // 7 + (1 if i < SUBSET_EXAMPLES % 7 else 0) for i in range(7)]
    assert [len(p) for p in parts] == [sum(per_file[0::2]), sum(per_file[1::2])]  # 4 files and 3 files
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == _examples(ds)


def _first_examples(ds, n: int) -> list[tuple[int, bytes]]:
    """The first ``n`` examples ``ds`` yields, in order, as ``_examples`` gives them (label, image bytes)."""
    out: list[tuple[int, bytes]] = []
    for images, labels in ds:
        out += [(int(lb), im.tobytes()) for im, lb in zip(images.numpy(), labels.numpy(), strict=True)]
        if len(out) >= n:
            return out[:n]
    return out


def test_a_small_training_split_is_served_from_memory_each_epoch_a_new_order_of_every_example(mnist_subset_dir):
    from tfk8s.runtime.shards import AutoShardPolicy, make_dataset

    streamed = _examples(make_dataset(str(mnist_subset_dir), "train", batch_size=100, shuffle=False, repeat=False))
    ds = make_dataset(str(mnist_subset_dir), "train", batch_size=64, shuffle=True, repeat=True, seed=1)
    assert ds.options().experimental_distribute.auto_shard_policy == AutoShardPolicy.OFF  # in memory: decided
    two_epochs = _first_examples(ds, 2 * len(streamed))
    first, second = two_epochs[:len(streamed)], two_epochs[len(streamed):]
    assert sorted(first) == streamed and sorted(second) == streamed  # every example once per epoch
    assert first != second  # reshuffled every epoch


def test_in_memory_each_worker_of_tf_config_keeps_only_its_part(mnist_subset_dir, monkeypatch):
    from tfk8s.runtime.shards import make_dataset

    streamed = _examples(make_dataset(str(mnist_subset_dir), "train", batch_size=100, shuffle=False, repeat=False))
    parts = []
    for index in range(2):
        monkeypatch.setenv("TF_CONFIG", _tf_config(2, index))
        ds = make_dataset(str(mnist_subset_dir), "train", batch_size=50, shuffle=True, repeat=True, seed=0)
        part = _first_examples(ds, len(streamed))  # more than a worker's part: wraps to its next epoch
        parts.append(set(part))
    per_file = [SUBSET_EXAMPLES // 7 + (1 if i < SUBSET_EXAMPLES % 7 else 0) for i in range(7)]
    assert [len(p) for p in parts] == [sum(per_file[0::2]), sum(per_file[1::2])]  # files 0,2,4,6 and 1,3,5
    assert not parts[0] & parts[1] and sorted(parts[0] | parts[1]) == streamed
