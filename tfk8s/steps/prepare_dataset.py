"""The prepare step: a TFDS image-classification data set -> sharded TFRecord files + ``metadata.json`` on the
volume (the format: :mod:`tfk8s.core.data_format`), or a check of the folder the user prepared.

Examples go to the shards round-robin in TFDS order (``shuffle_files=False``), so no shard gets, say, only the
last digits of a sorted source. TensorFlow and TensorFlow Datasets are imported lazily. No KFP import: the
component (``components/prepare_dataset.py``) calls :func:`prepare_dataset_step`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from tfk8s.core.data_format import (
    METADATA_FILE,
    SHARD_SUFFIX,
    DatasetMetadata,
    SplitMetadata,
    inspect_data_dir,
    join_path,
    load_metadata,
    resolve_data_dir,
    shard_name,
)
from tfk8s.steps.bucket_data import prepare_from_bucket
from tfk8s.steps.data_reuse import (
    REUSE_MISS_EXIT,
    REUSE_ONLY_ENV,
    folder_identity,
    identity_of,
    resolution_request,
    reuse_without_tfds,
)
from tfk8s.steps.stop_signals import stop_if_asked, stops_between_batches

# Host probed before a download: TFDS fetches MNIST and most image data sets from Google Cloud Storage.
_PROBE_HOST = ("storage.googleapis.com", 443)
_PROBE_TIMEOUT_S = 5.0
_FIX_HINT = (
    "point the pipeline parameter tfds_data_dir (CLI: --tfds-data-dir, or the env var TFDS_DATA_DIR) at a TFDS "
    "data directory that holds it, e.g. ../shared/data/tensorflow_datasets, or run with tfds_download=true "
    "(--download true; the pipeline's default) on a machine with network access"
)


class DatasetUnavailableError(ValueError):
    """The requested data set is not in the TFDS data directory and cannot be downloaded.

    The message names the data set, the directory searched and how to fix it.
    """


def default_tfds_data_dir() -> str | None:
    """The TFDS data directory to read from when none is given.

    Returns:
        ``$TFDS_DATA_DIR`` if set (and non-empty); else the repository's ``../shared/data/tensorflow_datasets``
        (computed from this file's location: ``<repo>/tfk8s/steps/prepare_dataset.py`` -> ``<repo>/../shared/...``)
        if that directory exists; else None, meaning TFDS's own default (``~/tensorflow_datasets``).
    """
    env = os.environ.get("TFDS_DATA_DIR")
    if env:
        return env
    shared = Path(__file__).resolve().parents[3] / "shared/data/tensorflow_datasets"
    return str(shared) if shared.is_dir() else None


def _network_reachable(timeout_s: float = _PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the download host opens within ``timeout_s`` (DNS included).

    Runs in a daemon thread because ``getaddrinfo`` has no timeout of its own.
    """
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection(_PROBE_HOST, timeout=timeout_s):
                result.append(True)
        except OSError:
            result.append(False)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout_s + 0.5)
    return bool(result and result[0])


def _check_features(name: str, features) -> tuple[tuple[int, int, int], int, tuple[str, ...]]:
    import numpy as np
    import tensorflow_datasets as tfds

    keys = sorted(features.keys()) if hasattr(features, "keys") else []
    image, label = (features[k] if k in keys else None for k in ("image", "label"))
    # A wrong feature set is a bad data-set name (ValueError, as the contract says), not a caller type bug.
    supported = isinstance(image, tfds.features.Image) and isinstance(label, tfds.features.ClassLabel)
    if not supported:
        raise ValueError(
            f"data set {name!r} has features {keys}: prepare_dataset needs an 'image' Image feature and a "
            "'label' ClassLabel feature (an image-classification data set such as mnist or fashion_mnist)"
        )
    shape, dtype = tuple(image.shape), np.dtype(image.np_dtype).name
    if len(shape) != 3 or any(d is None for d in shape) or dtype != "uint8":
        raise ValueError(
            f"data set {name!r} has images of shape {shape} and dtype {dtype}: "
            "prepare_dataset needs a fixed (H, W, C) uint8 shape"
        )
    return shape, int(label.num_classes), tuple(label.names)


def _versions_found(data_dir: str | None, name: str) -> list[str]:
    if not data_dir or "://" in data_dir:
        return []
    try:
        return sorted(p.name for p in (Path(data_dir) / name).iterdir() if p.is_dir())
    except OSError:
        return []


def _unknown_name(name: str, tfds_data_dir: str | None) -> ValueError:
    where = f"nor in tfds_data_dir {tfds_data_dir}" if tfds_data_dir else "and tfds_data_dir is empty"
    return ValueError(
        f"unknown TFDS data set {name!r}: not in the TFDS catalog (https://www.tensorflow.org/datasets/catalog, "
        f"e.g. mnist) {where}; fix dataset_name, point tfds_data_dir at a TFDS data directory holding it, or set "
        f"tfds_download=true for a catalog data set")


def check_dataset(name: str, tfds_data_dir: str | None = None, download: bool = False, *, local: bool = True):
    """Check that data set ``name`` can be prepared, before any step runs; returns its TFDS builder (None when
    not ``local``).

    Args:
        name: TFDS name, optionally ``name:version``.
        tfds_data_dir: the TFDS data directory (None: TFDS's default).
        download: whether the prepare step may download it.
        local: the data directory is on this machine (``--local``, the prepare step). False (``--run``: the
            directory is a path in the cluster): only the name is checked against the TFDS catalog, and a name
            outside it passes when ``tfds_data_dir`` is set (it may hold it).

    Raises:
        ValueError: an empty name, an unknown name (neither in the catalog nor in ``tfds_data_dir``; the message
            names ``tfds_data_dir`` and ``tfds_download``), or (``local``) a data set without image/label features.
        DatasetUnavailableError: ``local`` and the data set is not in the directory, and ``download`` is False or
            the network is unreachable (within seconds).
    """
    if not (name or "").strip():  # TFDS would answer with its whole help on names
        raise ValueError("dataset_name is empty: name a TFDS image-classification data set (e.g. --param "
                         "dataset_name=mnist), or pass data_dir, a folder you prepared")
    import tensorflow_datasets as tfds

    if not local:
        try:
            tfds.builder_cls(name.split(":", 1)[0])
        except tfds.core.registered.DatasetNotFoundError:
            if not tfds_data_dir:
                raise _unknown_name(name, tfds_data_dir) from None
        return None
    try:
        builder = tfds.builder(name, data_dir=tfds_data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        raise _unknown_name(name, tfds_data_dir) from None
    _check_features(name, builder.info.features)  # an image-classification data set, before its availability
    searched = tfds_data_dir or "TFDS's default data directory"
    if not builder.is_prepared():
        found = _versions_found(tfds_data_dir, builder.name)
        where = (
            f"{builder.name} not found in data_dir {searched} (looked for {builder.data_dir}"
            + (f"; versions present: {found}" if found else "")
            + ")"
        )
        if not download:
            raise DatasetUnavailableError(f"data set {name!r} is not available offline: {where}; {_FIX_HINT}")
        if not _network_reachable():
            raise DatasetUnavailableError(
                f"data set {name!r} cannot be downloaded: the network is unreachable "
                f"({_PROBE_HOST[0]}:{_PROBE_HOST[1]} did not answer within {_PROBE_TIMEOUT_S:.0f} s) and {where}; "
                f"{_FIX_HINT}"
            )
    return builder


def prepare_dataset(
    name: str,
    output_dir: str | os.PathLike,
    *,
    tfds_data_dir: str | None = None,
    num_shards: int,
    splits: Sequence[str] = ("train", "test"),
    max_examples: int | None = None,
    download: bool = False,
) -> DatasetMetadata:
    """Write TFDS data set ``name`` as round-robin TFRecord shards plus ``metadata.json`` (see module doc).

    Args:
        name: TFDS name, optionally with a version (``"mnist"``, ``"mnist:3.0.1"``); must have an ``image``
            (fixed-shape uint8) and a ``label`` (ClassLabel) feature.
        output_dir: directory to write into (created if missing). Our earlier shard files of the same splits
            and ``metadata.json`` in it are replaced; other files are left alone.
        tfds_data_dir: TFDS data directory to read from (any folder holding ``<name>/<version>/`` in TFDS
            format, e.g. local files copied from another machine); None: TFDS's default (``$TFDS_DATA_DIR`` or
            ``~/tensorflow_datasets``). Callers usually pass :func:`default_tfds_data_dir`.
        num_shards: files per split, >= 1. Use at least the number of training workers so that each worker
            reads whole files (``AutoShardPolicy.FILE``).
        splits: plain TFDS split names to write (no slicing syntax such as ``train[:10%]``).
        max_examples: keep only the first ``max_examples`` examples (TFDS order) of each split; None: all.
        download: let TFDS download and prepare the data set if it is missing. Checked first with a TCP probe
            of ``storage.googleapis.com:443`` (5 s), because offline TFDS retries for ~200 s before failing.

    Returns:
        The written metadata, with ``base_dir`` set to ``output_dir``.

    Raises:
        ValueError: ``num_shards < 1``, ``max_examples < 1``, no or unknown split names, an unknown data set
            name, or a data set without image/label features.
        DatasetUnavailableError: the data set is not in the data directory and ``download`` is False or the
            network is unreachable (raised within seconds).

    Atomicity: shards are written under temporary names and renamed; ``metadata.json`` is deleted first and
    written last (temp file + rename), so it never points at missing or partial shards.
    Full MNIST (70,000 examples) takes 9-12 s on 2 shared CPU cores; about 6 s of it is TFDS decoding the
    stored PNGs, under 1 s is serialising the records.
    """
    if not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"num_shards must be an integer >= 1, got {num_shards!r}")
    if max_examples is not None and (not isinstance(max_examples, int) or max_examples < 1):
        raise ValueError(f"max_examples must be None or an integer >= 1, got {max_examples!r}")
    splits = [splits] if isinstance(splits, str) else list(splits)
    if not splits or len(set(splits)) != len(splits):
        raise ValueError(f"splits must be a non-empty list of distinct split names, got {splits!r}")
    for s in splits:
        if not isinstance(s, str) or not re.fullmatch(r"[A-Za-z0-9_]+", s):
            raise ValueError(f"split {s!r} must be a plain TFDS split name such as 'train' or 'test'")

    builder = check_dataset(name, tfds_data_dir, download)
    image_shape, num_classes, label_names = _check_features(name, builder.info.features)
    if not builder.is_prepared():
        builder.download_and_prepare()

    available = set(builder.info.splits.keys())
    unknown = [s for s in splits if s not in available]
    if unknown:
        raise ValueError(f"unknown split(s) {unknown} for data set {name!r}; it has {sorted(available)}")

    import tensorflow as tf

    out = os.fspath(output_dir)
    tf.io.gfile.makedirs(out)
    meta_path = join_path(out, METADATA_FILE)
    if tf.io.gfile.exists(meta_path):
        tf.io.gfile.remove(meta_path)  # never leave old metadata beside half-rewritten shards

    split_meta: dict[str, SplitMetadata] = {}
    for split in splits:
        _remove_old_shards(out, split)
        count = _write_split(builder, split, out, num_shards, max_examples)
        split_meta[split] = SplitMetadata(count, tuple(shard_name(split, i, num_shards) for i in range(num_shards)))

    meta = DatasetMetadata(
        dataset=builder.name,
        version=str(builder.info.version),
        image_shape=image_shape,
        num_classes=num_classes,
        label_names=label_names,
        splits=split_meta,
        base_dir=out,
    )
    tmp = join_path(out, f".{METADATA_FILE}.tmp")
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(meta.to_json())
    tf.io.gfile.rename(tmp, meta_path, overwrite=True)
    return meta


def _remove_old_shards(out: str, split: str) -> None:
    import tensorflow as tf

    pattern = re.compile(rf"\.?{re.escape(split)}-\d{{5}}-of-\d{{5}}{re.escape(SHARD_SUFFIX)}(\.tmp)?")
    for fname in tf.io.gfile.listdir(out):
        if pattern.fullmatch(fname):
            tf.io.gfile.remove(join_path(out, fname))


def _serialize(images: Iterable, labels: Iterable) -> Iterable[bytes]:
    import tensorflow as tf

    Example, Features, Feature = tf.train.Example, tf.train.Features, tf.train.Feature
    BytesList, Int64List = tf.train.BytesList, tf.train.Int64List
    for image, label in zip(images, labels):
        yield Example(
            features=Features(
                feature={
                    "image": Feature(bytes_list=BytesList(value=[image.tobytes()])),
                    "label": Feature(int64_list=Int64List(value=[int(label)])),
                }
            )
        ).SerializeToString()


def _write_split(builder, split: str, out: str, num_shards: int, max_examples: int | None) -> int:
    """Write one split round-robin into ``num_shards`` files; returns the number of examples written."""
    import tensorflow as tf
    import tensorflow_datasets as tfds

    ds = builder.as_dataset(split=split, shuffle_files=False)
    if max_examples is not None:
        ds = ds.take(max_examples)
    ds = ds.batch(1024).prefetch(2)  # TFDS decodes the PNGs in parallel; we serialise in Python
    names = [shard_name(split, i, num_shards) for i in range(num_shards)]
    tmps = [join_path(out, f".{n}.tmp") for n in names]
    writers = [tf.io.TFRecordWriter(p) for p in tmps]
    count = 0
    try:  # a stop leaves .tmp shards: in the store's staging folder, removed; else the next preparation's
        for batch in tfds.as_numpy(ds):
            for record in _serialize(batch["image"], batch["label"]):
                writers[count % num_shards].write(record)
                count += 1
            stop_if_asked(f"writing the {split} split ({count:,} examples written)")
    finally:
        for w in writers:
            w.close()
    for tmp, n in zip(tmps, names):
        tf.io.gfile.rename(tmp, join_path(out, n), overwrite=True)
    return count


def _main(argv: Sequence[str] | None = None) -> None:  # pragma: no cover - manual timing helper
    import argparse

    p = argparse.ArgumentParser(description="Prepare a TFDS image data set as TFRecord shards (timing helper).")
    p.add_argument("--name", default="mnist")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--tfds-data-dir", default=default_tfds_data_dir())
    p.add_argument("--num-shards", type=int, default=4)
    p.add_argument("--max-examples", type=int, default=None)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    meta = prepare_dataset(a.name, a.output_dir, tfds_data_dir=a.tfds_data_dir, num_shards=a.num_shards,
                           max_examples=a.max_examples)
    n = sum(s.num_examples for s in meta.splits.values())
    print(f"wrote {n} examples in {time.perf_counter() - t0:.1f} s to {a.output_dir}")


if __name__ == "__main__":  # pragma: no cover
    _main()


SPLITS = ("train", "test")  # what the pipeline's prepare step writes


def source_identity(builder) -> dict:
    """What identifies the TFDS files a preparation reads: the sha256 of the version folder's
    ``dataset_info.json`` and every file's name and size (``<data_dir>/<name>/[<config>/]<version>/``).

    The same name and version can hold other examples: a TFDS download stores MNIST in hashed order, the
    shared copy in the original order (``../shared/data/README``), and a user's own files in a
    ``tfds_data_dir`` have whatever version their builder says. TFDS rewrites ``dataset_info.json`` (split
    sizes, byte counts, description) whenever it prepares the files; hashing it and listing the sizes costs
    milliseconds whatever the data set's size, where hashing the files themselves would read all of them
    (mtimes are left out on purpose: a nightly run that downloads the same version again must find its key).
    """
    return folder_identity(str(builder.data_dir))


def data_identity(builder, *, splits: Sequence[str], max_examples: int | None, num_shards: int) -> dict:
    """Everything that decides what :func:`prepare_dataset` writes for ``builder`` (the store key's input,
    :func:`tfk8s.core.data_store.data_key`): the data set, its config and TFDS version, the source files'
    identity (:func:`source_identity`), the splits in order, ``max_examples`` (None: all), the shard count,
    the format's version and :data:`tfk8s.steps.data_reuse.WRITER_VERSION`. Not in it: where the TFDS files are (a copy elsewhere is
    the same data) and the run."""
    config = getattr(builder, "builder_config", None)
    return identity_of(builder.name, getattr(config, "name", "") or "", str(builder.info.version),
                       source_identity(builder), splits=splits, max_examples=max_examples, num_shards=num_shards)


@stops_between_batches()
def prepare_dataset_step(
    *,
    dataset_name: str,
    tfds_data_dir: str,
    volume_root: str,
    run_id: str,
    num_shards: int,
    num_workers: int,
    max_examples: int,
    chief: int = 0,
    download: bool = True,
    data_dir: str = "",
    reuse_data: bool = True,
    data_uri: str = "",
    s3_endpoint: str = "",
) -> dict:
    """Prepare the data set in the volume's store (reusing a preparation of the same key), or check the user's
    ``data_dir``; writes the run's data record ``<volume_root>/runs/<run_id>/data.json``.

    With ``reuse_data`` the folder is ``<volume_root>/datasets/<data set>/<version>/<key>``, the key the digest
    of :func:`data_identity`: a run whose key is there and intact prepares nothing and says so ("reused data
    prepared by run X"), a second run of a key being prepared waits for it, a folder whose files were deleted
    or altered is prepared again (:mod:`tfk8s.core.data_store`). Without it the run prepares a fresh copy of
    its own in ``<volume_root>/runs/<run_id>/data`` and the store is left alone.

    Args:
        num_shards: shards per split; 0 chooses 4 per chief/worker replica (tf.data's FILE auto-shard policy
            needs at least as many files as readers).
        num_workers, chief: worker and chief replicas; together they read the shards.
        max_examples: cap per split (0: all), for smoke runs.
        download: let TFDS download the data set when it is not in the data directory (the default; offline it
            fails within seconds with the fix).
        data_dir: a folder the user prepared (TFRecords + metadata.json, or a ``tf.data`` snapshot), absolute
            or relative to ``volume_root``; when given nothing is prepared (:func:`tfk8s.steps.prepare_dataset.inspect_data_dir`).
        reuse_data: reuse the store's preparation of the same key (default); False: prepare a fresh copy.
        data_uri, s3_endpoint: a bucket prefix read into the store instead (:mod:`tfk8s.steps.bucket_data`).

    Returns:
        The metadata as a dict (see :class:`tfk8s.steps.prepare_dataset.DatasetMetadata`), plus ``path`` (the data folder);
        for a user's folder without metadata.json: ``dataset``, ``format``, ``path``, ``splits`` (may be empty).
        Prepared or reused data adds ``key`` ("" with ``reuse_data=false``), ``reused``, ``prepared_by`` (a run
        id) and ``data_record`` (the run's ``data.json``).

    SIGTERM or SIGINT while it prepares stops it after the batch being written (:func:`stops_between_batches`).

    Raises:
        ValueError: fewer shards than readers, no reader at all, or a user ``data_dir`` that is missing, empty
            or of no known layout (the message names it and the accepted layouts).
        tfk8s.core.errors.StepStoppedError: a stop signal came while it prepared; nothing was published.
        tfk8s.steps.prepare_dataset.DatasetUnavailableError: the data set is not there and cannot be downloaded.
        tfk8s.core.volume.VolumeWriteError: the volume cannot be written (read-only, full...).
    """
    from tfk8s.core import data_store
    from tfk8s.core.layout import RunLayout, VolumeLayout
    from tfk8s.core.volume import volume_writes

    if data_uri:
        return prepare_from_bucket(data_uri=data_uri, s3_endpoint=s3_endpoint, volume_root=volume_root,
                                   run_id=run_id, reuse_data=reuse_data, data_dir=data_dir)
    if data_dir:
        return inspect_data_dir(resolve_data_dir(data_dir, volume_root))
    readers = num_workers + chief
    if readers < 1:
        raise ValueError(f"num_workers + chief must be >= 1, got {readers}")
    shards = num_shards or 4 * readers
    if shards < readers:
        raise ValueError(
            f"num_shards={shards} < {readers} chief/worker replicas: each needs its own shard file"
        )
    source = tfds_data_dir or default_tfds_data_dir()
    cap = max_examples or None

    def write(out: str | os.PathLike) -> DatasetMetadata:
        return prepare_dataset(dataset_name, out, tfds_data_dir=source, num_shards=shards, max_examples=cap,
                               download=download)

    run = RunLayout(volume_root, run_id)
    if not reuse_data:
        out = run.data_dir
        with volume_writes(out, "the prepared data set"):
            md = write(out)
            record = {"path": str(out), "key": "", "reused": False, "prepared_by": run_id, "reuse_data": False}
            data_store.write_data_record(volume_root, run_id, record)
        print(f"tfk8s: prepared a fresh copy of the data (reuse_data=false) into {out}", flush=True)
        return {**json.loads(md.to_json()), **record, "data_record": str(run.data_record)}

    t0 = time.perf_counter()
    request = resolution_request(dataset_name, source)
    fast = reuse_without_tfds(volume_root, request, splits=SPLITS, max_examples=cap, num_shards=shards)
    if fast is None and os.environ.get(REUSE_ONLY_ENV) == "1":
        raise SystemExit(REUSE_MISS_EXIT)  # not in the store: the caller runs the step again with TensorFlow
    if fast is not None:
        done = fast[1]
        with volume_writes(done.path, "the run's data record"):
            record = {"path": str(done.path), "key": done.key, "reused": True, "prepared_by": done.prepared_by,
                      "reuse_data": True}
            data_store.write_data_record(volume_root, run_id, record)
        print(f"tfk8s: {done.message()} ({time.perf_counter() - t0:.2f}s)", flush=True)
        return {**json.loads(load_metadata(done.path).to_json()), **record, "data_record": str(run.data_record)}
    builder = check_dataset(dataset_name, source, download)
    if not builder.is_prepared():  # its files decide the key: download them first
        builder.download_and_prepare()
    identity = data_identity(builder, splits=SPLITS, max_examples=cap, num_shards=shards)
    config = identity["config"]
    name = builder.name + (f".{config}" if config else "")
    base = VolumeLayout(volume_root).dataset_base(name, identity["version"])
    with volume_writes(base, "the prepared data set"):
        done = data_store.prepare(volume_root, name, identity["version"], identity, write, run_id=run_id,
                                  say=lambda line: print(f"tfk8s: {line}", flush=True))
        record = {"path": str(done.path), "key": done.key, "reused": done.reused, "prepared_by": done.prepared_by,
                  "reuse_data": True}
        data_store.write_data_record(volume_root, run_id, record)
        if "://" not in str(builder.data_dir):  # the next run of this request finds its key without TFDS
            data_store.remember_resolution(volume_root, request, {
                "name": name, "dataset": builder.name, "config": config, "version": identity["version"],
                "source_dir": str(builder.data_dir)})
    took = f" ({time.perf_counter() - t0:.2f}s)" if done.reused else ""
    print(f"tfk8s: {done.message()}{took}", flush=True)
    md = load_metadata(done.path)
    return {**json.loads(md.to_json()), **record, "data_record": str(run.data_record)}
