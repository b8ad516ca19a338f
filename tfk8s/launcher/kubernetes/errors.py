"""The ways a Kubernetes training job fails, one exception class each.

All are :class:`~tfk8s.core.errors.LaunchError`; those about one replica are
:class:`~tfk8s.core.errors.ReplicaFailedError` and carry its ``reason`` (``Error``, ``OOMKilled``,
``ImagePullBackOff``, ``Unschedulable``...), exit code and last log lines. Every message says what happened and
what to do.
"""

from __future__ import annotations

from tfk8s.core.errors import (
    LaunchError,
    LauncherTerminatedError,
    ReplicaFailedError,
    RestartBudgetExhaustedError,
)

# LauncherTerminatedError and RestartBudgetExhaustedError are re-exported: they are defined beside the other
# backend-neutral errors.
__all__ = [
    "AdmissionRefusedError",
    "AlreadyExistsError",
    "CleanupError",
    "ContainerConfigError",
    "ImagePullError",
    "KubernetesApiError",
    "KueueQueueError",
    "LauncherTerminatedError",
    "PermanentFailureError",
    "QuotaExceededError",
    "RestartBudgetExhaustedError",
    "ScheduleTimeoutError",
    "VolumeError",
]


class PermanentFailureError(ReplicaFailedError):
    """A replica failed in a way a restart cannot fix (exit code 1-127, a container that cannot start, its
    Job deleted by someone else). Training Operator: exit codes 1-127 are permanent errors."""


class ImagePullError(ReplicaFailedError):
    """The kubelet cannot pull a replica's image (ErrImagePull, ImagePullBackOff, InvalidImageName...).
    Failed fast with the kubelet's message instead of waiting for the schedule deadline."""


class ContainerConfigError(ReplicaFailedError):
    """The kubelet cannot create a replica's container (CreateContainerConfigError: a missing Secret or
    ConfigMap, CreateContainerError...). Failed fast with the kubelet's message."""


class ScheduleTimeoutError(ReplicaFailedError):
    """A replica stayed pending longer than ``schedule_timeout_s``: not scheduled (the message carries the
    scheduler's, or the Job controller's, e.g. quota exceeded, own message), or scheduled but its container
    never started (a volume that cannot be mounted: the kubelet's Warning event). Failing instead of waiting
    also breaks the partial-allocation deadlock of two jobs each holding part of the cluster."""


class QuotaExceededError(ReplicaFailedError):
    """The namespace's ResourceQuota refused a replica's pod (the quota admission's ``exceeded quota: ...``
    message, from the Job controller's ``FailedCreate`` event): failed at once rather than at the schedule
    deadline, since the Job controller would only retry the same request."""


class AdmissionRefusedError(ReplicaFailedError):
    """An admission controller refused a replica's pod for good (a LimitRange, Pod Security admission, a policy
    webhook's denial, an invalid pod spec: :mod:`tfk8s.launcher.kubernetes.admission`): failed at once with the
    Job controller's ``FailedCreate`` message, the setting of ours that produced the refused field and the fix."""


class CleanupError(LaunchError):
    """Objects of the training job were still present after cleanup; the message lists them and the
    ``kubectl delete`` command that removes them."""


class KubernetesApiError(LaunchError):
    """A Kubernetes API call failed for a reason the launcher cannot handle (forbidden, namespace missing,
    API server unreachable). ``status`` is the HTTP status (0 when no response came)."""

    def __init__(self, message: str, status: int = 0):
        self.status = status
        super().__init__(message)


class KueueQueueError(LaunchError):
    """The Kueue LocalQueue named by ``kueue_queue`` does not exist in the namespace, or is inactive: no Job of
    the job would ever be admitted (:mod:`tfk8s.launcher.kubernetes.kueue`); failed before anything is created."""


class VolumeError(RuntimeError):
    """The shared volume (PersistentVolumeClaim) is missing or unusable; the message says how to fix it."""


class AlreadyExistsError(KubernetesApiError):
    """Creating an object failed because one with its name exists (HTTP 409)."""
