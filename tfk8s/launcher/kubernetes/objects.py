"""Every Kubernetes object of a training job, built as plain data in one place.

Per replica ``<job>-<type>-<index>`` (:func:`tfk8s.core.cluster.replica_name`, as the Training Operator names them):

- a headless Service (``clusterIP: None``) selecting that replica's pod, so that
  ``<name>.<namespace>.svc[.<cluster domain>]:<port>`` resolves to it;
- a batch/v1 Job running one pod with TF_CONFIG built by :func:`tfk8s.core.cluster.cluster_spec` from those
  Service addresses (the same cluster-spec code as the local backend), the contract's variables of
  :func:`tfk8s.core.contract.replica_env` and its command's placeholders substituted for that replica.

The Job never retries on its own (``backoffLimit: 0``, ``restartPolicy: Never``): the launcher classifies a
failure and decides whether to recreate it (Training Operator: the TFJob controller owns restarts, not the
Job/pod). Every object carries the labels of :func:`replica_labels`, so
``kubectl get pods -l tfk8s.dev/job-name=<job>`` finds a job's replicas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tfk8s.core.cluster import ClusterSpec, Replica, ReplicaType, cluster_spec, replica_name, tf_config_json
from tfk8s.core.contract import ENV_SM_NUM_GPUS
from tfk8s.core.job import LABEL_JOB_NAME, TrainingJob
from tfk8s.core.proxy import no_proxy_env
from tfk8s.launcher.kubernetes.settings import KubernetesSettings
from tfk8s.launcher.kubernetes.values import shm_of

LABEL_REPLICA_TYPE = "tfk8s.dev/replica-type"
LABEL_REPLICA_INDEX = "tfk8s.dev/replica-index"
LABEL_ATTEMPT = "tfk8s.dev/attempt"
ANNOTATION_RESTARTS = "tfk8s.dev/restarts"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ISTIO_INJECT = "sidecar.istio.io/inject"
APP_NAME = "tfk8s"
MANAGED_BY = "tfk8s-launcher"
CONTAINER_NAME = "tensorflow"  # the Training Operator's default TFJob container name
PORT_NAME = "tfjob-port"  # ditto
VOLUME_NAME = "tfk8s-data"
HOSTNAME_KEY = "kubernetes.io/hostname"
POD_GROUP_API = ("scheduling.k8s.io", "v1beta1", "podgroups")  # Kubernetes' native gang scheduling (1.37 beta)
TRAINERS = ("chief", "worker")  # spread over nodes together; the ps apart from them


def replica_labels(job_name: str, replica: Replica) -> dict[str, str]:
    """The labels of a replica's Service, Job and pod (without the attempt, which only Jobs and pods carry)."""
    return {
        "app.kubernetes.io/name": APP_NAME,
        "app.kubernetes.io/instance": job_name,
        "app.kubernetes.io/component": replica.replica_type.value,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        LABEL_JOB_NAME: job_name,
        LABEL_REPLICA_TYPE: replica.replica_type.value,
        LABEL_REPLICA_INDEX: str(replica.index),
    }


def replica_from_labels(labels: dict[str, str] | None) -> tuple[Replica, int] | None:
    """``(replica, attempt)`` named by an object's labels; None when they are missing or malformed."""
    labels = labels or {}
    try:
        replica = Replica(ReplicaType(labels[LABEL_REPLICA_TYPE]), int(labels[LABEL_REPLICA_INDEX]))
        return replica, int(labels.get(LABEL_ATTEMPT, "0"))
    except (KeyError, ValueError):
        return None


def service_host(job_name: str, replica: Replica, settings: KubernetesSettings) -> str:
    """DNS name of a replica's headless Service: ``<name>.<namespace>.svc`` (+ ``.<cluster domain>``)."""
    host = f"{replica_name(job_name, replica)}.{settings.namespace}.svc"
    return f"{host}.{settings.cluster_domain}" if settings.cluster_domain else host


def training_cluster_spec(job: TrainingJob, settings: KubernetesSettings) -> ClusterSpec:
    """The job's TensorFlow cluster spec: every replica's ``<service host>:<port>``."""
    return cluster_spec(job.counts, lambda r: f"{service_host(job.name, r, settings)}:{job.port}")


def no_proxy_hosts(job: TrainingJob, settings: KubernetesSettings) -> list[str]:
    """What a replica's ``NO_PROXY`` names (:mod:`tfk8s.core.proxy`): every replica's Service host, the
    namespace's ``.<namespace>.svc`` domain and, when set, ``.<cluster domain>``."""
    hosts = [service_host(job.name, r, settings) for r in job.counts.replicas()]
    hosts.append(f".{settings.namespace}.svc")
    return hosts + ([f".{settings.cluster_domain}"] if settings.cluster_domain else [])


def grace_seconds(job: TrainingJob) -> int:
    """``job.stop_grace_s`` as a pod's ``terminationGracePeriodSeconds`` (whole seconds, rounded up)."""
    return math.ceil(job.stop_grace_s)


def job_labels(job_name: str) -> dict[str, str]:
    """The labels of the job-level objects (NetworkPolicy, PodGroup): every replica label but the replica's."""
    return {"app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/instance": job_name,
            "app.kubernetes.io/managed-by": MANAGED_BY, LABEL_JOB_NAME: job_name}


def owner_references(settings: KubernetesSettings) -> list[dict[str, Any]]:
    """Owner reference to the launcher pod (deleting the pipeline run garbage-collects every replica).

    Empty when the launcher pod is unknown or in another namespace (owners must share the namespace).
    ``blockOwnerDeletion`` stays unset: setting it would need RBAC on the launcher pod's finalizers.
    """
    owner = settings.owner
    if owner is None:
        return []
    return [{"apiVersion": "v1", "kind": "Pod", "name": owner.name, "uid": owner.uid}]


def _metadata(name: str, settings: KubernetesSettings, labels: dict[str, str],
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": settings.namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    refs = owner_references(settings)
    if refs:
        meta["ownerReferences"] = refs
    return meta


def service_manifest(job: TrainingJob, replica: Replica, settings: KubernetesSettings) -> dict[str, Any]:
    """The headless Service of one replica.

    ``publishNotReadyAddresses`` makes the DNS record exist as soon as the pod has an IP: TensorFlow
    resolves its peers while they are still starting.
    """
    labels = replica_labels(job.name, replica)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(replica_name(job.name, replica), settings, labels),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {k: labels[k] for k in (LABEL_JOB_NAME, LABEL_REPLICA_TYPE, LABEL_REPLICA_INDEX)},
            "ports": [{"name": PORT_NAME, "port": job.port, "targetPort": job.port, "protocol": "TCP"}],
        },
    }


NODE_LOST_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def tolerations(own: Sequence[Mapping[str, Any]], node_lost_s: int) -> list[dict[str, Any]]:
    """A replica's tolerations: its own, then ``NoExecute`` tolerations of the lost-node taints
    (:data:`NODE_LOST_TAINTS`) for ``node_lost_s`` seconds (the ``node_lost_toleration_s`` setting), unless its
    own name those keys. Kubernetes' ``DefaultTolerationSeconds`` admission would add them for 300 s: a lost
    node's pods would stay five minutes before their eviction (a ``DisruptionTarget``, which a launcher
    restarted meanwhile reads as a preemption)."""
    out = [dict(t) for t in own]
    named = {t.get("key") for t in out}
    out += [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": node_lost_s}
            for key in NODE_LOST_TAINTS if key not in named]
    return out


def placement(job: TrainingJob, replica: Replica, settings: KubernetesSettings) -> dict[str, Any]:
    """Pod spec fields spreading the replicas over nodes (``settings.spread``; empty for ``none``).

    The chief and workers are spread among themselves, as are the ps (a topology spread constraint on
    ``kubernetes.io/hostname`` with ``maxSkew`` 1, counting only nodes the pod may use:
    ``nodeTaintsPolicy: Honor``), and a ps avoids the nodes of the chief and workers (pod anti-affinity).
    ``preferred`` lets the scheduler break them when it must (``ScheduleAnyway``, a preferred
    anti-affinity); ``required`` never (``DoNotSchedule``, a required anti-affinity: a replica stays
    pending instead, and the schedule deadline says so). The evaluator goes anywhere.
    """
    rtype = replica.replica_type.value
    if settings.spread == "none" or rtype == "evaluator":
        return {}
    required = settings.spread == "required"
    peers = list(TRAINERS) if rtype in TRAINERS else [rtype]
    selector = {"matchLabels": {LABEL_JOB_NAME: job.name},
                "matchExpressions": [{"key": LABEL_REPLICA_TYPE, "operator": "In", "values": peers}]}
    fields: dict[str, Any] = {"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": HOSTNAME_KEY,
        "whenUnsatisfiable": "DoNotSchedule" if required else "ScheduleAnyway",
        "labelSelector": selector, "nodeTaintsPolicy": "Honor"}]}
    if rtype == "ps" and (job.counts.chief or job.counts.worker):
        term = {"labelSelector": {"matchLabels": {LABEL_JOB_NAME: job.name}, "matchExpressions": [
            {"key": LABEL_REPLICA_TYPE, "operator": "In", "values": list(TRAINERS)}]}, "topologyKey": HOSTNAME_KEY}
        fields["affinity"] = {"podAntiAffinity": (
            {"requiredDuringSchedulingIgnoredDuringExecution": [term]} if required
            else {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]})}
    return fields


def pod_group_name(job: TrainingJob) -> str:
    """The name of the job's PodGroup (``gang=native``): the job's name."""
    return job.name


def pod_group_manifest(job: TrainingJob, settings: KubernetesSettings) -> dict[str, Any]:
    """The job's ``scheduling.k8s.io/v1beta1`` PodGroup (``gang=native``): all-or-nothing scheduling of every
    replica (``gang.minCount`` = the whole replica set, the evaluator included), Kubernetes >= 1.37.

    Each pod opts in with ``spec.schedulingGroup.podGroupName`` (:func:`job_manifest`); the scheduler's
    GangScheduling plugin binds none of them until ``minCount`` can be placed together.
    """
    group, version, _ = POD_GROUP_API
    return {"apiVersion": f"{group}/{version}", "kind": "PodGroup",
            "metadata": _metadata(pod_group_name(job), settings, job_labels(job.name)),
            "spec": {"schedulingPolicy": {"gang": {"minCount": job.counts.total}}}}


def network_policy_manifest(job: TrainingJob, settings: KubernetesSettings) -> dict[str, Any]:
    """The job's NetworkPolicy: ingress on every port from the job's own pods, on the replicas' gRPC port only
    from ``settings.network_policy_from``, nothing else in.

    TensorFlow's ``tf.train.Server`` has no authentication and runs the graphs it is sent (TensorFlow's
    SECURITY.md): only the job's peers may reach it. Among themselves the replicas need more than the gRPC port:
    NCCL's bootstrap and its socket transport listen on ports of their own choosing (NVIDIA/nccl#388), so a
    policy admitting only ``job.port`` between the job's pods hangs a multi-worker GPU job's first all-reduce.
    The user's peers (a TensorBoard, a profiler) get the gRPC port only. Enforced by the cluster's network plugin
    (Calico, Cilium...); without one the object is inert.
    """
    own = {"matchLabels": {LABEL_JOB_NAME: job.name}}
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": own}]}]  # no "ports": every port and protocol
    if settings.network_policy_from:
        ingress.append({"from": [dict(p) for p in settings.network_policy_from],
                        "ports": [{"protocol": "TCP", "port": job.port}]})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _metadata(job.name, settings, job_labels(job.name)),
            "spec": {"podSelector": own, "policyTypes": ["Ingress"], "ingress": ingress}}


ENV_NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NO_GPU_DEVICES = "void"  # the NVIDIA container runtime's "no GPU and no driver mounted" (as empty or unset)


def gpu_hygiene_env(gpus: int) -> dict[str, str]:
    """``{"NVIDIA_VISIBLE_DEVICES": "void"}`` for a replica type with ``gpus`` 0, else ``{}``.

    A CUDA image sets ``NVIDIA_VISIBLE_DEVICES=all``; on a node whose container runtime defaults to NVIDIA's, a
    pod that requests no ``nvidia.com/gpu`` would then see every GPU of the node, in use by other pods or not
    (NVIDIA/k8s-device-plugin#61). ``void`` gives it none, whatever its image. A type with GPUs gets nothing
    here: the device plugin sets the variable to the devices it allocated. The user's own value (the job's
    ``env`` or the type's ``replica_overrides`` env, e.g. ``none``: no GPU but the driver's libraries) wins.
    """
    return {} if gpus else {ENV_NVIDIA_VISIBLE_DEVICES: NO_GPU_DEVICES}


def default_active_deadline_s(job: TrainingJob, settings: KubernetesSettings) -> int:
    """``activeDeadlineSeconds`` of a Job created now: the job timeout, else the backstop deadline."""
    return max(1, math.ceil(job.timeout_s)) if job.timeout_s else settings.backstop_deadline_s


def job_manifest(job: TrainingJob, replica: Replica, settings: KubernetesSettings, *, attempt: int = 0,
                 restarts: int = 0, active_deadline_s: int | None = None) -> dict[str, Any]:
    """The batch/v1 Job of one replica.

    Args:
        attempt: how many times this replica was recreated (label ``tfk8s.dev/attempt``; a recreated
            replica's Job keeps its name, its pods are told apart by this label).
        restarts: restarts of the whole job used so far (annotation ``tfk8s.dev/restarts``, so that a
            restarted launcher knows how much of the restart budget is left).
        active_deadline_s: seconds the Job may run (default: :func:`default_active_deadline_s`); the Job
            controller kills its pod after it, should the launcher be gone.
    """
    rs = settings.replica(replica.replica_type)
    name = replica_name(job.name, replica)
    # The user's labels and annotations (settings: job-wide, this type's, the autoscaler defaults) under tfk8s'
    # own, which they cannot set (check_metadata refuses them).
    labels = {**rs.labels, **replica_labels(job.name, replica), LABEL_ATTEMPT: str(attempt)}
    job_labels = {**labels, KUEUE_QUEUE_LABEL: settings.kueue_queue} if settings.kueue_queue else labels
    # NVIDIA_VISIBLE_DEVICES=void without GPUs (gpu_hygiene_env: the user's value wins), the job's env, this
    # type's, then the contract's (tfk8s.core.contract.replica_env), NO_PROXY (the user's entries and the peers')
    # and TF_CONFIG: the launcher's win.
    # SM_NUM_GPUS (SageMaker's "GPUs available in the current container") is this type's gpus: only this
    # backend knows it (locally the replicas share the host's GPUs, and it is not set).
    contract_env = job.contract_env(replica)
    if contract_env:
        contract_env[ENV_SM_NUM_GPUS] = str(rs.gpus)
    env = {k: v for k, v in {**gpu_hygiene_env(rs.gpus), **job.env, **rs.env, **contract_env,
                             **no_proxy_env(no_proxy_hosts(job, settings), job.env, rs.env)}.items() if k != "TF_CONFIG"}
    env_list = [{"name": k, "value": v} for k, v in env.items()]
    env_list.append({"name": "TF_CONFIG", "value": tf_config_json(training_cluster_spec(job, settings), replica)})
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": rs.image,
        "command": list(job.replica_command(replica, rs.command or None)),
        "env": env_list,
        "ports": [{"name": PORT_NAME, "containerPort": job.port, "protocol": "TCP"}],
        "resources": rs.resources(),
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "runAsNonRoot": True},
        # The last log lines become the termination message when the container fails without writing one:
        # the failure's cause survives even if the log cannot be read any more.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace_seconds(job),
        "securityContext": {"runAsNonRoot": True, "runAsUser": settings.run_as_user,
                            "runAsGroup": settings.run_as_user, "fsGroup": settings.run_as_user,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        # The pause container is the pod's PID 1, the program is not: the kernel drops a signal of default
        # disposition sent to a PID namespace's init, so a program without a SIGTERM handler (python) as PID 1
        # ignores the kubelet's SIGTERM and is SIGKILLed (137) only after the grace period; here it ends at
        # once (143: a ps, an idle worker), and `kubectl exec ... kill -9 PID` reaches it. (A real node showed
        # all three; docs/kubernetes.md, "What the simulated nodes got wrong".)
        "shareProcessNamespace": True,
    }
    if settings.pvc_name:
        container["volumeMounts"] = [{"name": VOLUME_NAME, "mountPath": settings.volume_mount_path}]
        pod_spec["volumes"] = [{"name": VOLUME_NAME, "persistentVolumeClaim": {"claimName": settings.pvc_name}}]
    _add_shm(container, pod_spec, shm_of(rs.shm_size, rs.gpus, rs.memory_limit or rs.memory))
    if rs.service_account:
        pod_spec["serviceAccountName"] = rs.service_account
    if rs.node_selector:
        pod_spec["nodeSelector"] = dict(rs.node_selector)
    pod_spec["tolerations"] = tolerations(rs.tolerations, settings.node_lost_toleration_s)
    if settings.scheduler_name:
        pod_spec["schedulerName"] = settings.scheduler_name
    if rs.priority_class_name:
        pod_spec["priorityClassName"] = rs.priority_class_name
    pod_spec.update(placement(job, replica, settings))
    if settings.gang == "native":
        pod_spec["schedulingGroup"] = {"podGroupName": pod_group_name(job)}
    deadline = active_deadline_s if active_deadline_s is not None else default_active_deadline_s(job, settings)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(name, settings, job_labels, {ANNOTATION_RESTARTS: str(restarts)}),
        "spec": {
            "backoffLimit": 0,
            "completions": 1,
            "parallelism": 1,
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
            "template": {
                "metadata": {"labels": {**labels, ISTIO_INJECT: "false"},
                             "annotations": {**rs.annotations, ISTIO_INJECT: "false"}},
                "spec": pod_spec,
            },
        },
    }


SHM_VOLUME = "dshm"


def _add_shm(container: dict[str, Any], pod_spec: dict[str, Any], size: str) -> None:
    """Mount a memory-backed ``emptyDir`` of ``size`` (``sizeLimit``) at ``/dev/shm`` (none when ``size`` is
    empty): the container runtime's default is 64 MiB, which NCCL's buffers outgrow on GPU replicas. Its pages
    are charged to the container's memory cgroup, hence within the memory limit (docs/kubernetes.md)."""
    if not size:
        return
    container.setdefault("volumeMounts", []).append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    pod_spec.setdefault("volumes", []).append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory",
                                                                              "sizeLimit": size}})


def job_level_manifests(job: TrainingJob, settings: KubernetesSettings) -> list[dict[str, Any]]:
    """The objects of the whole job, created before the replicas: its NetworkPolicy (``network_policy``) and
    its PodGroup (``gang=native``)."""
    found = []
    if settings.network_policy:
        found.append(network_policy_manifest(job, settings))
    if settings.gang == "native":
        found.append(pod_group_manifest(job, settings))
    return found


def render_manifests(job: TrainingJob, settings: KubernetesSettings) -> list[dict[str, Any]]:
    """Every object the launcher creates for ``job``: the job-level ones (NetworkPolicy, PodGroup), then all
    Services (DNS before pods), then all Jobs."""
    replicas = list(job.counts.replicas())
    return (job_level_manifests(job, settings) + [service_manifest(job, r, settings) for r in replicas]
            + [job_manifest(job, r, settings) for r in replicas])


def pvc_manifest(name: str, namespace: str, *, size: str, storage_class: str = "",
                 access_mode: str = "ReadWriteMany") -> dict[str, Any]:
    """The shared volume's PersistentVolumeClaim (created by the ensure-volume step when asked).

    Args:
        size: a Kubernetes quantity, e.g. ``20Gi``.
        storage_class: the StorageClass; empty: the cluster's default.
        access_mode: ``ReadWriteMany`` by default: the launcher and replicas on several nodes mount it at once.
    """
    spec: dict[str, Any] = {"accessModes": [access_mode], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": "tfk8s", "app.kubernetes.io/component": "volume",
                                "app.kubernetes.io/managed-by": "tfk8s"}},
        "spec": spec,
    }
