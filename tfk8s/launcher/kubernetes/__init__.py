"""The Kubernetes backend: one batch/v1 Job and one headless Service per replica, as the Training Operator's TFJob.

Its modules, one job each:

- :mod:`~tfk8s.launcher.kubernetes.settings`  where and how replicas run (the user's ``kubernetes`` parameters)
- :mod:`~tfk8s.launcher.kubernetes.values`    checking the values given: quantities, JSON, names, numbers
- :mod:`~tfk8s.launcher.kubernetes.objects`   every manifest (Service, Job, NetworkPolicy, PodGroup, PVC) as data
- :mod:`~tfk8s.launcher.kubernetes.api`       the only module that calls the API (``manifests/rbac.yaml`` mirrors it)
- :mod:`~tfk8s.launcher.kubernetes.watch`     list-then-watch of pods and Jobs, resuming, re-listing on 410 Gone
- :mod:`~tfk8s.launcher.kubernetes.logs`      each replica's log streamed with a ``[worker-1]`` prefix
- :mod:`~tfk8s.launcher.kubernetes.classify`  pod/Job status -> running, succeeded, or failed how
- :mod:`~tfk8s.launcher.kubernetes.backend`   the loop: the watches' events -> replica views -> the engine's decision
  (:mod:`tfk8s.launcher.engine`) -> Jobs and pods created or deleted
- :mod:`~tfk8s.launcher.kubernetes.state`     the run's state (:class:`~tfk8s.launcher.kubernetes.state.KubeRun`), which
  the functions of backend, creation, failures and cleanup take, and each replica's current attempt
- :mod:`~tfk8s.launcher.kubernetes.creation`  create or re-attach to a job's objects
- :mod:`~tfk8s.launcher.kubernetes.failures`  a failed replica's error: reason, last lines, events, the fix
- :mod:`~tfk8s.launcher.kubernetes.cleanup`   delete every object of a job and check that none remain
- :mod:`~tfk8s.launcher.kubernetes.inventory` the jobs the cluster has now, by label (for ``tfk8s``)
- :mod:`~tfk8s.launcher.kubernetes.parallel`  many requests a few at a time
- :mod:`~tfk8s.launcher.kubernetes.volume`    the ensure-volume step's PersistentVolumeClaim check
- :mod:`~tfk8s.launcher.kubernetes.errors`    one exception class per way of failing

The entry points are here: :func:`run_kubernetes`, :func:`render_manifests` (``--dry-run``) and ``BACKEND`` (the
registry's, :mod:`tfk8s.launcher.backends`). The ``kubernetes`` client is imported only when a job runs.
Semantics (success policy, failure classes, restart budget, schedule deadline, cleanup, labels, RBAC):
``docs/kubernetes.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tfk8s.core.job import LaunchResult, TrainingJob
from tfk8s.launcher.kubernetes.objects import render_manifests as _render
from tfk8s.launcher.kubernetes.settings import KubernetesSettings


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

    from tfk8s.launcher.kubernetes.errors import KubernetesApiError

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
        tfk8s.core.errors.LaunchError: see :func:`tfk8s.launcher.kubernetes.backend.run` for the subclasses.
    """
    from tfk8s.launcher.kubernetes.api import KubeApi
    from tfk8s.launcher.kubernetes.backend import run
    from tfk8s.launcher.kubernetes.state import KubeRun

    client = api_client if api_client is not None else load_api_client()
    try:
        return run(KubeRun.new(job, settings, KubeApi(client, settings.namespace), log_sink))
    finally:
        if api_client is None:
            client.close()


class Kubernetes:
    """The ``kubernetes`` backend of :mod:`tfk8s.launcher.backends`: :func:`run_kubernetes` with the settings
    built from ``options`` (:meth:`KubernetesSettings.from_params`); the launch step keeps the replicas' logs."""

    name = "kubernetes"
    keeps_replica_logs = False

    def namespace(self, options: Mapping[str, Any]) -> str:
        return KubernetesSettings.from_params(**dict(options)).namespace

    def run(self, job: TrainingJob, log_sink: Callable[[str], None], options: Mapping[str, Any]) -> LaunchResult:
        return run_kubernetes(job, KubernetesSettings.from_params(**dict(options)), log_sink=log_sink)


BACKEND = Kubernetes()
