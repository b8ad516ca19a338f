"""The prepared-data store: one complete preparation per key on the volume, reused by every run of that key.

A nightly retraining on the same TFDS version reads the same examples every night; preparing them again per run
costs seconds of every run (MNIST: 3-5 s of a 17-19 s pipeline). The prepare step therefore names what it
writes by a **key**, the digest of everything that decides the folder's content (:func:`data_key` of an
*identity*: data set, config, TFDS version, the source files' identity, splits, ``max_examples``, shard count,
the data format's and the writer's versions), and keeps it at
``<root>/datasets/<data set>/<version>/<key>/`` (:meth:`tfk8s.core.layout.VolumeLayout.prepared`). A run whose
key is there and intact reads it as it is (:func:`prepare`).

Written atomically: a preparation is written into ``.staging-<key>-<host>-<pid>/`` beside its final place (same
folder, same file system), each file fsynced, then ``manifest.json`` (the identity, who prepared it, and every
file's size, mtime and sha256) written, fsynced and renamed in, and the staging folder renamed to ``<key>/``
(and the parent fsynced). A folder without a valid manifest is never reused, so a preparation killed halfway
leaves only a staging folder, never a ``<key>/`` that looks complete.

Two runs of one key at once: the one that takes ``<key>.lock`` (``fcntl.flock``, exclusive; the kernel, or the
NFS server's lease, releases it when its holder dies, so no stale lock is left to break) prepares; the other
waits for it and then reuses what it published. Where the file system has no locks, or the wait runs out, the
second prepares its own copy in its own staging folder and the rename decides: the first rename wins, the loser
finds ``<key>/`` taken, checks it and reuses it, and removes its copy. Nothing is ever half-written in place.

Reuse is checked against the folder's manifest (:mod:`tfk8s.core.data_manifest`: sizes, mtimes and a cheap content
check; why that and not a full sha256 is said there). A folder that fails is moved aside and prepared again.

Each run writes its data record ``<root>/runs/<run id>/data.json`` (:func:`write_data_record`): the folder its
replicas read, its key and who prepared it, so a run stays reproducible after later runs, and ``tfk8s datasets``
can say which runs used a folder; the run holds that folder while a step of it can still read it
(:mod:`tfk8s.core.data_hold`). Plain Python (standard library only).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from tfk8s.core.data_manifest import STORE_FORMAT, fsync_dir, read_manifest, verify, write_manifest
from tfk8s.core.layout import (
    LOCK_SUFFIX,
    MANIFEST_FILE,
    STAGING_PREFIX,
    TRASH_PREFIX,
    RunLayout,
    VolumeLayout,
)

KEY_LEN = 16  # hex digits of the identity's sha256 that name the folder (64 bits)
WAIT_S = 2 * 3600.0  # how long a run waits for another run preparing the same key before preparing its own copy
POLL_S = 0.2
STALE_STAGING_S = 3600.0  # a staging folder of the key this old, found by the lock's holder, is a dead run's


class StoreError(RuntimeError):
    """The store cannot give a usable folder (the message names the folder and the fix)."""


@dataclass(frozen=True)
class Prepared:
    """The outcome of :func:`prepare`: the folder the run reads and how it came to be.

    Attributes:
        path: ``<root>/datasets/<data set>/<version>/<key>``.
        key: the identity's digest (:func:`data_key`).
        reused: True when this run prepared nothing.
        prepared_by: the run id that prepared the folder (this run's own when not ``reused``).
        created: Unix seconds the folder's manifest was written.
        waited_s: seconds spent waiting for another run preparing the same key.
        replaced: why a folder of this key already there was prepared again ("" when none was).
    """

    path: Path
    key: str
    reused: bool
    prepared_by: str
    created: float
    waited_s: float = 0.0
    replaced: str = ""

    def message(self) -> str:
        """One line for the step's output: ``reused data prepared by run X (...)`` or ``prepared ... (key K)``."""
        if self.reused:
            waited = f" after waiting {self.waited_s:.1f}s for it" if self.waited_s >= 0.05 else ""
            return (f"reused data prepared by run {self.prepared_by} at {_when(self.created)}{waited}: {self.path} "
                    f"(key {self.key}; reuse_data=false prepares a fresh copy)")
        again = f" again ({self.replaced})" if self.replaced else ""
        return f"prepared data{again} into {self.path} (key {self.key}; later runs of this key reuse it)"


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def data_key(identity: Mapping[str, Any]) -> str:
    """The key of a preparation: the first :data:`KEY_LEN` hex digits of the sha256 of ``identity`` as
    canonical JSON (sorted keys, no spaces), with :data:`STORE_FORMAT` laid in.

    Args:
        identity: everything that decides the folder's content, JSON-serialisable (the prepare step's:
            :func:`tfk8s.steps.prepare_dataset.data_identity`). Equal identities give equal keys; any change
            of a value gives another key.

    Raises:
        TypeError: a value JSON cannot serialise.
    """
    doc = {**identity, "store_format": STORE_FORMAT}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_LEN]


def _owner() -> str:
    host = "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


class _Lock:
    """``<key>.lock`` held with ``fcntl.flock`` (exclusive), polled until ``wait_s``. ``held`` is False when
    the wait ran out or the file system has no locks: the caller then prepares its own copy (the rename
    decides). ``on_wait`` is called once, when the first attempt finds the lock held by another process (so a
    run says it waits exactly when it does)."""

    def __init__(self, path: Path, wait_s: float, on_wait: Callable[[], None] | None = None):
        self.path, self.wait_s, self.on_wait = path, wait_s, on_wait
        self.fd: int | None = None
        self.held = False
        self.waited_s = 0.0
        self.unsupported = ""

    def __enter__(self) -> Self:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        t0 = time.monotonic()
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.held = True
                break
            except BlockingIOError:
                if self.on_wait is not None:
                    self.on_wait()
                    self.on_wait = None
                if time.monotonic() - t0 >= self.wait_s:
                    break
                time.sleep(POLL_S)
            except OSError as e:  # ENOLCK, EOPNOTSUPP...: no locks here
                self.unsupported = os.strerror(e.errno or 0)
                break
        self.waited_s = time.monotonic() - t0
        if self.held:
            os.ftruncate(self.fd, 0)
            os.write(self.fd, f"{_owner()} {time.time():.0f}\n".encode())
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the flock
            self.fd = None


def _discard(folder: Path) -> None:
    """Remove ``folder``: renamed to ``.removing-<name>-<owner>`` first (atomic: no reader sees it half-removed
    under its name), then deleted."""
    trash = folder.with_name(f"{TRASH_PREFIX}{folder.name}-{_owner()}-{time.time_ns()}")
    try:
        os.rename(folder, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _reused(final: Path, key: str, waited_s: float = 0.0) -> Prepared | None:
    """The folder as reused, when it verifies; else None."""
    if verify(final, key=key):
        return None
    m = read_manifest(final) or {}
    return Prepared(final, key, True, str(m.get("prepared_by") or "?"), float(m.get("created") or 0), waited_s)


def prepare(volume: str | os.PathLike, dataset: str, version: str, identity: Mapping[str, Any],
            write: Callable[[Path], None], *, run_id: str, wait_s: float = WAIT_S,
            say: Callable[[str], None] | None = None) -> Prepared:
    """The store folder of ``identity``: reused when it is there and intact, else prepared by ``write``.

    Args:
        volume: the volume root.
        dataset, version: the folder's parents (``datasets/<dataset>/<version>/``), single path segments.
        identity: everything that decides the content (:func:`data_key`).
        write: ``write(folder)`` writes the preparation into the empty ``folder`` (a staging folder).
        run_id: this run's id, recorded as ``prepared_by``.
        wait_s: the longest wait for another run preparing the same key; then this run prepares its own copy.
        say: told, in one line, when this run waits for another (default: nothing is said).

    Returns:
        :class:`Prepared`: ``path`` is ``<root>/datasets/<dataset>/<version>/<key>``.

    Raises:
        OSError: the volume's (the caller wraps it in :func:`tfk8s.core.volume.volume_writes`).
        StoreError: another run published the key at the same time and its folder does not verify.
        Whatever ``write`` raises (the staging folder is removed first).
    """
    layout = VolumeLayout(volume)
    key = data_key(identity)
    final = layout.prepared(dataset, version, key)
    hit = _reused(final, key)
    if hit is not None:  # the common case: no lock, no write
        return hit
    lock_path = layout.prepared_lock(dataset, version, key)
    def waiting() -> None:
        if say is not None:
            say(f"another run is preparing key {key} ({final}); waiting for it (at most {wait_s:.0f}s)")

    lock = _Lock(lock_path, wait_s, on_wait=waiting)
    with lock:
        replaced = ""
        if final.exists():
            hit = _reused(final, key, lock.waited_s)
            if hit is not None:  # published by the run this one waited for
                return hit
            if lock.held:  # only the lock's holder may remove a bad folder (an unlocked copy waits for the rename)
                replaced = verify(final, key=key)
                _discard(final)
        staging = layout.prepared_staging(dataset, version, key, _owner())
        if lock.held:
            _remove_stale_staging(final)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            write(staging)
            write_manifest(staging, identity, key, run_id)
            created = time.time()
            try:
                os.rename(staging, final)
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                # another copy was renamed in first (no lock here, or the wait ran out): use it, drop ours
                hit = _reused(final, key, lock.waited_s)
                if hit is None:
                    raise StoreError(f"{final} appeared while this run prepared its own copy, and it does not "
                                     f"verify ({verify(final, key=key)}): remove it (tfk8s datasets delete "
                                     f"{key}) and run again") from None
                return hit
            fsync_dir(final.parent)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return Prepared(final, key, False, run_id, created, lock.waited_s, replaced)


def _is_locked(path: Path) -> bool:
    """Whether another process holds ``path``'s flock now (False when it does not exist or locks are off)."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _remove_stale_staging(final: Path) -> None:
    """Staging folders of ``final``'s key older than :data:`STALE_STAGING_S` (runs killed while preparing)."""
    now = time.time()
    for p in final.parent.glob(f"{STAGING_PREFIX}{final.name}-*"):
        try:
            if now - p.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


# --- a request resolved: the reuse without TFDS --------------------------------------------------------------

def request_digest(request: Mapping[str, Any]) -> str:
    """The name of a prepare request's resolution file: the first :data:`KEY_LEN` hex digits of the sha256 of
    ``request`` as canonical JSON (as :func:`data_key`).

    Raises:
        TypeError: a value JSON cannot serialise.
    """
    text = json.dumps({**request, "store_format": STORE_FORMAT}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_LEN]


def remember_resolution(volume: str | os.PathLike, request: Mapping[str, Any],
                        resolved: Mapping[str, Any]) -> Path:
    """Write what ``request`` resolved to (``<volume>/datasets/.resolved/<digest>.json``, temp file + rename),
    so that the next run of the same request finds its key without the library that resolved it.

    A resolution only names where to look (the prepare step's: the data set's name, config and version as
    TFDS resolved them, and the TFDS folder of its files); the key is still computed from the files each time
    and checked against the store, so a stale resolution costs a miss (and the full path), never wrong data.

    Args:
        request: what the caller was asked (JSON-serialisable): :func:`request_digest` names the file.
        resolved: what it resolved to (JSON-serialisable).

    Returns:
        The file written.

    Raises:
        OSError: the volume's.
    """
    path = VolumeLayout(volume).resolved(request_digest(request))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{_owner()}")
    tmp.write_text(json.dumps({"request": dict(request), "resolved": dict(resolved), "created": time.time()},
                              sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def recall_resolution(volume: str | os.PathLike, request: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``request`` resolved to last time (:func:`remember_resolution`); None when it was never
    remembered, or the file is unreadable or belongs to another request (a digest collision)."""
    path = VolumeLayout(volume).resolved(request_digest(request))
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("request") != json.loads(json.dumps(dict(request))):
        return None
    resolved = doc.get("resolved")
    return dict(resolved) if isinstance(resolved, dict) else None


def reuse(volume: str | os.PathLike, dataset: str, version: str,
          identity: Mapping[str, Any]) -> Prepared | None:
    """The store folder of ``identity`` when it is there and intact (what :func:`prepare` reuses without taking
    a lock or writing), else None. Standard library only: no preparation is possible from here.

    Raises:
        ValueError: ``dataset`` or ``version`` not a single path segment.
    """
    key = data_key(identity)
    return _reused(VolumeLayout(volume).prepared(dataset, version, key), key)


# --- what is in the store, and which runs read it -------------------------------------------------------------

@dataclass(frozen=True)
class StoredDataset:
    """One folder of the store, as ``tfk8s datasets`` lists it.

    Attributes:
        dataset, version, key: where it is (``datasets/<dataset>/<version>/<key>``).
        path: the folder.
        size_bytes: the files' sizes summed, as the manifest lists them (0 without a manifest).
        files: how many files the manifest lists.
        created: Unix seconds its manifest was written (0: none).
        prepared_by: the run that prepared it ("" without a manifest).
        identity: what its key is the digest of ({} without a manifest).
        runs: the run ids whose data record names this folder, oldest first.
        problem: "" when the manifest is valid (files not checked here: :func:`verify`), else why not.
    """

    dataset: str
    version: str
    key: str
    path: Path
    size_bytes: int
    files: int
    created: float
    prepared_by: str
    identity: dict = field(default_factory=dict)
    runs: tuple[str, ...] = ()
    problem: str = ""


def list_stored(volume: str | os.PathLike) -> list[StoredDataset]:
    """Every folder of the store under ``<volume>/datasets/``, by data set, version, then oldest first; each with
    the runs whose data record (:func:`read_data_records`) names it. Staging and removing folders and lock
    files are left out."""
    layout = VolumeLayout(volume)
    users: dict[str, list[tuple[float, str]]] = {}
    for rec in read_data_records(volume):
        users.setdefault(os.path.normpath(str(rec.get("path") or "")), []).append(
            (float(rec.get("created") or 0), str(rec["run_id"])))
    found = []
    for folder in sorted(layout.datasets.glob("*/*/*")):
        if folder.name.startswith(".") or folder.name.endswith(LOCK_SUFFIX) or not folder.is_dir():
            continue
        m = read_manifest(folder)
        files = (m or {}).get("files") or {}
        runs = tuple(r for _, r in sorted(users.get(os.path.normpath(str(folder)), [])))
        found.append(StoredDataset(
            dataset=folder.parent.parent.name, version=folder.parent.name, key=folder.name, path=folder,
            size_bytes=sum(int(f.get("size") or 0) for f in files.values()), files=len(files),
            created=float((m or {}).get("created") or 0), prepared_by=str((m or {}).get("prepared_by") or ""),
            identity=dict((m or {}).get("identity") or {}), runs=runs,
            problem="" if m is not None else f"no valid {MANIFEST_FILE}"))
    return sorted(found, key=lambda s: (s.dataset, s.version, s.created))


def remove_stored(volume: str | os.PathLike, stored: StoredDataset) -> None:
    """Remove one folder of the store (and its lock file), holding its lock so that no run is preparing it.

    The folder is renamed away first, so a run starting at that moment finds no folder (and prepares one) rather
    than a half-removed one. Whether a running job reads it is the caller's to check (``tfk8s datasets delete``).

    Raises:
        StoreError: a run is preparing this key now (its lock is held).
    """
    layout = VolumeLayout(volume)
    lock_path = layout.prepared_lock(stored.dataset, stored.version, stored.key)
    with _Lock(lock_path, 0.0) as lock:
        if not lock.held and not lock.unsupported:
            raise StoreError(f"a run is preparing key {stored.key} now ({lock_path} is locked): try again when it "
                             f"has finished")
        _discard(stored.path)
        try:
            lock_path.unlink()
        except OSError:
            pass


def write_data_record(volume: str | os.PathLike, run_id: str, record: Mapping[str, Any]) -> Path:
    """Write ``<volume>/runs/<run id>/data.json`` (temp file + rename): which folder the run's replicas read.

    Args:
        record: ``path`` (the folder) and what else describes it (``key``, ``reused``, ``prepared_by``...);
            ``format`` and ``created`` (Unix seconds) are added.

    Returns:
        The record's path.

    Raises:
        OSError: the volume's.
    """
    path = RunLayout(str(volume), run_id).data_record
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": STORE_FORMAT, "run_id": run_id, "created": time.time(), **record}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


def read_data_records(volume: str | os.PathLike) -> list[dict[str, Any]]:
    """Every run's data record on ``volume`` (unreadable ones left out), each with its ``run_id``."""
    out = []
    for p in VolumeLayout(volume).data_records():
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("path"):
            doc["run_id"] = p.parent.name
            out.append(doc)
    return out

