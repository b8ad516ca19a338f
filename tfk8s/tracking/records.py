"""Job records: every training job the launch step runs is recorded on the volume, so it can be listed,
described, followed and waited for while it runs and after its replicas are gone (``tfk8s get/describe/...``).

The launch step writes ``<train dir>/job.json`` (``<root>/runs/<run id>/train/job.json``) when the job starts
and rewrites it atomically whenever something changes (a replica starts or ends, a restart, a launcher
message, the outcome). One JSON object, format :data:`RECORD_FORMAT`::

    {"format": 1, "name": "tfk8s-123", "backend": "local", "namespace": "", "run_id": "123",
     "state": "Running",                      # Running | Succeeded | Failed | Stopped (Lost, Deleted: below)
     "message": "",                           # why it failed
     "replicas": {"worker": 2},               # replica counts by type
     "replica_states": {"worker-0": "Running", "worker-1": "Pending"},
     "cluster_spec": {"worker": ["127.0.0.1:4001", ...]},
     "restarts": 0, "preemptions": 0,           # recreations counted against max_restarts, and not
     "restart_reasons": [{"time": ..., "message": "..."}],   # both kinds
     "events": [{"time": ..., "message": "..."}],   # the launcher's own messages, the last 100
     "created": 1764581234.5, "finished": null,     # Unix seconds; "updated": the last write
     "wall_time_s": null,
     "launcher": {"pid": 4242, "host": "build-1"},
     "selector": "tfk8s.dev/job-name=tfk8s-123",  # the label of its Kubernetes objects
     "paths": {"train_dir", "replica_logs", "checkpoints", "tensorboard", "saved_model", "progress",
               "summary", "report"},
     "tensorboard_command": "tensorboard --logdir ..."}

Replica states: ``Pending`` (not started), ``Running`` (its first log line arrived), ``Succeeded``,
``Failed``, ``Stopped`` (stopped by the launcher: ps, evaluator, laggards, or everything after a failure).

A job whose launcher got a stop signal (SIGTERM: the run cancelled, ``tfk8s delete``, its pod evicted; SIGINT:
Ctrl-C) is ``Stopped``, its message the cause, not ``Failed``: it did not fail, someone stopped it.
A record whose launcher is gone without writing the outcome reads as ``Lost`` (local backend, same host: the
launcher's pid is dead; Kubernetes, in ``tfk8s``: the cluster has no objects of the job any more); ``tfk8s delete`` marks a job it stopped ``Deleted`` if its launcher did not record
the outcome itself. Kubernetes jobs are also found live by their label ``tfk8s.dev/job-name``
(:func:`tfk8s.launcher.kubernetes.inventory.live_kubernetes_jobs`), which covers a volume the caller has not
mounted; :func:`merge_live` lays what the cluster says over a record.
"""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfk8s.core.cluster import ReplicaType
from tfk8s.core.job import job_selector
from tfk8s.core.layout import TrainLayout, VolumeLayout, tensorboard_command
from tfk8s.core.progress import Progress, read_job_progress

RECORD_FORMAT = 1
TERMINAL_STATES = ("Succeeded", "Failed", "Stopped", "Lost", "Deleted")
STOPPED_STATES = ("Stopped", "Deleted")  # ended because someone stopped it, not because it failed
MAX_EVENTS = 100
_LABEL_LINE = re.compile(r"^\[([a-z]+-\d+)\] ?(.*)$")
_RESTART = re.compile(r"\(restart (\d+) of (?:max_restarts=)?(\d+)\)")  # tfk8s.core.policy.restart_note
_PREEMPTION = re.compile(r"\(preemption (\d+), not counted")  # tfk8s.core.policy.preemption_note
_CLUSTER_SPEC = re.compile(r"cluster spec (\{.*\})")
_SUCCEEDED = re.compile(r"^(?:replica )?([a-z]+-\d+) succeeded$")


def record_path(train_dir: str | os.PathLike) -> Path:
    """``<train dir>/job.json``."""
    return TrainLayout(train_dir).record


def write_record(path: str | os.PathLike, record: Mapping[str, Any]) -> None:
    """Atomically replace ``path`` with ``record`` as JSON (temporary sibling + ``os.replace``).

    Raises:
        OSError: the folder cannot be written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_record(path: str | os.PathLike) -> dict[str, Any] | None:
    """The record in ``path`` (a ``job.json``), or None when it is missing or unreadable."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("name") else None


def effective_state(record: Mapping[str, Any], launcher_lost: Callable[[Mapping[str, Any]], bool] | None = None) -> str:
    """The record's state, ``Lost`` for a job still ``Running`` whose launcher is known to be gone (killed
    before it could record the outcome).

    Args:
        launcher_lost: whether the launcher of a Running record is gone, asked of the backend that ran it by
            the caller (the ``tfk8s`` verbs: :meth:`tfk8s.launcher.backends.Inspection.launcher_lost`, a local
            launcher's process on this host); None: the record's state as written.
    """
    state = record.get("state", "Running")
    if state == "Running" and launcher_lost is not None and launcher_lost(record):
        return "Lost"
    return state


def list_records(volume: str | os.PathLike) -> list[dict[str, Any]]:
    """Every job recorded under ``<volume>/runs/*/train/job.json``, oldest first (by ``created``)."""
    records = []
    for p in VolumeLayout(volume).records():
        r = read_record(p)
        if r:
            r.setdefault("run_id", p.parent.parent.name)
            records.append(r)
    return sorted(records, key=lambda r: r.get("created") or 0)


class JobNotFoundError(LookupError):
    """No job of that name (or run id) is recorded on the volume or found in the cluster."""


def find_record(volume: str | os.PathLike, name: str) -> dict[str, Any]:
    """The record of job ``name`` (or of run id ``name``) on ``volume``; the newest if several match.

    Raises:
        JobNotFoundError: none matches; the message lists the jobs there are.
    """
    records = list_records(volume)
    found = [r for r in records if name in (r.get("name"), r.get("run_id"))]
    if not found:
        known = ", ".join(r["name"] for r in records[-10:]) or "none"
        raise JobNotFoundError(f"no job {name!r} recorded under {VolumeLayout(volume).runs} (jobs there: {known}); "
                               f"pass the folder standing for the volume with --volume DIR")
    return found[-1]


@dataclass(frozen=True)
class JobStatus:
    """A job's state and progress, summed up for a table row or a progress line.

    Attributes:
        name, backend, state: from the record (``state`` as :func:`effective_state`).
        ready: replicas running or done, by type; total: replicas by type.
        fraction: done fraction in [0, 1] (None: the program reports no progress).
        epoch, epochs, step, steps: the coordinator's latest progress (None when unknown).
        examples_per_sec: the coordinator's throughput (all workers; None when unknown).
        eta_s: estimated seconds left (None when unknown).
        restarts: recreations used; preemptions: recreations after a preemption (not counted); age_s: seconds
            since the job was created.
    """

    name: str
    backend: str
    state: str
    ready: dict[str, int]
    total: dict[str, int]
    fraction: float | None = None
    epoch: int | None = None
    epochs: int | None = None
    step: int | None = None
    steps: int | None = None
    examples_per_sec: float | None = None
    eta_s: float | None = None
    restarts: int = 0
    age_s: float = 0.0
    preemptions: int = 0

    @property
    def attempt(self) -> int:
        """The job's attempt (1 until something was recreated): 1 + restarts + preemptions."""
        return 1 + self.restarts + self.preemptions

    @property
    def replicas_up(self) -> tuple[int, int]:
        """``(running or done, total)`` over every replica type."""
        return sum(self.ready.values()), sum(self.total.values())


def coordinator_progress(progress: Mapping[str, Progress]) -> Progress | None:
    """The progress that stands for the job's: chief-0's, else worker-0's, else the furthest replica's."""
    for label in ("chief-0", "worker-0"):
        if label in progress:
            return progress[label]
    trainers = [p for k, p in progress.items() if not k.startswith(("ps-", "evaluator-"))]
    return max(trainers, key=lambda p: p.fraction or 0.0) if trainers else None


def job_status(record: Mapping[str, Any], progress: Mapping[str, Progress] | None = None,
               now: float | None = None) -> JobStatus:
    """Sum up ``record`` and its replicas' progress files (read from the record's train dir if not given)."""
    now = time.time() if now is None else now
    if progress is None:
        train_dir = (record.get("paths") or {}).get("train_dir")
        progress = read_job_progress(train_dir) if train_dir else {}
    state = effective_state(record)
    total = {t: int(n) for t, n in (record.get("replicas") or {}).items() if int(n)}
    ready = dict.fromkeys(total, 0)
    up = ("Running", "Succeeded") if state == "Running" else ("Succeeded",)  # a lost job's "Running" is stale
    for label, rstate in (record.get("replica_states") or {}).items():
        rtype = label.rsplit("-", 1)[0]
        if rtype in ready and rstate in up:
            ready[rtype] += 1
    p = coordinator_progress(progress)
    fraction = 1.0 if state == "Succeeded" else (p.fraction if p else None)
    created = float(record.get("created") or now)
    eta = None
    if state == "Running" and p and p.state == "running" and fraction and 0.05 <= fraction < 1:
        eta = (now - created) * (1.0 - fraction) / fraction  # start-up included: errs on the long side
    return JobStatus(
        name=record.get("name", "?"), backend=record.get("backend", "?"), state=state, ready=ready, total=total,
        fraction=fraction, epoch=p.epoch if p else None, epochs=p.epochs if p else None,
        step=p.step if p else None, steps=p.steps if p else None,
        examples_per_sec=p.examples_per_sec if p else None, eta_s=eta,
        restarts=int(record.get("restarts") or 0), age_s=max(0.0, now - created),
        preemptions=int(record.get("preemptions") or 0),
    )


class JobRecorder:
    """Keeps ``<train dir>/job.json`` up to date while the launch step runs a job.

    Use :func:`recording` rather than this class directly. :meth:`observe` wraps the launch's log sink: the
    recorder learns from the lines it already gets (``[worker-1] ...`` marks worker-1 running; the
    launcher's ``... succeeded`` and ``(restart N of M)`` messages; every other launcher message becomes an
    event), so the backends need no extra hooks. Thread-safe (sinks are called from several threads).

    Args:
        train_dir: the run's train dir (``<root>/runs/<run id>/train``).
        record: the initial record (see the module docstring).
        clock: Unix seconds (tests may pass their own).
    """

    def __init__(self, train_dir: str | os.PathLike, record: dict[str, Any],
                 clock: Callable[[], float] = time.time):
        self.path = record_path(train_dir)
        self.record = record
        self._clock = clock
        self._lock = threading.RLock()
        self._warned = False

    @classmethod
    def for_job(cls, job: Any, backend: str, train_dir: str | os.PathLike, *, namespace: str = "",
                run_id: str = "", cluster_spec: Mapping[str, list[str]] | None = None,
                local_paths: bool = True) -> JobRecorder:
        """A recorder for the :class:`~tfk8s.core.job.TrainingJob` ``job`` about to start on ``backend``.

        Args:
            local_paths: the replicas see this file system: the recorded paths are made absolute; False (a
                cluster's replicas mount the volume at the same path): recorded as given.
        """
        train = Path(train_dir).resolve() if local_paths else Path(train_dir)
        layout = TrainLayout(train)
        counts = job.counts
        replicas = {t.value: counts.count(t) for t in ReplicaType if counts.count(t)}
        labels = [r.label for r in counts.replicas()]
        record = {
            "format": RECORD_FORMAT, "name": job.name, "backend": backend, "namespace": namespace,
            "run_id": run_id or train.parent.name, "state": "Running", "message": "",
            "replicas": replicas, "replica_states": dict.fromkeys(labels, "Pending"),
            "cluster_spec": dict(cluster_spec or {}), "restarts": 0, "preemptions": 0, "restart_reasons": [],
            "events": [],
            "created": time.time(), "finished": None, "wall_time_s": None,
            "launcher": {"pid": os.getpid(), "host": socket.gethostname()},
            "selector": job_selector(job.name),
            "paths": {
                "train_dir": str(train), "replica_logs": str(layout.replica_logs),
                "checkpoints": str(layout.checkpoints), "tensorboard": str(layout.tensorboard),
                "saved_model": str(layout.saved_model), "progress": str(layout.progress_dir),
                "summary": str(layout.summary), "report": str(layout.report),
            },
            "tensorboard_command": tensorboard_command(train),
        }
        previous = read_record(record_path(train))
        if previous and previous.get("name") == job.name and previous.get("state") == "Running":
            # a restarted launcher re-attaches to the same job: keep its history
            for key in ("created", "events", "restart_reasons", "restarts", "preemptions"):
                record[key] = previous.get(key, record[key])
        return cls(train, record)

    def save(self) -> None:
        """Write the record now (errors are reported once and otherwise ignored: tracking never fails a job)."""
        with self._lock:
            self.record["updated"] = self._clock()
            try:
                write_record(self.path, self.record)
            except OSError as e:
                if not self._warned:
                    self._warned = True
                    print(f"tfk8s: cannot write the job record {self.path}: {e}", flush=True)

    def update(self, **fields: Any) -> None:
        """Set top-level fields and save."""
        with self._lock:
            self.record.update(fields)
            self.save()

    def event(self, message: str) -> None:
        """Append a launcher message (the last :data:`MAX_EVENTS` are kept) and save."""
        with self._lock:
            events = self.record["events"]
            events.append({"time": self._clock(), "message": message})
            del events[:-MAX_EVENTS]
            m = _RESTART.search(message)
            if m:
                self.record["restarts"] = max(self.record["restarts"], int(m.group(1)))
                self.record["restart_reasons"].append({"time": self._clock(), "message": message})
            m = _PREEMPTION.search(message)
            if m:
                self.record["preemptions"] = max(self.record.get("preemptions", 0), int(m.group(1)))
                self.record["restart_reasons"].append({"time": self._clock(), "message": message})
            m = _SUCCEEDED.match(message)
            if m:
                self._set_replica(m.group(1), "Succeeded")
            m = _CLUSTER_SPEC.search(message)
            if m and not self.record["cluster_spec"]:
                try:
                    spec = ast.literal_eval(m.group(1))
                    if isinstance(spec, dict):
                        self.record["cluster_spec"] = spec
                except (ValueError, SyntaxError):
                    pass
            self.save()

    def _set_replica(self, label: str, state: str) -> bool:
        states = self.record["replica_states"]
        if label in states and states[label] != state:
            states[label] = state
            return True
        return False

    def line(self, line: str) -> None:
        """Learn from one output line of the launch (see the class docstring)."""
        m = _LABEL_LINE.match(line)
        if m and m.group(1) != "launcher":
            label = m.group(1)
            with self._lock:
                if (self.record["replica_states"].get(label) in ("Pending", "Stopped", "Failed")
                        and self._set_replica(label, "Running")):
                    self.save()
            return
        message = m.group(2) if m else line
        if line.startswith("[launcher] "):
            message = line[len("[launcher] "):]
        if message.strip():
            self.event(message)

    def observe(self, sink: Callable[[str], None]) -> Callable[[str], None]:
        """``sink`` that also feeds every line to :meth:`line` first."""
        def observed(line: str) -> None:
            try:
                self.line(line)
            except Exception as e:  # noqa: BLE001 - tracking must never fail the training job
                if not self._warned:
                    self._warned = True
                    print(f"tfk8s: job record update failed: {e}", flush=True)
            sink(line)

        return observed

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        """Record the outcome: ``result`` (a :class:`~tfk8s.core.job.LaunchResult`) or ``error``."""
        with self._lock:
            now = self._clock()
            rec = self.record
            states = rec["replica_states"]
            if error is None and result is not None:
                for label, code in result.exit_codes.items():
                    self._set_replica(label, "Succeeded" if code == 0 else "Failed")
                for label in result.stopped:
                    self._set_replica(label, "Stopped")
                rec.update(state="Succeeded", restarts=max(rec["restarts"], int(result.restarts)),
                           preemptions=max(rec.get("preemptions", 0), int(getattr(result, "preemptions", 0))),
                           wall_time_s=result.wall_time_s, cluster_spec=result.cluster_spec or rec["cluster_spec"])
            else:
                failed = getattr(getattr(error, "replica", None), "label", None)
                if failed:
                    self._set_replica(failed, "Failed")
                # a stop signal (LauncherTerminatedError's signum) or Ctrl-C: stopped by someone, not failed
                stopped = isinstance(error, KeyboardInterrupt) or isinstance(getattr(error, "signum", None), int)
                rec.update(state="Stopped" if stopped else "Failed", message=failure_message(error))
            for label, s in states.items():
                if s in ("Pending", "Running"):
                    states[label] = "Stopped"
            rec["finished"] = now
            self.save()


def failure_message(error: BaseException | None) -> str:
    """The first line of ``error``'s message, for the record (an exception without a message, such as a
    KeyboardInterrupt, by its kind: ``interrupted (KeyboardInterrupt)``)."""
    if error is None:
        return "the launch step ended"
    lines = [line for line in str(error).splitlines() if line.strip()]
    if lines:
        return lines[0]
    if isinstance(error, KeyboardInterrupt):
        return "interrupted (KeyboardInterrupt)"
    return type(error).__name__


@contextmanager
def recording(recorder: JobRecorder) -> Iterator[JobRecorder]:
    """Save the record, run the body, and record its outcome: set ``recorder.result`` inside the body; an
    exception is recorded with its first line (a failed job ``Failed``; SIGTERM, Ctrl-C ``Stopped``), then
    re-raised."""
    recorder.result = None  # type: ignore[attr-defined]
    recorder.save()
    try:
        yield recorder
    except BaseException as e:
        recorder.finish(error=e)
        raise
    recorder.finish(result=recorder.result)  # type: ignore[attr-defined]


def merge_live(record: dict[str, Any] | None, live: dict[str, Any] | None) -> dict[str, Any]:
    """A record with the live replica states of its Kubernetes objects laid over it (either may be None)."""
    if record is None:
        return dict(live or {})
    if not live:
        return record
    merged = dict(record)
    merged["replica_states"] = {**(record.get("replica_states") or {}), **live["replica_states"]}
    merged["pods"] = live.get("pods", {})
    merged["restarts"] = max(int(record.get("restarts") or 0), int(live.get("restarts") or 0))
    return merged
