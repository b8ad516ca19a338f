"""Writing to the shared volume: a failure of the volume itself (read-only, full, not writable, a root that
cannot exist) becomes one :class:`VolumeWriteError` naming the path and the fix, instead of a traceback.

Every step wraps its writes in :func:`volume_writes`; what a step writes is staged and renamed into place, so
earlier runs and exports stay intact.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class VolumeWriteError(RuntimeError):
    """Writing to the shared volume failed for a reason of the volume (read-only, full, not writable, a root
    that cannot exist); the message names the path and the fix. Raised by :func:`volume_writes`."""


_READ_ONLY = ("read-only file system",)
_FULL = ("no space left on device", "disk quota exceeded")


def _why(error: BaseException) -> tuple[str, str] | None:
    """``(kind, path)`` of a volume failure (``read-only``, ``full``, ``denied``, ``missing``), else None.

    Understands OSError's errno, :class:`shutil.Error` (``copytree``'s list of failures) and TensorFlow's
    file errors (by their message: ``tf.io.gfile`` raises ``tf.errors.OpError``, not OSError).
    """
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list):
        for entry in error.args[0]:
            text = str(entry[-1]).lower() if isinstance(entry, tuple) and entry else str(entry).lower()
            dst = str(entry[1]) if isinstance(entry, tuple) and len(entry) > 1 else ""
            if any(m in text for m in _FULL):
                return "full", dst
            if any(m in text for m in _READ_ONLY):
                return "read-only", dst
        return None
    if isinstance(error, OSError) and error.errno is not None:
        path = str(error.filename or "")
        kind = {errno.EROFS: "read-only", errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EACCES: "denied",
                errno.EPERM: "denied", errno.ENOENT: "missing", errno.ENOTDIR: "missing"}.get(error.errno)
        return (kind, path) if kind else None
    text = str(getattr(error, "message", "") or error).lower()
    if type(error).__module__.startswith("tensorflow"):
        if any(m in text for m in _FULL):
            return "full", ""
        if any(m in text for m in _READ_ONLY):
            return "read-only", ""
        if "permission denied" in text:
            return "denied", ""
    return None


def _missing_fix(where: Path) -> str:
    """Why ``where`` cannot be created: the nearest existing ancestor is a file, or none is writable."""
    for ancestor in where.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                return (f"{ancestor} is a file, not a folder, so nothing can be created below it: pass an existing "
                        f"writable folder as --volume / volume_root")
            return (f"it cannot be created in {ancestor}: pass an existing writable folder as --volume / "
                    f"volume_root")
    return "pass an existing writable folder as --volume / volume_root"


def _related(failed: str, path: str | os.PathLike) -> bool:
    """Whether ``failed`` is ``path``, one of its parents or inside it."""
    if not failed:
        return False
    a, b = Path(os.path.abspath(failed)), Path(os.path.abspath(path))
    return a == b or a in b.parents or b in a.parents


@contextmanager
def volume_writes(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Turn a failure of the volume while writing ``what`` under ``path`` into one :class:`VolumeWriteError`
    naming the path and the fix (instead of ``OSError: [Errno 30] ...`` or ``shutil.Error`` with a traceback).
    Other errors pass unchanged. What a step writes is staged and renamed into place, so earlier runs and
    exports stay intact.

    Raises:
        VolumeWriteError: the volume is read-only, full, not writable by this user, or ``path`` cannot exist.
    """
    try:
        yield
    except Exception as e:  # TensorFlow's file errors (tf.errors.OpError) are no OSError; re-raised below
        why = _why(e)
        if why is None:
            raise
        kind, at = why
        if kind in ("missing", "denied") and not _related(at, path):
            raise  # e.g. a missing input elsewhere: not the volume's fault
        where = at or str(path)
        if kind == "read-only":
            fix = ("the volume is read-only: mount it read-write (a ReadWriteMany PVC, not mounted readOnly; "
                   "locally a writable --volume folder)")
        elif kind == "full":
            fix = ("the volume is full: free space (old runs under <root>/runs/, unneeded versions under "
                   "<root>/models/), or use a larger volume (pvc_size when the pipeline creates the PVC)")
        elif kind == "denied":
            fix = ("permission denied: make the volume writable by this user (in a cluster the project image "
                   "runs as UID 10001: the PVC needs fsGroup 10001 or matching ownership)")
        else:
            fix = _missing_fix(Path(where))
        raise VolumeWriteError(f"cannot write {what} to {where}: {fix}") from None
