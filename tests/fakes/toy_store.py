"""A toy data set for the prepared-data store's tests (tests/core/test_data_store.py, tests/cmd/test_datasets.py):
a writer of three shards and a metadata.json, and a prepare of it under a run id."""

from __future__ import annotations

from pathlib import Path

from tfk8s.core import data_store

IDENTITY = {"dataset": "toy", "version": "1.0.0", "splits": ["train"], "max_examples": None, "num_shards": 3}


class Writer:
    """A ``write`` for :func:`data_store.prepare`: three shards and a metadata.json; counts its calls."""

    def __init__(self, fill: int = 7):
        self.calls, self.fill = 0, fill

    def __call__(self, folder: Path) -> None:
        self.calls += 1
        for i in range(3):
            (folder / f"train-{i:05d}-of-00003.tfrecord").write_bytes(bytes([self.fill + i]) * 150_000)
        (folder / "metadata.json").write_text('{"dataset": "toy"}\n')


def _prepare(volume: Path, run_id: str, writer: Writer, identity: dict = IDENTITY) -> data_store.Prepared:
    return data_store.prepare(volume, "toy", "1.0.0", identity, writer, run_id=run_id)

