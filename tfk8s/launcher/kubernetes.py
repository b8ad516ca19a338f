"""Kubernetes backend of the launch step: one batch/v1 Job and one headless Service per replica.

The work lives in :mod:`tfk8s.kube` (settings, manifests, watching, failure classes, cleanup); this module is
the backend's entry point next to :mod:`tfk8s.launcher.local`. The ``kubernetes`` client is imported only
when :func:`run_kubernetes` runs, so :mod:`tfk8s.launcher` stays importable without it. Semantics (success
policy, failure classes, restart budget, schedule deadline, cleanup, labels, RBAC): ``docs/kubernetes.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfk8s.kube.objects import render_manifests as _render
from tfk8s.kube.settings import KubernetesSettings
from tfk8s.launcher import LaunchResult, TrainingJob


def _print(line: str) -> None:
    print(line, flush=True)


def render_manifests(job: TrainingJob, settings: KubernetesSettings) -> list[dict[str, Any]]:
    """Every object :func:`run_kubernetes` would create for ``job`` (first attempt), as plain dicts.

    For ``--dry-run``: ``yaml.safe_dump_all(render_manifests(job, settings))`` is ready for review or
    ``kubectl apply -f -``. All Services come first, then all Jobs.
    """
    return _render(job, settings)


def load_api_client() -> Any:
    """A ``kubernetes.client.ApiClient`` from the pod's service account, else from the kubeconfig.

    Raises:
        KubernetesApiError: no credentials found (run in a pod, or set KUBECONFIG).
    """
    from kubernetes import client, config

    from tfk8s.kube.errors import KubernetesApiError

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as e:
            raise KubernetesApiError(
                f"no Kubernetes credentials: run the launcher in a pod with a service account, or point "
                f"KUBECONFIG at a kubeconfig ({e})") from None
    return client.ApiClient()


def run_kubernetes(job: TrainingJob, settings: KubernetesSettings, *, api_client: Any = None,
                   log_sink: Callable[[str], None] = _print) -> LaunchResult:
    """Run ``job`` on Kubernetes and wait until it succeeds or fails; every replica is deleted at the end.

    Args:
        job: the training job.
        settings: namespace, image, resources... (:meth:`KubernetesSettings.from_params`).
        api_client: a ``kubernetes.client.ApiClient``; default: :func:`load_api_client` (closed afterwards).
        log_sink: receives every replica log line (``[worker-1] ...``) and the launcher's own messages
            (``[launcher] ...``); called from several threads, one call at a time.

    Returns:
        :class:`LaunchResult` with the exit codes of the replicas that exited by themselves, the replicas
        stopped after success (ps, laggards after ``job.grace_period_s``), and ``restarts`` used.

    Raises:
        tfk8s.launcher.LaunchError: see :meth:`tfk8s.kube.backend.KubernetesBackend.run` for the subclasses.
    """
    from tfk8s.kube.api import KubeApi
    from tfk8s.kube.backend import KubernetesBackend

    client = api_client if api_client is not None else load_api_client()
    try:
        return KubernetesBackend(job, settings, KubeApi(client, settings.namespace), log_sink).run()
    finally:
        if api_client is None:
            client.close()
