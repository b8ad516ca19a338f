"""The prepared-data format: what the prepare step writes and every reader expects (format version 1).

A prepared data folder holds::

    <split>-<i:05d>-of-<n:05d>.tfrecord   n = the shard count, one set per split
    metadata.json                         :class:`DatasetMetadata`; written last

Each record is a serialised ``tf.train.Example`` with two features:

- ``image``: bytes_list of one element, the raw C-order uint8 bytes of the ``H x W x C`` array
  (``numpy.ndarray.tobytes()``; decode with ``tf.io.decode_raw(..., tf.uint8)`` and reshape to
  ``metadata.image_shape``);
- ``label``: int64_list of one element, the class index in ``[0, num_classes)``.

Examples go to the shards **round-robin**: the source example ``j`` (in TFDS order) is record ``j // n`` of
shard ``j % n``, so every shard holds ``floor(N/n)`` or ``ceil(N/n)`` examples and a uniform sample of the
source order. The writer is :mod:`tfk8s.steps.prepare_dataset`, the one reader :mod:`tfk8s.runtime.shards`.
Plain Python (standard library only), so the trainer checks its arguments before TensorFlow starts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

FORMAT_VERSION = 1
METADATA_FILE = "metadata.json"
SHARD_SUFFIX = ".tfrecord"
FORMAT_NAME = "tfk8s"  # inspect_data_dir's "format" of a folder in this format (beside "tf.data snapshot", "tfrecord")
SNAPSHOT_MARKERS = ("dataset_spec.pb", "snapshot.metadata")  # what tf.data.Dataset.save / snapshot write


@dataclass(frozen=True)
class SplitMetadata:
    """One split of a prepared data set.

    Attributes:
        num_examples: number of examples over all files.
        files: shard file names, relative to the metadata's directory, in shard order.
    """

    num_examples: int
    files: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", tuple(self.files))


@dataclass(frozen=True)
class DatasetMetadata:
    """What ``metadata.json`` says about a prepared data set (format version 1).

    Layout::

        {"format_version": 1, "dataset": "mnist", "version": "3.0.1", "image_shape": [28, 28, 1],
         "image_dtype": "uint8", "num_classes": 10, "label_names": ["0", ..., "9"],
         "splits": {"train": {"num_examples": 60000, "files": ["train-00000-of-00004.tfrecord", ...]},
                    "test": {...}}}

    Attributes:
        dataset: the TFDS name. version: the TFDS version. image_shape: ``(H, W, C)``.
        image_dtype: always ``"uint8"`` in format 1. num_classes / label_names: from the TFDS ``ClassLabel``.
        splits: split name -> :class:`SplitMetadata`.
        base_dir: the directory the file names are relative to (set by :func:`load_metadata` /
            :func:`prepare_dataset`; not serialised).
    """

    dataset: str
    version: str
    image_shape: tuple[int, int, int]
    num_classes: int
    label_names: tuple[str, ...]
    splits: dict[str, SplitMetadata]
    image_dtype: str = "uint8"
    base_dir: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "image_shape", tuple(int(d) for d in self.image_shape))
        object.__setattr__(self, "label_names", tuple(self.label_names))

    def to_json(self) -> str:
        """Serialise as the ``metadata.json`` text (format version 1, ``base_dir`` left out)."""
        doc = {
            "format_version": FORMAT_VERSION,
            "dataset": self.dataset,
            "version": self.version,
            "image_shape": list(self.image_shape),
            "image_dtype": self.image_dtype,
            "num_classes": self.num_classes,
            "label_names": list(self.label_names),
            "splits": {
                name: {"num_examples": s.num_examples, "files": list(s.files)} for name, s in self.splits.items()
            },
        }
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, base_dir: str | None = None) -> DatasetMetadata:
        """Parse ``metadata.json`` text.

        Raises:
            ValueError: if the text is not JSON, its ``format_version`` is not 1, or a key is missing.
        """
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"metadata is not valid JSON: {e}") from e
        version = doc.get("format_version") if isinstance(doc, dict) else None
        if version != FORMAT_VERSION:
            raise ValueError(
                f"unknown metadata format_version {version!r} (this code reads {FORMAT_VERSION}): "
                "re-run the prepare-dataset step with this version of tfk8s"
            )
        try:
            return cls(
                dataset=doc["dataset"],
                version=str(doc["version"]),
                image_shape=tuple(doc["image_shape"]),
                image_dtype=doc["image_dtype"],
                num_classes=int(doc["num_classes"]),
                label_names=tuple(doc["label_names"]),
                splits={
                    name: SplitMetadata(int(s["num_examples"]), tuple(s["files"]))
                    for name, s in doc["splits"].items()
                },
                base_dir=base_dir,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"metadata lacks or has a malformed key: {e!r}") from e

    def files_for(self, split: str) -> list[str]:
        """Absolute paths of ``split``'s shard files, in shard order.

        Raises:
            KeyError: if the split was not prepared (the message lists the prepared ones).
            ValueError: if the metadata has no ``base_dir`` (it was not loaded from a directory).
        """
        if split not in self.splits:
            raise KeyError(f"split {split!r} was not prepared; prepared splits: {sorted(self.splits)}")
        if self.base_dir is None:
            raise ValueError("metadata has no base_dir: load it with load_metadata(data_dir)")
        return [join_path(self.base_dir, f) for f in self.splits[split].files]


def join_path(base: str, name: str) -> str:
    """``name`` under ``base``: a URL (``gs://...``) is joined with ``/``, a local path made absolute."""
    if "://" in base:  # gs://..., keep as a URL
        return base.rstrip("/") + "/" + name
    return os.path.join(os.path.abspath(base), name)


def load_metadata(data_dir: str | os.PathLike, read_text: Callable[[str], str] | None = None) -> DatasetMetadata:
    """Read ``<data_dir>/metadata.json`` (written by the prepare step).

    Args:
        read_text: reads a file by path and returns its text, raising FileNotFoundError when it is missing;
            default: the local file system. A URL (``gs://...``) needs one (``tf.io.gfile``'s:
            :func:`tfk8s.runtime.shards.load_metadata`).

    Raises:
        FileNotFoundError: if the file does not exist (the message says to run the prepare step).
        ValueError: if it is malformed or of an unknown ``format_version``, or a URL without ``read_text``.
    """
    data_dir = os.fspath(data_dir)
    path = join_path(data_dir, METADATA_FILE)
    if read_text is None and "://" in data_dir:
        raise ValueError(f"{path} is a URL: read it with tfk8s.runtime.shards.load_metadata (tf.io.gfile)")
    try:
        text = read_text(path) if read_text else Path(path).read_text()
    except FileNotFoundError:
        raise FileNotFoundError(_missing_metadata_msg(path)) from None
    try:
        return DatasetMetadata.from_json(text, base_dir=data_dir)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e


def _missing_metadata_msg(path: str) -> str:
    return (
        f"{path} not found: this is not a prepared data set directory; "
        "run the prepare-dataset step (tfk8s.steps.prepare_dataset.prepare_dataset) to create it"
    )


def shard_name(split: str, index: int, num_shards: int) -> str:
    """File name of shard ``index`` of ``num_shards``: ``<split>-<index:05d>-of-<num_shards:05d>.tfrecord``."""
    return f"{split}-{index:05d}-of-{num_shards:05d}{SHARD_SUFFIX}"


def resolve_data_dir(data_dir: str, volume_root: str) -> str:
    """A user's ``data_dir``: absolute as given, else relative to the volume root (where it lives in a cluster)."""
    path = Path(data_dir)
    return str(path if path.is_absolute() else Path(volume_root) / path)


def inspect_data_dir(data_dir: str | os.PathLike) -> dict:
    """Check a data folder before any replica reads it, and describe it.

    Accepted layouts: what :func:`prepare_dataset` writes (``metadata.json`` + the shard files it lists, each
    present and non-empty); a ``tf.data`` snapshot (``tf.data.Dataset.save``: ``dataset_spec.pb`` or
    ``snapshot.metadata``); any folder holding ``*.tfrecord*`` files (a user's own TFRecords, read by the
    user's program).

    Returns:
        For ``metadata.json``: the metadata as a dict plus ``path`` and ``format: "tfk8s"``. Otherwise
        ``{"path", "format": "tf.data snapshot" | "tfrecord", "dataset": <folder name>, "splits": {}}``.

    Raises:
        ValueError: the folder is missing, not a folder, empty, of no accepted layout, or its metadata.json is
            malformed or names missing / empty shard files; the message names the path and the fix.
    """
    path = Path(data_dir)
    fix = ("prepare it on the volume: TFRecords + metadata.json (as the prepare step writes them, "
           "tfk8s.steps.prepare_dataset.prepare_dataset), or a tf.data snapshot (tf.data.Dataset.save); or leave data_dir "
           "empty to prepare dataset_name")
    if not path.exists():
        raise ValueError(f"data_dir {path} does not exist: {fix}")
    if not path.is_dir():
        raise ValueError(f"data_dir {path} is not a folder: {fix}")
    entries = [p for p in path.iterdir() if not p.name.startswith(".")]
    if not entries:
        raise ValueError(f"data_dir {path} is empty: {fix}")
    if (path / METADATA_FILE).is_file():
        try:
            md = load_metadata(path)
        except ValueError as e:
            raise ValueError(f"data_dir {path}: {e}") from None
        for split in md.splits:
            bad = [f for f in md.files_for(split) if not Path(f).is_file() or Path(f).stat().st_size == 0]
            if bad:
                raise ValueError(f"data_dir {path}: metadata.json lists {len(bad)} missing or empty shard files "
                                 f"of split {split!r}, e.g. {bad[0]}: re-run the preparation, or fix metadata.json")
        return {**json.loads(md.to_json()), "path": str(path), "format": FORMAT_NAME}
    if any((path / m).exists() for m in SNAPSHOT_MARKERS):
        return {"path": str(path), "format": "tf.data snapshot", "dataset": path.name, "splits": {}}
    if any(p.is_file() and ".tfrecord" in p.name for p in path.rglob("*")):
        return {"path": str(path), "format": "tfrecord", "dataset": path.name, "splits": {}}
    raise ValueError(f"data_dir {path} holds neither metadata.json, a tf.data snapshot nor TFRecord files "
                     f"(it has {sorted(p.name for p in entries)[:5]}): {fix}")
