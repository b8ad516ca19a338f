"""What the launch step does around a backend so a job can be tracked: the job record on the volume
(:mod:`tfk8s.tracking.records`), every replica's log kept on the volume (:mod:`tfk8s.tracking.replica_logs`, for a
backend that does not write them itself), and the live progress display (:mod:`tfk8s.tracking.progress_view`).

Everything here only observes the lines a backend already sends to its log sink and the files on the
volume, so the backends need no hooks of their own; and none of it can fail a job (write errors are said once
and ignored).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from tfk8s.core.cluster import coordinator
from tfk8s.core.layout import TrainLayout
from tfk8s.tracking.progress_view import ConsoleStory, ProgressMonitor, plain_line
from tfk8s.tracking.records import JobRecorder, job_status, recording
from tfk8s.tracking.replica_logs import ReplicaLogWriter


@dataclass
class Tracked:
    """Handed to the body of :func:`tracked`.

    Attributes:
        sink: the log sink to give the backend (records, keeps and prints each line).
        recorder: set ``recorder.result`` to the backend's :class:`~tfk8s.core.job.LaunchResult` on success.
    """

    sink: Callable[[str], None]
    recorder: JobRecorder


def _print(line: str) -> None:
    print(line, flush=True)


@contextmanager
def tracked(job: Any, backend: str, train_dir: str | os.PathLike, log_sink: Callable[[str], None] | None = None,
            *, namespace: str = "", cluster_spec: Mapping[str, list[str]] | None = None,
            keep_logs: bool = True, local_paths: bool = True, stream: IO[str] | None = None) -> Iterator[Tracked]:
    """Record, keep the logs of, and show the progress of ``job`` while the body runs it.

    Args:
        job: the :class:`~tfk8s.core.job.TrainingJob`.
        backend: ``local`` or ``kubernetes`` (recorded).
        train_dir: the run's train dir; the record is ``<train dir>/job.json``.
        log_sink: where output lines go (default: printed; on a terminal, above the progress bar).
        namespace, cluster_spec: recorded for ``tfk8s describe``.
        keep_logs: write ``<train dir>/replica-logs/<label>.log`` from the sink, line by line (both backends
            leave it to this; False for a backend that keeps them itself).
        local_paths: the replicas see the launcher's file system, so the record's paths are made absolute
            (the backend's ``local_paths``, :class:`tfk8s.launcher.backends.Launch`); False: recorded as given
            (the volume's mount path, the same in every pod).
        stream: where the progress display writes (default ``sys.stdout``).

    Raises:
        whatever the body raises (after the job record says ``Failed`` with its first line).
    """
    recorder = JobRecorder.for_job(job, backend, train_dir, namespace=namespace, cluster_spec=cluster_spec,
                                   local_paths=local_paths)
    monitor = ProgressMonitor(lambda: job_status(recorder.record), stream or sys.stdout)
    out = log_sink or (monitor.print_line if monitor.tty else _print)
    out = ConsoleStory(coordinator(job.counts).label).wrap(out)  # restarts and resumes, as tfk8s: lines
    writer = None
    if keep_logs:
        writer = ReplicaLogWriter(TrainLayout(train_dir).replica_logs, [r.label for r in job.counts.replicas()])
        out = writer.wrap(out)
    try:
        with recording(recorder), monitor:
            yield Tracked(recorder.observe(out), recorder)
    finally:
        if writer:
            writer.close()
        if log_sink is not None or not monitor.tty:  # on a terminal the bar's last state stays on screen
            (log_sink or _print)(plain_line(job_status(recorder.record)))
