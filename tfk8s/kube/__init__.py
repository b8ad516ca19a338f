"""Kubernetes backend of the launch step: one batch/v1 Job and one headless Service per replica.

Modules, one job each:

- :mod:`tfk8s.kube.settings`  where and how replicas run (:class:`KubernetesSettings`, from the step's params)
- :mod:`tfk8s.kube.objects`   every Service/Job manifest, built as plain data in one place
- :mod:`tfk8s.kube.classify`  pod/Job status -> running, succeeded, or failed how (retryable or not)
- :mod:`tfk8s.kube.api`       the only API calls made (the RBAC Role in ``manifests/rbac.yaml`` mirrors them)
- :mod:`tfk8s.kube.watch`     list-then-watch of pods and Jobs, resuming, re-listing on 410 Gone
- :mod:`tfk8s.kube.logs`      each replica's log streamed with a ``[worker-1]`` prefix
- :mod:`tfk8s.kube.backend`   create / re-attach, wait, restart, report, clean up
- :mod:`tfk8s.kube.errors`    one exception class per way of failing
- :mod:`tfk8s.kube.cli`       the command-line flags of the settings

The entry point is :func:`tfk8s.launcher.kubernetes.run_kubernetes`. Semantics: ``docs/kubernetes.md``.
Only :mod:`~tfk8s.kube.api` and :mod:`~tfk8s.kube.backend` need the ``kubernetes`` client, imported lazily.
"""

from tfk8s.kube.errors import (
    CleanupError,
    ContainerConfigError,
    ImagePullError,
    KubernetesApiError,
    LauncherTerminatedError,
    PermanentFailureError,
    QuotaExceededError,
    RestartBudgetExhaustedError,
    ScheduleTimeoutError,
)
from tfk8s.kube.settings import KubernetesSettings, LauncherPod, ReplicaSettings

__all__ = [
    "CleanupError",
    "ContainerConfigError",
    "ImagePullError",
    "KubernetesApiError",
    "KubernetesSettings",
    "LauncherPod",
    "LauncherTerminatedError",
    "PermanentFailureError",
    "QuotaExceededError",
    "ReplicaSettings",
    "RestartBudgetExhaustedError",
    "ScheduleTimeoutError",
]
