"""The prepare step's bucket source (``data_uri``): the objects under an S3 prefix read into the volume's prepared-data
store (:mod:`tfk8s.core.data_store`), keyed by their ETags and sizes, so that an unchanged prefix costs one listing
and a changed one is read anew; the folder is checked as a ``data_dir`` is before it is published. The S3 calls:
:mod:`tfk8s.steps.s3`.
"""

from __future__ import annotations

import os
import re
import time

from tfk8s.core.data_format import inspect_data_dir
from tfk8s.steps.stop_signals import stop_if_asked

BUCKET_WRITER_VERSION = 1
"""Part of every bucket preparation's key: bump it when :func:`prepare_from_bucket` writes other files for the
same objects."""


def bucket_identity(objects) -> dict:
    """The store key's input for a bucket prefix: its objects' keys, ETags and sizes
    (:func:`tfk8s.steps.s3.content_identity`) and the writer's version; not the bucket, prefix or endpoint."""
    from tfk8s.steps.s3 import content_identity

    return {"source": content_identity(objects), "writer": BUCKET_WRITER_VERSION, "kind": "bucket"}


def bucket_folder(uri) -> tuple[str, str]:
    """``(data set, version)`` folder names of the store for a bucket prefix: ``s3.<bucket>`` and the prefix with
    ``/`` as ``.`` (``_`` for the whole bucket), each cut to one path segment."""
    def segment(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:120] or "_"

    return segment(f"s3.{uri.bucket}"), segment(uri.prefix.strip("/").replace("/", ".")) if uri.prefix else "_"


def prepare_from_bucket(*, data_uri: str, s3_endpoint: str, volume_root: str, run_id: str,
                        reuse_data: bool = True, data_dir: str = "") -> dict:
    """Read the objects under ``data_uri`` into the volume's store, keyed by their ETags and sizes
    (:func:`bucket_identity`): an unchanged prefix is reused after one listing, without reading an object;
    a changed one (an object added, removed or rewritten) is read anew into a new key. The folder must be of a
    layout ``data_dir`` takes (:func:`tfk8s.core.data_format.inspect_data_dir`), checked in the staging folder:
    a prefix of another layout publishes nothing. With ``reuse_data=false`` the objects go to the run's own
    ``data`` folder. Stop signals: as the prepare step's (it is called inside :func:`prepare_dataset_step`).

    Returns:
        What :func:`inspect_data_dir` says of the folder, plus ``data_uri``, ``key``, ``reused``,
        ``prepared_by`` and ``data_record``.

    Raises:
        tfk8s.steps.s3.S3Error: a bad URI or endpoint, a missing bucket, refused credentials, an empty prefix, an
            object changed while read (within seconds; the message names the URI and the fix).
        ValueError: the objects are of no layout a data folder takes, or ``data_dir`` is set too.
    """
    import shutil

    from tfk8s.core import data_store
    from tfk8s.core.layout import RunLayout
    from tfk8s.core.volume import volume_writes
    from tfk8s.steps import s3

    if data_dir:
        raise ValueError(f"data_uri {data_uri} and data_dir {data_dir} are both set: give one (data_uri reads a "
                         "bucket, data_dir a folder on the volume)")
    uri = s3.parse_s3_uri(data_uri, "data_uri")
    s3.check_endpoint(s3_endpoint)
    client = s3.client(s3_endpoint)
    t0 = time.perf_counter()
    objects = s3.list_prefix(client, uri, parameter="data_uri", endpoint=s3_endpoint)
    say = lambda line: print(f"tfk8s: {line}", flush=True)

    def write(out) -> None:
        s3.download(client, uri, objects, out, endpoint=s3_endpoint, say=say, between=stop_if_asked)
        try:
            inspect_data_dir(out)
        except ValueError as e:
            raise ValueError(f"data_uri {uri}: {str(e).replace(str(out), 'the objects')}".replace(
                "data_dir the objects", "the objects")) from None

    run = RunLayout(volume_root, run_id)
    if not reuse_data:
        out = run.data_dir
        with volume_writes(out, "the data read from the bucket"):
            shutil.rmtree(out, ignore_errors=True)
            staging = out.parent / f".{out.name}.staging"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            try:
                write(staging)
                os.rename(staging, out)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            record = {"path": str(out), "key": "", "reused": False, "prepared_by": run_id, "reuse_data": False,
                      "data_uri": str(uri)}
            data_store.write_data_record(volume_root, run_id, record)
        print(f"tfk8s: read {data_uri} into a fresh copy (reuse_data=false): {out}", flush=True)
        return {**inspect_data_dir(out), **record, "data_record": str(run.data_record)}
    dataset, version = bucket_folder(uri)
    identity = bucket_identity(objects)
    from tfk8s.core.layout import VolumeLayout

    with volume_writes(VolumeLayout(volume_root).dataset_base(dataset, version), "the data read from the bucket"):
        done = data_store.prepare(volume_root, dataset, version, identity, write, run_id=run_id, say=say)
        record = {"path": str(done.path), "key": done.key, "reused": done.reused, "prepared_by": done.prepared_by,
                  "reuse_data": True, "data_uri": str(uri)}
        data_store.write_data_record(volume_root, run_id, record)
    took = f" ({time.perf_counter() - t0:.2f}s, {len(objects)} objects listed, none read)" if done.reused else ""
    print(f"tfk8s: {data_uri}: {done.message()}{took}", flush=True)
    return {**inspect_data_dir(done.path), **record, "data_record": str(run.data_record)}
