"""Per-replica progress files: how a training program tells the launcher how far it is, and that it is alive.

A launcher hands every replica the environment variable :data:`PROGRESS_FILE_ENV` (``TFK8S_PROGRESS_FILE``),
a path on the shared volume (``<train dir>/progress/<type>-<index>.json``). The program overwrites that file
atomically (write to a temporary sibling, then ``os.replace``) every few seconds while it makes progress. The
file is one JSON object::

    {"replica": "worker-1", "time": 1764581234.5, "state": "running",
     "epoch": 2, "epochs": 4, "step": 230, "steps": 468, "examples_per_sec": 5120.0, "loss": 0.071}

- ``time``: Unix seconds of the update (the heartbeat; a watchdog compares it with the clock).
- ``state``: ``"starting"`` (waiting for peers or data), ``"running"``, ``"done"``.
- ``epoch`` (1-based, the epoch in progress or last finished), ``epochs`` (planned), ``step`` (global steps
  done), ``steps`` (planned global steps over all epochs, 0 if unknown), ``examples_per_sec`` (this replica's
  recent throughput), ``loss`` (latest training loss, ``None`` when not finite) — every field but
  ``replica``, ``time`` and ``state`` is optional.

The format mirrors what Kubeflow Trainer v2 puts in a TrainJob's status (progress percentage, estimated
remaining time, metrics). A program that writes nothing still runs; launchers then show only replica states
and apply no progress watchdog to it. This module is plain Python (no TensorFlow, KFP or Kubernetes), so user
programs, the trainer and every launcher can import it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tfk8s.core.layout import TrainLayout

PROGRESS_FILE_ENV = "TFK8S_PROGRESS_FILE"
STATES = ("starting", "running", "done")


@dataclass(frozen=True)
class Progress:
    """One replica's last reported progress (the file's fields; see the module docstring)."""

    replica: str
    time: float
    state: str = "running"
    epoch: int | None = None
    epochs: int | None = None
    step: int | None = None
    steps: int | None = None
    examples_per_sec: float | None = None
    loss: float | None = None

    @property
    def fraction(self) -> float | None:
        """Done fraction in [0, 1]: ``step / steps`` when both are known, else ``epoch / epochs``; None."""
        if self.state == "done":
            return 1.0
        if self.step is not None and self.steps:
            return min(1.0, self.step / self.steps)
        if self.epoch is not None and self.epochs:
            return min(1.0, max(0, self.epoch - 1) / self.epochs)
        return None

    def age_s(self, now: float | None = None) -> float:
        """Seconds since the last update."""
        return (time.time() if now is None else now) - self.time


def progress_file(train_dir: str | os.PathLike, label: str) -> Path:
    """``<train dir>/progress/<label>.json`` for a replica label such as ``worker-1``."""
    return TrainLayout(train_dir).progress_file(label)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_progress(path: str | os.PathLike, progress: Progress) -> None:
    """Atomically replace ``path`` with ``progress`` as JSON (non-finite floats written as null).

    Raises:
        OSError: the folder cannot be created or written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {k: _finite(v) for k, v in asdict(progress).items()}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, allow_nan=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_progress(path: str | os.PathLike) -> Progress | None:
    """The progress in ``path``, or None when it is missing or not (yet) a valid progress file."""
    try:
        data = json.loads(Path(path).read_text())
        known = {k: data[k] for k in Progress.__dataclass_fields__ if k in data}
        return Progress(**known)
    except (OSError, ValueError, TypeError):
        return None


def read_job_progress(train_dir: str | os.PathLike) -> dict[str, Progress]:
    """Every replica's progress under ``<train dir>/progress``, keyed by replica label (empty if none)."""
    folder = TrainLayout(train_dir).progress_dir
    out: dict[str, Progress] = {}
    if folder.is_dir():
        for f in sorted(folder.glob("*.json")):
            p = read_progress(f)
            if p is not None:
                out[f.stem] = p
    return out


class ProgressReporter:
    """Writes a replica's progress file at most every ``min_interval_s`` seconds (state changes at once).

    ``ProgressReporter.from_env(label)`` reads :data:`PROGRESS_FILE_ENV`; without it every call is a no-op,
    so a program runs the same outside tfk8s. Errors writing the file are swallowed after the first warning:
    progress must never fail a training.
    """

    def __init__(self, path: str | os.PathLike | None, replica: str, min_interval_s: float = 2.0):
        self.path = Path(path) if path else None
        self.replica = replica
        self.min_interval_s = min_interval_s
        self._last_write = 0.0
        self._last_state: str | None = None
        self._warned = False

    @classmethod
    def from_env(cls, replica: str, min_interval_s: float = 2.0) -> ProgressReporter:
        """A reporter writing to ``$TFK8S_PROGRESS_FILE`` (a no-op one when it is unset)."""
        return cls(os.environ.get(PROGRESS_FILE_ENV) or None, replica, min_interval_s)

    def update(self, state: str = "running", force: bool = False, **fields) -> bool:
        """Report progress (fields of :class:`Progress`); returns whether the file was written.

        Raises:
            ValueError: ``state`` is not one of :data:`STATES`.
        """
        if state not in STATES:
            raise ValueError(f"progress state must be one of {STATES}, got {state!r}")
        if self.path is None:
            return False
        now = time.time()
        if not force and state == self._last_state and now - self._last_write < self.min_interval_s:
            return False
        try:
            write_progress(self.path, Progress(replica=self.replica, time=now, state=state, **fields))
        except OSError as e:
            if not self._warned:
                print(f"tfk8s: cannot write progress file {self.path}: {e}", flush=True)
                self._warned = True
            return False
        self._last_write, self._last_state = now, state
        return True
