"""The backends by name: what a backend provides, one small protocol per extension point, and one registry (in
the spirit of Kubeflow Trainer v2's small plugin interfaces and its runtime registry).

Outside :mod:`tfk8s.launcher` this module is the only door into the backends (``tests/project/test_layers.py``), and no
code outside asks a backend's name (no ``backend == "..."``): it asks the backend.

A backend module exports ``BACKEND``, an object with some of these protocols; :func:`get_backend` imports it
when it is first asked for, so the Kubernetes client is loaded only for Kubernetes jobs.

- :class:`Launch`      the launch step: the backend's options validated once into a typed object
  (:meth:`Launch.options`), the program every replica runs (:meth:`Launch.program`), a ``--dry-run`` rendering
  (:meth:`Launch.dry_run`) and the run itself (:meth:`Launch.run`);
- :class:`Volume`      the ensure-volume step: the shared volume exists before anything mounts it;
- :class:`Inspection`  the ``tfk8s`` verbs: a job's live state, stopping it, its logs and events from where
  the replicas run.

Both registered backends provide all three (``tests/launcher/test_backends.py``); :func:`backend_for` names the
backend of a job record, :func:`provides` says whether a backend has a capability.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tfk8s.core.job import LaunchResult, TrainingJob

if TYPE_CHECKING:  # the Kubernetes client is imported only for Kubernetes jobs
    from tfk8s.launcher.kubernetes.settings import KubernetesParams

LogSink = Callable[[str], None]

_REGISTRY: dict[str, str] = {
    "local": "tfk8s.launcher.local",
    "kubernetes": "tfk8s.launcher.kubernetes",
}
BACKENDS: tuple[str, ...] = tuple(_REGISTRY)
"""The backend names, as the pipeline's ``backend`` parameter takes them."""


@dataclass(frozen=True)
class DryRun:
    """What a launch would do, without doing it (``--dry-run``).

    Attributes:
        documents: plain dicts, one per thing the backend would create (Kubernetes: every manifest, ready for
            ``yaml.safe_dump_all`` and ``kubectl apply -f -``; local: one per process, with its ``replica``,
            ``command``, ``env`` (the job's and the contract's variables, TF_CONFIG among them) and ``cwd``).
        notes: sentences for the person (stderr), not part of the documents.
    """

    documents: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


@runtime_checkable
class Launch(Protocol):
    """What the launch step needs of a backend.

    Attributes:
        name: the registry name (``local``, ``kubernetes``).
        keeps_replica_logs: the backend itself writes every replica's log to ``<train dir>/replica-logs/``;
            otherwise the launch step keeps them from the lines the backend sends (:mod:`tfk8s.tracking`).
        local_paths: the replicas see the launcher's file system (paths in the job record are made absolute);
            otherwise they mount the volume at the same path (the path is recorded as given).
    """

    name: str
    keeps_replica_logs: bool
    local_paths: bool

    def options(self, kubernetes: KubernetesParams, volume_root: str) -> Any:
        """The backend's own settings, checked once, as the typed object :meth:`namespace`, :meth:`dry_run` and
        :meth:`run` take (Kubernetes: a :class:`~tfk8s.launcher.kubernetes.settings.KubernetesSettings` resolved
        from the typed ``kubernetes`` parameters, the claim mounted at ``volume_root``; local: None, both unused).
        Called once per launch, by :meth:`tfk8s.steps.parameters.LaunchSpec.from_params`.

        Raises:
            ValueError: a bad setting (the message names it and the fix).
        """

    def namespace(self, options: Any) -> str:
        """Where the job's replicas live, for the job record (``""`` when the backend has no namespaces)."""

    def program(self, argv: Sequence[str]) -> tuple[str, ...]:
        """The argv every replica runs for the job's ``argv`` (local: a leading ``python``/``python3`` becomes
        the launcher's own interpreter, :func:`tfk8s.core.contract.local_python`; in a cluster: as given, the
        image's)."""

    def dry_run(self, job: TrainingJob, options: Any) -> DryRun:
        """What :meth:`run` would start for ``job`` (its first attempt), started nothing."""

    def run(self, job: TrainingJob, log_sink: LogSink, options: Any) -> LaunchResult:
        """Run ``job`` until it succeeds or fails; every replica is stopped at the end.

        Args:
            log_sink: receives every replica's output line (``[worker-1] ...``) and the launcher's messages.
            options: what :meth:`options` returned.

        Raises:
            tfk8s.core.errors.LaunchError: a replica failed, the job timed out, the launcher was stopped.
        """


@runtime_checkable
class Volume(Protocol):
    """What the ensure-volume step needs of a backend: the shared volume, there before any step mounts it."""

    def ensure_volume(self, *, volume_root: str, pvc_name: str, namespace: str = "", create: bool = False,
                      size: str = "20Gi", storage_class: str = "", api_client: Any = None) -> dict[str, Any]:
        """Make sure the volume exists (local: the folder ``volume_root``; Kubernetes: the PersistentVolumeClaim
        ``pvc_name`` in ``namespace``, created when ``create``).

        Returns:
            What the step reports besides ``backend`` and ``volume_root`` (Kubernetes: the claim's ``name``,
            ``namespace``, ``created``, ``phase``, ``access_modes``; local: nothing).

        Raises:
            tfk8s.core.volume.VolumeWriteError: local, the folder cannot be made.
            tfk8s.launcher.kubernetes.errors.VolumeError: Kubernetes, the claim is missing or unusable.
        """


@runtime_checkable
class Inspection(Protocol):
    """What the ``tfk8s`` verbs need of a backend to see and stop a job of theirs.

    Attributes:
        has_cluster: the backend's jobs live in a cluster that can be asked about them (its live replicas, by
            namespace: :meth:`connect`, :meth:`live_jobs`); otherwise the job record and this host are all.

    A ``connect``-ed API is what :meth:`live_jobs`, :meth:`stop`, :meth:`events` and :meth:`logs` take as
    ``api`` (None for a backend without a cluster).
    """

    has_cluster: bool

    def connect(self, namespace: str) -> Any:
        """An API for ``namespace`` (Kubernetes: a ``KubeApi`` from the kubeconfig or the pod's service account).

        Raises:
            Exception: the cluster cannot be reached (the message says why); a backend without a cluster
                raises ValueError.
        """

    def live_jobs(self, api: Any) -> dict[str, dict[str, Any]]:
        """The jobs that have replicas in ``api``'s namespace now, as records (``{name: {...}}``)."""

    def launcher_lost(self, record: Mapping[str, Any]) -> bool:
        """Whether the record says Running while its launcher is known to be gone (local: its process on this
        host has exited; a cluster backend answers from :meth:`live_jobs` instead: False)."""

    def stop(self, record: Mapping[str, Any], api: Any) -> None:
        """Stop the running job ``record`` (local: SIGTERM to its launcher, which stops every replica;
        Kubernetes: delete its Jobs, Services, pods, NetworkPolicy and PodGroup, as the launcher's own cleanup).
        Its files stay on the volume.

        Raises:
            ValueError: the job cannot be stopped from here (the message says where it can).
        """

    def events(self, record: Mapping[str, Any], api: Any, warn: Callable[[str], None]) -> list[dict[str, Any]]:
        """The cluster's events of the job's replicas (``[]`` without a cluster); what cannot be listed is
        ``warn``-ed and left out."""

    def logs(self, record: Mapping[str, Any], labels: Sequence[str], api: Any, *, follow: bool,
             say: Callable[[str], None], warn: Callable[[str], None]) -> bool:
        """Print the chosen replicas' logs from where they run (when the volume has none yet): ``say`` each
        line (``[label]``-prefixed with more than one label), ``warn`` a replica that has none.

        Returns:
            False when this backend has no such place (local: the volume's ``replica-logs/`` is all).
        """


@runtime_checkable
class Backend(Launch, Volume, Inspection, Protocol):
    """A registered backend: every extension point (both registered backends provide all three)."""


def get_backend(name: str) -> Backend:
    """The backend registered as ``name`` (an object with :class:`Launch`, :class:`Volume`, :class:`Inspection`).

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if name not in _REGISTRY:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    return importlib.import_module(_REGISTRY[name]).BACKEND


def backend_for(record: Mapping[str, Any] | None) -> Backend:
    """The backend that ran the job of ``record`` (a job record or a live job, by its ``backend``; ``local``
    when it names none, as records of the first format).

    Raises:
        ValueError: a backend this version does not know (the message lists the known ones).
    """
    return get_backend(str((record or {}).get("backend") or "local"))


def provides(name: str, capability: type) -> bool:
    """Whether backend ``name`` implements ``capability`` (:class:`Launch`, :class:`Volume`, :class:`Inspection`)."""
    return isinstance(get_backend(name), capability)


def mounts_claim(name: str) -> bool:
    """Whether backend ``name``'s steps and replicas mount the shared volume as a claim at one path (Kubernetes'
    PersistentVolumeClaim: the volume root is fixed and the claim must be named); False for an unknown name or a
    backend whose replicas see the launcher's file system (:attr:`Launch.local_paths`)."""
    return name in _REGISTRY and not get_backend(name).local_paths


def user_errors() -> tuple[type[BaseException], ...]:
    """The backends' own exceptions whose messages say what to do (a step's CLI prints them as one ``error:``
    line; Kubernetes: an API call that failed, a missing or unusable claim), from each backend's ``user_errors``."""
    return tuple(e for n in BACKENDS for e in getattr(get_backend(n), "user_errors", ()))


def cluster_backends() -> list[Backend]:
    """The registered backends whose jobs live in a cluster that can be asked (:attr:`Inspection.has_cluster`)."""
    return [b for b in (get_backend(n) for n in BACKENDS) if getattr(b, "has_cluster", False)]
