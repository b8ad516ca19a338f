"""The backends by name: one protocol, one registry (in the spirit of Kubeflow Trainer v2's runtime registry).

A backend module exports ``BACKEND``, an object with the :class:`Backend` protocol; :func:`get_backend` imports
it when it is first asked for, so the Kubernetes client is loaded only for Kubernetes jobs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from tfk8s.core.job import LaunchResult, TrainingJob

LogSink = Callable[[str], None]

_REGISTRY: dict[str, str] = {
    "local": "tfk8s.launcher.local",
    "kubernetes": "tfk8s.launcher.kubernetes",
}
BACKENDS: tuple[str, ...] = tuple(_REGISTRY)
"""The backend names, as the pipeline's ``backend`` parameter takes them."""


class Backend(Protocol):
    """What the launch step needs of a backend.

    Attributes:
        name: the registry name (``local``, ``kubernetes``).
        keeps_replica_logs: the backend itself writes every replica's log to ``<train dir>/replica-logs/``;
            otherwise the launch step keeps them from the lines the backend sends (:mod:`tfk8s.tracking`).
    """

    name: str
    keeps_replica_logs: bool

    def namespace(self, options: Mapping[str, Any]) -> str:
        """Where the job's replicas live, for the job record (``""`` when the backend has no namespaces).

        Raises:
            ValueError: bad ``options`` (the message names the setting).
        """

    def run(self, job: TrainingJob, log_sink: LogSink, options: Mapping[str, Any]) -> LaunchResult:
        """Run ``job`` until it succeeds or fails; every replica is stopped at the end.

        Args:
            log_sink: receives every replica's output line (``[worker-1] ...``) and the launcher's messages.
            options: the backend's own settings (Kubernetes: the keywords of
                :meth:`~tfk8s.launcher.kubernetes.settings.KubernetesSettings.from_params`; local: none).

        Raises:
            tfk8s.core.errors.LaunchError: a replica failed, the job timed out, the launcher was stopped.
        """


def get_backend(name: str) -> Backend:
    """The backend registered as ``name``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if name not in _REGISTRY:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    return importlib.import_module(_REGISTRY[name]).BACKEND
