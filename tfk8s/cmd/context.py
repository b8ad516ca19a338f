"""What every verb of the ``tfk8s`` command shares: the volume and the cluster to ask (:class:`Context`), how a
job is found (its record on the volume, with the cluster's live replicas laid over), the user-facing error
(:class:`CtlError`) and the printers (kubectl's table, AGE, ``-o json|yaml``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfk8s.launcher.backends import backend_for, cluster_backends
from tfk8s.tracking import records

EXIT_OK, EXIT_FAILED, EXIT_TIMEOUT, EXIT_NOT_FOUND = 0, 1, 3, 4
EXIT_STOPPED = 5  # tfk8s wait: the job was stopped by someone (Stopped, Deleted), not failed
POLL_S = 0.5
LOST_AFTER_S = 30.0  # a Running Kubernetes record without objects in the cluster, not updated for this long


def _has_cluster(record: dict[str, Any]) -> bool:
    try:
        return bool(backend_for(record).has_cluster)
    except ValueError:  # a backend this version does not know: the record is all there is
        return False


class CtlError(Exception):
    """A user-facing error: printed as ``tfk8s: error: <message>``, exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED):
        super().__init__(message)
        self.code = code


class Context:
    """The volume and (optionally) the cluster a verb works against.

    Args:
        volume: the folder standing for the shared volume (its ``runs/*/train/job.json``).
        namespace: ask the cluster too, in this namespace ("" : only for jobs recorded as Kubernetes ones).
        kube_api: ``kube_api(namespace) -> tfk8s.launcher.kubernetes.api.KubeApi`` (default: the cluster
            backend's :meth:`~tfk8s.launcher.backends.Inspection.connect`, from the kubeconfig or the pod's service
            account).
        out, err: where results and diagnostics go.
    """

    def __init__(self, volume: str | os.PathLike, namespace: str = "",
                 kube_api: Callable[[str], Any] | None = None, out: Any = None, err: Any = None):
        self.volume = Path(volume)
        self.namespace = namespace
        self._kube_api = kube_api
        self._apis: dict[str, Any] = {}
        self.out, self.err = out or sys.stdout, err or sys.stderr

    def say(self, text: str) -> None:
        """Print a result line on the verb's output (stdout)."""
        print(text, file=self.out, flush=True)

    def warn(self, text: str) -> None:
        """Print a diagnostic, ``tfk8s: <text>``, on stderr."""
        print(f"tfk8s: {text}", file=self.err, flush=True)

    def api(self, namespace: str) -> Any | None:
        """The cluster's API for ``namespace`` (None, with a diagnostic, when it cannot be reached)."""
        if namespace in self._apis:
            return self._apis[namespace]
        api = None
        try:
            if self._kube_api is not None:
                api = self._kube_api(namespace)
            else:
                api = self.cluster().connect(namespace)
        except Exception as e:  # noqa: BLE001 - the volume still answers
            self.warn(f"cannot ask the cluster (namespace {namespace or 'default'}): {e}")
        self._apis[namespace] = api
        return api

    @staticmethod
    def in_cluster(record: dict[str, Any]) -> bool:
        """Whether the job of ``record`` lives in a cluster that can be asked about it (its backend's
        :attr:`~tfk8s.launcher.backends.Inspection.has_cluster`)."""
        return _has_cluster(record)

    @staticmethod
    def cluster() -> Any:
        """The backend whose jobs live in a cluster (:func:`tfk8s.launcher.backends.cluster_backends`)."""
        return cluster_backends()[0]

    def api_for(self, record: dict[str, Any]) -> Any | None:
        """The cluster's API for the job of ``record`` (its namespace, else ``--namespace``); None for a backend
        without a cluster, or, with a diagnostic, when the cluster cannot be reached."""
        if not _has_cluster(record):
            return None
        return self.api(record.get("namespace") or self.namespace)

    def events(self, record: dict[str, Any], api: Any) -> list[dict[str, Any]]:
        """The cluster's events of the job's replicas (:meth:`~tfk8s.launcher.backends.Inspection.events`)."""
        return backend_for(record).events(record, api, self.warn)

    def live(self, namespace: str) -> dict[str, dict[str, Any]] | None:
        """The jobs with objects in ``namespace`` now (the cluster backend's
        :meth:`~tfk8s.launcher.backends.Inspection.live_jobs`); None, with a diagnostic, when the cluster cannot
        be asked."""
        api = self.api(namespace)
        if api is None:
            return None
        try:
            return self.cluster().live_jobs(api)
        except Exception as e:  # noqa: BLE001
            self.warn(f"cannot list the jobs in namespace {namespace}: {e}")
            return None

    @staticmethod
    def state(record: dict[str, Any]) -> str:
        """The record's state, ``Lost`` when the backend that ran it says its launcher is gone
        (:meth:`~tfk8s.launcher.backends.Inspection.launcher_lost`: a local launcher's process on this host)."""
        try:
            lost = backend_for(record).launcher_lost
        except ValueError:  # a backend this version does not know: the state as written
            return records.effective_state(record)
        return records.effective_state(record, lost)

    @classmethod
    def settle(cls, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` with its state as :meth:`state` reads it (``Lost`` written in, so that every later reader,
        :func:`tfk8s.tracking.records.job_status` among them, sees it)."""
        state = cls.state(record)
        return record if state == record.get("state", "Running") else {**record, "state": state}

    @classmethod
    def overlay(cls, record: dict[str, Any], found: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
        """A running job's record with what its backend knows now: ``Lost`` when its launcher is known to be
        gone (:meth:`settle`); for a job in a cluster (``found``: the live jobs of its namespace, None when the
        cluster was not asked) its live replicas laid over, and ``Lost`` when the cluster says it has no objects
        left while the record, not updated for :data:`LOST_AFTER_S`, still says Running (its launcher was
        stopped or its pod deleted before it could record the outcome)."""
        record = cls.settle(record)
        if record.get("state", "Running") != "Running" or found is None or not _has_cluster(record):
            return record
        live = found.get(record["name"])
        if live is None:
            if time.time() - float(record.get("updated") or record.get("created") or 0) > LOST_AFTER_S:
                return {**record, "state": "Lost", "message": "the cluster has no objects of this job and its "
                        "launcher recorded no outcome (it was stopped, or its pod deleted)"}
            return record
        return records.merge_live(record, live)

    def records(self) -> list[dict[str, Any]]:
        """Every job recorded on the volume, oldest first (:func:`tfk8s.tracking.records.list_records`), each
        state as :meth:`settle` reads it."""
        return [self.settle(r) for r in records.list_records(self.volume)]

    def find(self, name: str) -> dict[str, Any]:
        """The job ``name`` (or run id): its record with live replica states laid over (Kubernetes), or only
        what the cluster knows when the volume has no record.

        Raises:
            CtlError: no such job (exit code 4).
        """
        try:
            record: dict[str, Any] | None = records.find_record(self.volume, name)
        except records.JobNotFoundError as e:
            record, missing = None, str(e)
        namespace = (record or {}).get("namespace") or self.namespace
        if record is None:
            found = self.live(namespace) if self.namespace else None
            if not (found or {}).get(name):
                raise CtlError(f"{missing}; nor is there a job {name} in namespace {namespace}"
                               if self.namespace else missing, EXIT_NOT_FOUND)
            return dict(found[name])
        if _has_cluster(record):
            return self.overlay(record, self.live(namespace))
        return self.settle(record)


def age(seconds: float) -> str:
    """kubectl's AGE: ``45s``, ``5m``, ``3h``, ``2d``."""
    s = int(max(0, seconds))
    if s < 120:
        return f"{s}s"
    if s < 3 * 3600:
        return f"{s // 60}m"
    if s < 2 * 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def table(rows: list[list[str]]) -> str:
    """``rows`` (the first is the header) as kubectl prints a table: left-aligned columns, 3 spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def dump(data: Any, fmt: str) -> str:
    """``data`` as ``-o json`` (indented) or ``-o yaml`` prints it."""
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    import yaml

    return yaml.safe_dump(data, sort_keys=False).rstrip()


def when(t: float) -> str:
    """Unix seconds as local ``YYYY-MM-DD HH:MM:SS``."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def status_dict(s: records.JobStatus) -> dict[str, Any]:
    """A job's status as the fields ``-o json|yaml`` shows (``progress`` is the done fraction in [0, 1])."""
    return {"name": s.name, "backend": s.backend, "state": s.state, "ready": s.ready, "total": s.total,
            "progress": s.fraction, "epoch": s.epoch, "epochs": s.epochs, "step": s.step, "steps": s.steps,
            "examples_per_sec": s.examples_per_sec, "eta_s": s.eta_s, "restarts": s.restarts,
            "preemptions": s.preemptions,
            "age_s": round(s.age_s, 1)}
