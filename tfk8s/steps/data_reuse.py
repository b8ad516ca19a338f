"""The prepare step's reuse without TensorFlow: the store key's input (:func:`identity_of`), what a request
resolves to and the lookup of its key with no TFDS import (:func:`reuse_without_tfds`).

A second run of the same request (data set name, TFDS folder, TFDS version, splits, cap, shards) needs only
its key to reuse what the first prepared; that key is a digest of the TFDS files' identity and of values the
step already has. Only the name's resolution (``mnist`` -> its TFDS name, config, version and version folder)
needs TFDS, and the first run remembers it (:func:`tfk8s.core.data_store.remember_resolution`). So the reuse
costs milliseconds and no TensorFlow import, in a pod as under ``--local`` (where the step is first tried in
an interpreter without TensorFlow: :data:`REUSE_ONLY_ENV`). Standard library only (TensorFlow's file system
for a TFDS folder given as a URL, which the reuse without TFDS leaves to the full path).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from tfk8s.core.data_format import FORMAT_VERSION, join_path

WRITER_VERSION = 1
"""The writer's own version (part of every store key, :func:`tfk8s.steps.prepare_dataset.data_identity`): bump
it when :mod:`tfk8s.steps.prepare_dataset` writes different bytes for the same inputs without the format
(:data:`tfk8s.core.data_format.FORMAT_VERSION`) changing, so that no run reuses what the old writer prepared."""


def folder_identity(folder: str) -> dict:
    """:func:`tfk8s.steps.prepare_dataset.source_identity` of a TFDS version folder (a local path, or a URL
    read with ``tf.io.gfile``)."""
    info_name = "dataset_info.json"
    if "://" in folder:  # gs://...: TensorFlow's file system
        import tensorflow as tf

        names = sorted(tf.io.gfile.listdir(folder))
        files = [[n, tf.io.gfile.stat(join_path(folder, n)).length] for n in names
                 if not tf.io.gfile.isdir(join_path(folder, n))]
        with tf.io.gfile.GFile(join_path(folder, info_name), "rb") as f:
            info = f.read()
    else:
        root = Path(folder)
        files = [[p.name, p.stat().st_size] for p in sorted(root.iterdir()) if p.is_file()]
        info = (root / info_name).read_bytes()
    return {"dataset_info_sha256": hashlib.sha256(info).hexdigest(), "files": files}


def identity_of(dataset: str, config: str, version: str, source: dict, *, splits: Sequence[str],
                max_examples: int | None, num_shards: int) -> dict:
    """The store key's input (:func:`tfk8s.steps.prepare_dataset.data_identity`) from its parts: one function
    for the full path and the reuse without TFDS, so both compute the same key."""
    return {"dataset": dataset, "config": config, "version": version, "source": source, "splits": list(splits),
            "max_examples": max_examples, "num_shards": int(num_shards), "data_format": FORMAT_VERSION,
            "writer": WRITER_VERSION}


REUSE_ONLY_ENV = "TFK8S_PREPARE_REUSE_ONLY"
"""Set to ``1`` (the ``--local`` run's first try of the prepare step, in an interpreter without TensorFlow:
:mod:`tfk8s.localrun.step_output`): a request whose data is not in the store ends the step at once with exit
status :data:`REUSE_MISS_EXIT`, before TensorFlow is imported and before anything is written."""
REUSE_MISS_EXIT = 75  # EX_TEMPFAIL: "try again" (in the pre-warmed interpreter with TensorFlow)


def resolution_request(dataset_name: str, source: str | None) -> dict:
    """What resolves a data set's name to its TFDS folder: the name as given, the TFDS data directory
    (absolute; None: TFDS's default under the home folder) and TFDS's version (another TFDS may resolve a name
    without a version to another version). Standard library only (the version from the package's metadata)."""
    import importlib.metadata

    try:
        tfds_version = importlib.metadata.version("tensorflow-datasets")
    except importlib.metadata.PackageNotFoundError:
        tfds_version = ""
    where = (source if "://" in source else os.path.abspath(source)) if source else f"~{Path.home()}"
    return {"dataset_name": dataset_name, "tfds_data_dir": where, "tfds": tfds_version}


def reuse_without_tfds(volume_root: str, request: dict, *, splits: Sequence[str], max_examples: int | None,
                        num_shards: int):
    """The store's folder for ``request`` found with no TFDS or TensorFlow import: the resolution an earlier
    run remembered (:func:`tfk8s.core.data_store.recall_resolution`) gives the data set's name, config,
    version and TFDS folder; the key is computed from that folder's files now (:func:`folder_identity`), so
    changed files give another key. Returns ``(name, Prepared)``, or None (never resolved, files gone or
    changed, a URL, no intact folder): then the full path runs."""
    from tfk8s.core import data_store

    resolved = data_store.recall_resolution(volume_root, request)
    if not resolved or "://" in str(resolved.get("source_dir", "://")):
        return None
    try:
        source = folder_identity(str(resolved["source_dir"]))
        identity = identity_of(str(resolved["dataset"]), str(resolved["config"]), str(resolved["version"]),
                               source, splits=splits, max_examples=max_examples, num_shards=num_shards)
        done = data_store.reuse(volume_root, str(resolved["name"]), str(resolved["version"]), identity)
    except (OSError, KeyError, ValueError):
        return None
    return (str(resolved["name"]), done) if done is not None else None
