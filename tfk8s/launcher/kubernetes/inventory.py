"""What the cluster has of tfk8s jobs now, found by their label ``tfk8s.dev/job-name``, for ``tfk8s get`` and
``tfk8s describe`` (:mod:`tfk8s.cmd`). Removing them is :func:`tfk8s.launcher.kubernetes.cleanup.delete_job_objects`."""

from __future__ import annotations

import time
from typing import Any

from tfk8s.core.job import LABEL_JOB_NAME
from tfk8s.launcher.kubernetes import objects


def _unix(timestamp: str | None) -> float:
    """Unix seconds of a Kubernetes timestamp (``2026-12-01T09:15:08Z``); now when missing or malformed."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(timestamp or "").timestamp()
    except ValueError:
        return time.time()


def live_kubernetes_jobs(api: Any) -> dict[str, dict[str, Any]]:
    """The tfk8s jobs that have objects in ``api``'s namespace now, found by the label ``tfk8s.dev/job-name``.

    Args:
        api: a :class:`tfk8s.launcher.kubernetes.api.KubeApi`.

    Returns:
        ``{job name: {"name", "backend": "kubernetes", "namespace", "replicas": {type: n},
        "replica_states": {label: state}, "pods": {label: pod name}, "restarts", "created"}}``; a replica's
        state is its newest pod's phase (``Pending``, ``Running``, ``Succeeded``, ``Failed``).

    Raises:
        tfk8s.launcher.kubernetes.errors.KubernetesApiError: the API call failed.
    """
    jobs = api.list_jobs(LABEL_JOB_NAME).get("items") or []
    pods = api.list_pods(LABEL_JOB_NAME).get("items") or []
    out: dict[str, dict[str, Any]] = {}
    for obj in jobs:
        meta = obj.get("metadata") or {}
        name = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
        parsed = objects.replica_from_labels(meta.get("labels"))
        if not name or not parsed:
            continue
        entry = out.setdefault(name, {"name": name, "backend": "kubernetes", "namespace": api.namespace,
                                      "replicas": {}, "replica_states": {}, "pods": {}, "restarts": 0,
                                      "created": _unix(meta.get("creationTimestamp")), "_attempts": {}})
        replica = parsed[0]
        rtype = replica.replica_type.value
        if replica.label not in entry["replica_states"]:
            entry["replicas"][rtype] = entry["replicas"].get(rtype, 0) + 1
            entry["replica_states"][replica.label] = "Pending"
        try:
            restarts = int((meta.get("annotations") or {}).get(objects.ANNOTATION_RESTARTS, "0"))
        except ValueError:
            restarts = 0
        entry["restarts"] = max(entry["restarts"], restarts)
        entry["created"] = min(entry["created"], _unix(meta.get("creationTimestamp")))
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or ""):
        meta = pod.get("metadata") or {}
        name = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
        parsed = objects.replica_from_labels(meta.get("labels"))
        if name not in out or not parsed:
            continue
        label = parsed[0].label
        attempts = out[name]["_attempts"]
        if parsed[1] < attempts.get(label, -1):
            continue
        attempts[label] = parsed[1]
        out[name]["replica_states"][label] = (pod.get("status") or {}).get("phase") or "Pending"
        out[name]["pods"][label] = meta.get("name", "")
    for entry in out.values():
        del entry["_attempts"]
        states = set(entry["replica_states"].values())
        entry["state"] = "Failed" if "Failed" in states else "Running"
    return out
