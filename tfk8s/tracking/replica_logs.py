"""Keep every replica's whole log on the volume, ``<train dir>/replica-logs/<type>-<index>.log``.

Both backends stream every replica's output to the launch step's log sink as ``[worker-1] <line>`` (locally
from the process, on Kubernetes from the pod's log, which dies with the pod: the launcher deletes every pod at
the end, a TTL or a node loss may delete it sooner), and the launch step wraps that sink in
:class:`ReplicaLogWriter`: each line is appended to ``worker-1.log`` as it arrives (line-buffered, so
``tfk8s logs -f`` follows a running job and an interrupted one loses at most the line being written). Every
attempt of a replica goes to the same file; a recreation (``... recreating worker-0, worker-1 (restart 1 of
3)``) writes a separator line into the files of the recreated replicas. ``tfk8s logs JOB REPLICA`` reads
these files once the pods are gone.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tfk8s.core.layout import recreated_line

_LINE = re.compile(r"^\[([a-z]+-\d+)\] ?(.*)$")
_RECREATING = re.compile(r"recreating (.+?) \((restart|preemption) (\d+)(?: of (?:max_restarts=)?\d+|, not counted)")


def replica_log_file(log_dir: str | os.PathLike, label: str) -> Path:
    """``<log dir>/<label>.log`` for a replica label such as ``worker-1``."""
    return Path(log_dir) / f"{label}.log"


class ReplicaLogWriter:
    """Append each replica's lines to its own file under ``log_dir`` (thread-safe; see the module docstring).

    Args:
        log_dir: ``<train dir>/replica-logs`` (created on the first line).
        labels: the job's replica labels (lines of other prefixes, e.g. ``[launcher]``, are not written).
    """

    def __init__(self, log_dir: str | os.PathLike, labels: list[str]):
        self.log_dir = Path(log_dir)
        self.labels = set(labels)
        self._files: dict[str, IO[str]] = {}
        self._lock = threading.Lock()
        self._failed = False

    def _file(self, label: str) -> IO[str] | None:
        f = self._files.get(label)
        if f is None and not self._failed:
            try:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                f = open(replica_log_file(self.log_dir, label), "a", encoding="utf-8", buffering=1)  # noqa: SIM115
            except OSError as e:
                self._failed = True  # keeping logs must never fail the training job
                print(f"tfk8s: cannot keep replica logs under {self.log_dir}: {e}", flush=True)
                return None
            self._files[label] = f
        return f

    def write(self, line: str) -> None:
        """Append ``line`` to its replica's file if it is a ``[<label>] ...`` line of this job."""
        m = _LINE.match(line)
        with self._lock:
            if m and m.group(1) in self.labels:
                f = self._file(m.group(1))
                if f:
                    f.write(m.group(2) + "\n")
                return
            r = _RECREATING.search(line)
            if r:
                for label in (x.strip() for x in r.group(1).split(",")):
                    if label in self.labels and (f := self._file(label)):
                        f.write(recreated_line(label, r.group(3), r.group(2)) + "\n")

    def wrap(self, sink: Callable[[str], None]) -> Callable[[str], None]:
        """``sink`` that also keeps each line in its replica's file."""
        def kept(line: str) -> None:
            try:
                self.write(line)
            except OSError:
                pass
            sink(line)

        return kept

    def close(self) -> None:
        """Close every file."""
        with self._lock:
            for f in self._files.values():
                try:
                    f.close()
                except OSError:
                    pass
            self._files.clear()
