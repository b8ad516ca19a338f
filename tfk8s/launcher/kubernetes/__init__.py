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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfk8s.core.job import LaunchResult, TrainingJob
from tfk8s.launcher.backends import DryRun
from tfk8s.launcher.kubernetes.errors import KubernetesApiError, VolumeError
from tfk8s.launcher.kubernetes.objects import render_manifests as _render
from tfk8s.launcher.kubernetes.settings import KubernetesParams, KubernetesSettings


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
    """The ``kubernetes`` backend of :mod:`tfk8s.launcher.backends` (launch, volume, inspection):
    :func:`run_kubernetes` with the settings checked once (:meth:`options`); the launch step keeps the replicas'
    logs."""

    name = "kubernetes"
    keeps_replica_logs = False
    local_paths = False
    has_cluster = True
    user_errors = (KubernetesApiError, VolumeError)

    # -- launch ---------------------------------------------------------------------------------------------
    def options(self, kubernetes: KubernetesParams, volume_root: str) -> KubernetesSettings:
        """:meth:`KubernetesSettings.resolve` of the typed ``kubernetes`` parameters, the claim mounted at
        ``volume_root`` in every replica; once per launch.

        Raises:
            ValueError: a bad value (the message names the parameter).
        """
        return KubernetesSettings.resolve(kubernetes, volume_mount_path=volume_root)

    def namespace(self, options: KubernetesSettings) -> str:
        return options.namespace

    def program(self, argv: Sequence[str]) -> tuple[str, ...]:
        return tuple(argv)  # the image's python

    def dry_run(self, job: TrainingJob, options: KubernetesSettings) -> DryRun:
        """Every manifest :func:`run_kubernetes` would create (:func:`render_manifests`); the note says who owns
        the objects (the launcher pod) when that is known."""
        return DryRun(render_manifests(job, options), [options.owner_note()] if options.owner_note() else [])

    def run(self, job: TrainingJob, log_sink: Callable[[str], None], options: KubernetesSettings) -> LaunchResult:
        return run_kubernetes(job, options, log_sink=log_sink)

    # -- volume ---------------------------------------------------------------------------------------------
    def ensure_volume(self, *, volume_root: str, pvc_name: str, namespace: str = "", create: bool = False,
                      size: str = "20Gi", storage_class: str = "", api_client: Any = None) -> dict[str, Any]:
        """PersistentVolumeClaim ``pvc_name`` in ``namespace`` (empty: this pod's) exists, or is created when
        ``create`` (:func:`tfk8s.launcher.kubernetes.volume.ensure_pvc`); ``api_client``: default
        :func:`load_api_client` (closed afterwards).

        Raises:
            tfk8s.launcher.kubernetes.errors.VolumeError: the claim is missing (and not to be created) or unusable.
        """
        from tfk8s.launcher.kubernetes.api import KubeApi
        from tfk8s.launcher.kubernetes.settings import resolve_namespace
        from tfk8s.launcher.kubernetes.volume import ensure_pvc

        client = api_client or load_api_client()
        try:
            return ensure_pvc(KubeApi(client, resolve_namespace(namespace)), pvc_name, create=create, size=size,
                              storage_class=storage_class)
        finally:
            if api_client is None:
                client.close()

    # -- inspection -----------------------------------------------------------------------------------------
    def connect(self, namespace: str) -> Any:
        """A ``KubeApi`` for ``namespace`` (empty: this pod's, else ``default``) from :func:`load_api_client`."""
        from tfk8s.launcher.kubernetes.api import KubeApi
        from tfk8s.launcher.kubernetes.settings import resolve_namespace

        return KubeApi(load_api_client(), resolve_namespace(namespace))

    def live_jobs(self, api: Any) -> dict[str, dict[str, Any]]:
        """:func:`tfk8s.launcher.kubernetes.inventory.live_kubernetes_jobs`."""
        from tfk8s.launcher.kubernetes.inventory import live_kubernetes_jobs

        return live_kubernetes_jobs(api)

    def launcher_lost(self, record: Mapping[str, Any]) -> bool:
        return False  # the cluster says it (live_jobs): no objects left while the record says Running

    def stop(self, record: Mapping[str, Any], api: Any) -> None:
        """Delete the job's Jobs, Services, pods, NetworkPolicy and PodGroup
        (:func:`tfk8s.launcher.kubernetes.cleanup.delete_job_objects`, the launcher's own cleanup).

        Raises:
            ValueError: no ``api`` (the cluster cannot be reached).
        """
        from tfk8s.launcher.kubernetes.cleanup import delete_job_objects

        if api is None:
            raise ValueError(f"cannot reach the cluster to delete {record.get('name')}")
        delete_job_objects(api, str(record["name"]))

    def events(self, record: Mapping[str, Any], api: Any, warn: Callable[[str], None]) -> list[dict[str, Any]]:
        """The events of every pod the record names (the newest attempt's); a pod whose events cannot be listed
        is warned of and the others still listed (events are a bonus)."""
        found: list[dict[str, Any]] = []
        for pod in (record.get("pods") or {}).values():
            try:
                found += api.list_events(pod)
            except Exception as e:  # noqa: BLE001
                warn(f"cannot list the events of pod {pod}: {e}")
        return found

    def logs(self, record: Mapping[str, Any], labels: Sequence[str], api: Any, *, follow: bool,
             say: Callable[[str], None], warn: Callable[[str], None]) -> bool:
        """Every chosen replica's log from its live pod. A pod whose container has not started (pulling its
        image, or failing to) has no log: a real kubelet answers 400 ``container ... is waiting to start:
        ...``; that replica is warned of and the others are still printed. False when the record names no pods.

        Raises:
            ValueError: no ``api`` (the cluster cannot be asked).
        """
        from tfk8s.launcher.kubernetes.api import close_stream, iter_lines
        from tfk8s.launcher.kubernetes.objects import CONTAINER_NAME

        if not record.get("pods"):
            return False
        if api is None:
            raise ValueError(f"the volume holds no log of {record.get('name')} and the cluster cannot be asked")
        prefix = len(labels) > 1
        for label in labels:
            pod = (record.get("pods") or {}).get(label)
            if not pod:
                warn(f"{label} has no pod")
                continue
            try:
                if follow and len(labels) == 1:
                    resp = api.open_log(pod, CONTAINER_NAME)
                    try:
                        for line in iter_lines(resp):
                            say(line)
                    finally:
                        close_stream(resp)
                else:
                    for line in api.read_log_tail(pod, CONTAINER_NAME, 10**6):
                        say(f"[{label}] {line}" if prefix else line)
            except KubernetesApiError as e:
                if e.status != 400:
                    raise
                warn(f"{label} has no log yet (pod {pod}): {str(e).split(': 400 ', 1)[-1]}")
        return True


BACKEND = Kubernetes()
