"""Command-line flags of the Kubernetes settings, named like the KFP component's parameters.

``--replica-overrides '{"ps": {"cpu": "500m"}}'`` becomes ``replica_overrides`` of
:meth:`~tfk8s.kube.settings.KubernetesSettings.from_params`; every flag's default is that parameter's default.
The PVC's mount path has no flag: it is the launch step's ``--volume-root`` (``/mnt/tfk8s`` in a cluster), so
the replicas see the volume where the pipeline's steps do.
"""

from __future__ import annotations

import argparse

from tfk8s import DEFAULT_IMAGE
from tfk8s.kube.settings import KubernetesSettings

# (flag, type, default, help); the destination is the flag without "--", "-" -> "_".
_FLAGS: tuple[tuple[str, type, object, str], ...] = (
    ("--namespace", str, "", "namespace of the replicas (default: the launcher pod's own, else 'default')"),
    ("--image", str, DEFAULT_IMAGE, "container image of the replicas"),
    ("--pvc-name", str, "", "PersistentVolumeClaim with the data and model, mounted in every replica"),
    ("--cpu", str, "1", "CPU request = limit of each replica (a quantity: 2, 500m)"),
    ("--memory", str, "2Gi", "memory request = limit of each replica (a quantity: 4Gi)"),
    ("--gpus", int, 0, "nvidia.com/gpu per replica"),
    ("--node-selector", str, "", 'JSON object of node labels, e.g. \'{"pool": "gpu"}\''),
    ("--tolerations", str, "", "JSON list of Kubernetes tolerations"),
    ("--service-account", str, "", "service account of the replicas"),
    ("--replica-overrides", str, "",
     ('JSON object per replica type overriding image, command, cpu, memory, cpu_limit, memory_limit, gpus, '
     'node_selector, tolerations, service_account, env; e.g. \'{"ps": {"cpu": "500m", "gpus": 0}}\'')),
    ("--cluster-domain", str, "", ("cluster DNS domain appended to Service names (e.g. cluster.local); "
                                  "empty: <svc>.<ns>.svc")),
    ("--schedule-timeout-s", int, 600, "seconds a replica may stay pending (unscheduled or not started) before the job fails"),
    ("--max-restarts", int, 3, ("recreations allowed for retryable failures (exit >= 128, killed by a signal, OOMKilled, eviction, no "
                                   "progress...), on either backend")),
    ("--ttl-seconds-after-finished", int, 3600, "seconds Kubernetes keeps a finished Job (a backstop)"),
    ("--kueue-queue", str, "", "Kueue LocalQueue name (label kueue.x-k8s.io/queue-name on every Job)"),
    ("--scheduler-name", str, "", "schedulerName of the replica pods (e.g. volcano)"),
)


def add_kubernetes_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the settings' flags (``--namespace ... --scheduler-name``) to ``parser`` in their own group."""
    group = parser.add_argument_group("kubernetes backend")
    for flag, kind, default, help_text in _FLAGS:
        group.add_argument(flag, type=kind, default=default, help=f"{help_text} (default: {default!r})")


def settings_from_args(args: argparse.Namespace) -> KubernetesSettings:
    """:meth:`KubernetesSettings.from_params` from parsed flags.

    Raises:
        ValueError: a bad value (the message names the parameter).
    """
    params = {flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_")) for flag, *_ in _FLAGS}
    return KubernetesSettings.from_params(**params)
