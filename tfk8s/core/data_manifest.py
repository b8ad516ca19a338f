"""A prepared-data store folder's manifest (``manifest.json``): what its key stands for, who prepared it, and every
file's size, mtime and sha256; :func:`verify` checks a folder against it before a run reuses it
(:mod:`tfk8s.core.data_store`).

Layout::

    {"format": 1, "key": "1d67cd9ecd034405", "identity": {...}, "prepared_by": "<run id>", "host": "...",
     "created": 1796195885.4, "files": {"train-00000-of-00008.tfrecord": {"size": 6932871,
     "mtime_ns": 1796195884123456789, "sha256": "...", "sample_sha256": "..."}, ..., "metadata.json": {...}}}

What reuse checks, and why: every file listed is there with its size and mtime (as ``stat`` says,
nanoseconds), plus a cheap content check, the sha256 of each file's first and last 64 KiB. That costs one
``stat`` and at most 128 KiB read per file whatever the data set's size (a full sha256 of MNIST's 55 MB takes
~0.15 s here, of a 150 GB data set minutes, on every run), and catches what happens in practice: a deleted or
truncated shard (size), a file rewritten in place (mtime), a file replaced by another of the same size with its
times kept (``cp -p`` or ``rsync -t`` of a sibling shard, which round-robin sharding makes near the same size:
the sampled bytes). A change that keeps the size, the mtime and both ends is not seen; ``verify(deep=True)``
(``tfk8s datasets --verify``) compares the full sha256 the manifest also holds. Plain Python (standard library
only).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfk8s.core.layout import MANIFEST_FILE

STORE_FORMAT = 1
"""The manifest's ``format`` (and part of every key: a new store format never reuses an old folder)."""
SAMPLE_BYTES = 64 * 1024  # read from each end of a file for the cheap content check


def _hashes(path: Path) -> tuple[str, str]:
    """``(sha256 of the whole file, sha256 of its first and last SAMPLE_BYTES)``, reading it once (the sample
    is the same bytes :func:`_sample_hash` reads; the two ends overlap in a small file)."""
    full = hashlib.sha256()
    with open(path, "rb") as f:
        head = f.read(SAMPLE_BYTES)
        full.update(head)
        tail = head
        while chunk := f.read(1 << 20):
            full.update(chunk)
            tail = (tail + chunk)[-SAMPLE_BYTES:]
    return full.hexdigest(), hashlib.sha256(head + tail).hexdigest()


def _sample_hash(path: Path, size: int) -> str:
    """The sha256 of ``path``'s first and last :data:`SAMPLE_BYTES` (at most 128 KiB read, whatever its size)."""
    with open(path, "rb") as f:
        head = f.read(SAMPLE_BYTES)
        f.seek(max(0, size - SAMPLE_BYTES))
        tail = f.read(SAMPLE_BYTES)
    return hashlib.sha256(head + tail).hexdigest()


def fsync_dir(path: Path) -> None:
    """fsync folder ``path`` (a rename in it is durable after); a file system that cannot is left as it is."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot fsync a directory; the rename is still atomic
        pass
    finally:
        os.close(fd)


def write_manifest(folder: str | os.PathLike, identity: Mapping[str, Any], key: str, prepared_by: str) -> dict:
    """fsync every file in ``folder`` and write its ``manifest.json`` (temp file, fsync, rename, fsync the folder).

    Lists the folder's regular files whose name does not start with ``.`` (the shards and metadata.json), each
    with ``size`` (bytes), ``mtime_ns``, ``sha256`` and ``sample_sha256`` (first and last 64 KiB).

    Returns:
        The manifest as written: ``{"format", "key", "identity", "prepared_by", "host", "created", "files"}``.

    Raises:
        OSError: the volume's (the caller wraps it, :func:`tfk8s.core.volume.volume_writes`).
    """
    folder = Path(folder)
    files: dict[str, dict[str, Any]] = {}
    for p in sorted(folder.iterdir()):
        if p.name.startswith(".") or p.name == MANIFEST_FILE or not p.is_file():
            continue
        with open(p, "rb+") as f:
            os.fsync(f.fileno())
        st = p.stat()
        full, sample = _hashes(p)
        files[p.name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": full, "sample_sha256": sample}
    manifest = {"format": STORE_FORMAT, "key": key, "identity": dict(identity), "prepared_by": prepared_by,
                "host": socket.gethostname(), "created": time.time(), "files": files}
    tmp = folder / f".{MANIFEST_FILE}.tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MANIFEST_FILE)
    fsync_dir(folder)
    return manifest


def read_manifest(folder: str | os.PathLike) -> dict | None:
    """``<folder>/manifest.json`` as a dict; None when it is missing, unreadable or not of this store format."""
    try:
        doc = json.loads((Path(folder) / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != STORE_FORMAT or not isinstance(doc.get("files"), dict):
        return None
    return doc


def verify(folder: str | os.PathLike, *, deep: bool = False, key: str | None = None) -> str:
    """What is wrong with store folder ``folder``; ``""`` when it may be reused.

    Args:
        deep: also compare each file's full sha256 (reads every byte); default: size, mtime and the first and
            last 64 KiB (see the module docstring for why).
        key: the key the folder must hold (its manifest's ``key``), when known.

    Returns:
        ``""``, or one phrase naming the first problem: no (valid) manifest, a key mismatch, a file missing,
        of another size, modified (mtime), or of other content.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        return f"{folder} has no valid {MANIFEST_FILE} (a preparation that did not finish, or not a store folder)"
    if key is not None and manifest.get("key") != key:
        return f"{folder}/{MANIFEST_FILE} is of key {manifest.get('key')!r}, not {key!r}"
    if not manifest["files"]:
        return f"{folder}/{MANIFEST_FILE} lists no files"
    for name, want in manifest["files"].items():
        p = folder / name
        try:
            st = p.stat()
        except OSError:
            return f"{p} is missing"
        try:
            if st.st_size != want["size"]:
                return f"{p} has {st.st_size} bytes, the manifest says {want['size']}"
            if st.st_mtime_ns != want["mtime_ns"]:
                return f"{p} was modified after it was prepared (mtime differs from the manifest's)"
            if deep:
                if _hashes(p)[0] != want["sha256"]:
                    return f"{p} differs from what was prepared (sha256)"
            elif _sample_hash(p, st.st_size) != want["sample_sha256"]:
                return f"{p} differs from what was prepared (sha256 of its first and last 64 KiB)"
        except (KeyError, TypeError):
            return f"{folder}/{MANIFEST_FILE} is malformed at {name!r}"
        except OSError as e:
            return f"{p} cannot be read: {e}"
    return ""
