"""Where and how a training job's replicas run on Kubernetes: immutable, validated settings.

:class:`KubernetesSettings` holds everything the Kubernetes backend needs beyond the backend-neutral
:class:`~tfk8s.core.job.TrainingJob` (which carries the command, env, counts, port, success policy, job timeout
and grace period). It is built from the user-facing parameters (:class:`KubernetesParams`: the pipeline's
``kubernetes`` dict, the component's, the CLI's flags) by :meth:`KubernetesSettings.from_params`; each
replica type gets a resolved :class:`ReplicaSettings` (the defaults, with that type's ``replica_overrides``
applied).

Every bad value raises :class:`ValueError` naming the parameter and the fix; nothing here talks to a cluster.
It is over 500 lines because it is the one definition of every setting (name, default, help, check); the value
rules it applies live in :mod:`~tfk8s.launcher.kubernetes.values`.

This module is the Kubernetes backend's public face: besides :mod:`tfk8s.launcher.backends`, the only module of
:mod:`tfk8s.launcher` that other layers import (the parameter table, the CLI flags; ``tests/project/test_layers.py``),
with the name rules they check claim names by (``DNS1123_*``, :func:`parse_json`).

(It is over 500 lines: the one definition of every Kubernetes parameter, each with its documentation and checks.)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from tfk8s import DEFAULT_IMAGE
from tfk8s.core.cluster import ReplicaType
from tfk8s.core.contract import CONTRACT_ENV, PLATFORM_ENV, check_command
from tfk8s.core.layout import DEFAULT_ROOT
from tfk8s.launcher.kubernetes.values import (
    DNS1123_LABEL,
    DNS1123_LABEL_RULE,
    DNS1123_SUBDOMAIN,
    DNS1123_SUBDOMAIN_RULE,
    ENV_NAME,
    LABEL_VALUE,
    integer,
    metadata_map,
    number,
    parse_json,
    parse_quantity,
    require,
    shm_of,
    str_map,
    with_gpu_image,
)

NAME_RULES = {"label": (DNS1123_LABEL, DNS1123_LABEL_RULE), "subdomain": (DNS1123_SUBDOMAIN, DNS1123_SUBDOMAIN_RULE)}
"""Kubernetes' name rules (pattern, sentence) by kind, for the layers that check names before a launch."""
GPU_RESOURCE = "nvidia.com/gpu"
SERVICEACCOUNT_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
ENV_LAUNCHER_POD_NAME = "TFK8S_LAUNCHER_POD_NAME"
ENV_LAUNCHER_POD_UID = "TFK8S_LAUNCHER_POD_UID"
DEFAULT_NAMESPACE = "default"
DEFAULT_MOUNT_PATH = DEFAULT_ROOT  # the PVC in every replica, where the pipeline's steps mount it
WEEK_S = 7 * 24 * 3600
SCHEDULE_TIMEOUT_S = 600  # a replica pending longer fails the job (KubernetesSettings.schedule_timeout_s)
TTL_SECONDS_AFTER_FINISHED = 3600  # a finished Job's TTL, a backstop: the launcher deletes them itself
GROUP_SETTLE_S = 10.0  # seconds a group's permanent failure waits for its peers' statuses (see group_settle_s)
NODE_LOST_TOLERATION_S = 30  # tolerationSeconds of node.kubernetes.io/unreachable and not-ready (upstream: 300)
PEER_LOST_WAIT_S = 60.0  # a PeerLost failure's wait for the lost peer's verdict (> --node-monitor-grace-period 50 s)
SPREAD_MODES = ("preferred", "required", "none")  # KubernetesSettings.spread
GANG_MODES = ("", "native")  # KubernetesSettings.gang
PEER_KEYS = ("podSelector", "namespaceSelector", "ipBlock")  # a NetworkPolicyPeer's keys

# Keys a replica_overrides entry may set (the rest of the job is shared by every replica).
OVERRIDE_KEYS = ("image", "command", "cpu", "memory", "cpu_limit", "memory_limit", "gpus", "node_selector",
                 "tolerations", "service_account", "env", "shm_size", "annotations", "labels", "priority_class_name")
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DEFAULT_ANNOTATIONS = {SAFE_TO_EVICT: "false", DO_NOT_DISRUPT: "true"}
"""Every replica pod's annotations unless the user's ``annotations`` say otherwise (a value, or null: none): an
autoscaler's scale-down or consolidation that evicts one replica restarts the whole collective."""
RESERVED_LABEL_PREFIX = "tfk8s.dev/"  # the launcher selects its replicas by these (job name, type, index, attempt)
RESERVED_LABELS = {
    "app.kubernetes.io/name": "tfk8s sets it on every replica object",
    "app.kubernetes.io/instance": "tfk8s sets it to the job's name",
    "app.kubernetes.io/component": "tfk8s sets it to the replica type",
    "app.kubernetes.io/managed-by": "tfk8s sets it to tfk8s-launcher",
    "kueue.x-k8s.io/queue-name": "set it with the kueue_queue setting",
}
RESERVED_ANNOTATIONS = {"sidecar.istio.io/inject": "tfk8s sets it to false: a sidecar never exits, so a replica's "
                                                   "Job would never complete"}
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")


@dataclass(frozen=True)
class LauncherPod:
    """The launcher's own pod (from the downward API): the owner of every replica object.

    With an owner reference to this pod, deleting the pipeline run (which deletes the launcher pod) makes
    Kubernetes' garbage collector delete every replica, even if the launcher never ran its cleanup.
    Owner references only work within one namespace: see :meth:`KubernetesSettings.owner`.
    """

    name: str
    uid: str
    namespace: str

    @classmethod
    def from_env(cls, namespace: str, environ: Mapping[str, str] | None = None) -> LauncherPod | None:
        """The pod named by ``TFK8S_LAUNCHER_POD_NAME`` / ``TFK8S_LAUNCHER_POD_UID``; None if either is unset."""
        env = os.environ if environ is None else environ
        name, uid = env.get(ENV_LAUNCHER_POD_NAME, ""), env.get(ENV_LAUNCHER_POD_UID, "")
        return cls(name, uid, namespace) if name and uid else None


@dataclass(frozen=True)
class ReplicaSettings:
    """How one replica type's pods run.

    Attributes:
        image: container image of the replicas.
        command: argv override for this type; empty: the job's command.
        cpu: CPU request (a quantity, e.g. ``"2"``, ``"500m"``).
        memory: memory request (e.g. ``"4Gi"``).
        cpu_limit: CPU limit; empty: equal to ``cpu``.
        memory_limit: memory limit; empty: equal to ``memory`` (a container over it is OOMKilled).
        gpus: ``nvidia.com/gpu`` count (request = limit), 0 for none.
        node_selector: node labels the pods must match.
        tolerations: pod tolerations (Kubernetes ``Toleration`` objects).
        service_account: the pods' service account; empty: the namespace's ``default``.
        env: environment variables for this type, added to (and overriding) the job's env.
        shm_size: the memory-backed ``/dev/shm`` of its pods (:func:`~tfk8s.launcher.kubernetes.values.shm_of`).
        annotations: its pods' annotations (resolved: :data:`DEFAULT_ANNOTATIONS`, the job's, this type's).
        labels: labels of its Jobs and pods, beside tfk8s' own (which they may not set: :func:`check_metadata`).
        priority_class_name: its pods' ``priorityClassName``; empty: the cluster's default priority.

    Raises:
        ValueError: empty image, a bad quantity, a limit below its request, negative gpus, a bad toleration
            or env name; the message names the field.
    """

    image: str
    command: tuple[str, ...] = ()
    cpu: str = "1"
    memory: str = "2Gi"
    cpu_limit: str = ""
    memory_limit: str = ""
    gpus: int = 0
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    service_account: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    shm_size: str = ""
    annotations: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_ANNOTATIONS))
    labels: Mapping[str, str] = field(default_factory=dict)
    priority_class_name: str = ""

    def __post_init__(self) -> None:
        require(isinstance(self.image, str) and bool(self.image.strip()),
                 "image must name the container image of the replicas, e.g. ghcr.io/tfk8s/tfk8s:0.1.0")
        require(isinstance(self.command, Sequence) and not isinstance(self.command, str)
                 and all(isinstance(a, str) for a in self.command),
                 f"command must be a list of strings (argv), got {self.command!r}")
        check_command(self.command)  # placeholders as in the job's command (tfk8s.core.contract)
        for name in ("cpu", "memory"):
            try:
                request = parse_quantity(getattr(self, name))
            except ValueError as e:
                raise ValueError(f"{name}: {e}") from None
            require(request > 0, f"{name} must be > 0, got {getattr(self, name)!r}")
            limit_s = getattr(self, f"{name}_limit")
            if limit_s:
                try:
                    limit = parse_quantity(limit_s)
                except ValueError as e:
                    raise ValueError(f"{name}_limit: {e}") from None
                require(limit >= request, f"{name}_limit {limit_s!r} is below the request {name}="
                                           f"{getattr(self, name)!r}: raise the limit or lower the request")
        require(isinstance(self.gpus, int) and not isinstance(self.gpus, bool) and self.gpus >= 0,
                 f"gpus must be an integer >= 0, got {self.gpus!r}")
        str_map(self.node_selector, "node_selector")
        require(isinstance(self.tolerations, Sequence) and not isinstance(self.tolerations, str),
                 f"tolerations must be a JSON list of Kubernetes tolerations, got {self.tolerations!r}")
        for t in self.tolerations:
            require(isinstance(t, Mapping) and set(t) <= set(TOLERATION_KEYS),
                     f"tolerations: each entry must be an object with keys among {TOLERATION_KEYS}, got {t!r}")
            require(t.get("operator", "Equal") in ("Equal", "Exists"),
                     f"tolerations: operator must be 'Equal' or 'Exists', got {t.get('operator')!r}")
        require(self.service_account == "" or bool(DNS1123_SUBDOMAIN.match(self.service_account)),
                 f"service_account {self.service_account!r} is not a valid ServiceAccount name: "
                 f"{DNS1123_SUBDOMAIN_RULE}")
        env = str_map(self.env, "env")
        bad = [k for k in env if not ENV_NAME.match(k)]
        require(not bad, f"env: invalid variable names {bad}")
        require("TF_CONFIG" not in env, "env must not set TF_CONFIG: the launcher builds it for every replica")
        taken = sorted(set(env) & {*CONTRACT_ENV, *PLATFORM_ENV})
        require(not taken, f"env must not set {taken}: the launcher sets them for every replica "
                            "(docs/training-program.md); use the command's placeholders to pass them differently")
        shm_of(self.shm_size, self.gpus, self.memory_limit or self.memory)  # a bad size raises here
        object.__setattr__(self, "annotations", check_metadata(self.annotations, "annotations", labels=False))
        object.__setattr__(self, "labels", check_metadata(self.labels, "labels", labels=True))
        require(isinstance(self.priority_class_name, str) and (
                    self.priority_class_name == "" or (bool(DNS1123_SUBDOMAIN.match(self.priority_class_name))
                                                       and len(self.priority_class_name) <= 253)),
                f"priority_class_name {self.priority_class_name!r} is not a valid PriorityClass name: "
                f"{DNS1123_SUBDOMAIN_RULE} (kubectl get priorityclasses lists the cluster's)")
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "node_selector", dict(self.node_selector))
        object.__setattr__(self, "tolerations", tuple(dict(t) for t in self.tolerations))
        object.__setattr__(self, "env", env)

    def resources(self) -> dict[str, dict[str, str]]:
        """The container's ``resources``: requests, and limits (= requests unless set), GPUs in both."""
        requests = {"cpu": self.cpu, "memory": self.memory}
        limits = {"cpu": self.cpu_limit or self.cpu, "memory": self.memory_limit or self.memory}
        if self.gpus:
            requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(self.gpus)
        return {"requests": requests, "limits": limits}


def check_metadata(value: Any, what: str, *, labels: bool) -> dict[str, str]:
    """Resolved labels or annotations of a replica type: valid keys and values, none of tfk8s' own
    (:data:`RESERVED_LABELS`, the ``tfk8s.dev/`` prefix, :data:`RESERVED_ANNOTATIONS`), no nulls left.

    Raises:
        ValueError: naming the key, why it is refused and the fix.
    """
    found = metadata_map(value, what, labels=labels)
    reserved = RESERVED_LABELS if labels else RESERVED_ANNOTATIONS
    for k in found:
        require(not k.startswith(RESERVED_LABEL_PREFIX),
                f"{what} must not set {k!r}: the tfk8s.dev/ keys are the launcher's own (it finds, restarts and "
                f"deletes the replicas by them); use a key of your own prefix, e.g. 'team.example.com/{k[10:]}'")
        require(k not in reserved, f"{what} must not set {k!r}: {reserved.get(k)}")
    return {k: v for k, v in found.items() if v is not None}


def merge_metadata(*maps: Any, what: str, labels: bool) -> dict[str, str | None]:
    """``maps`` (JSON text or objects) merged, the later winning key by key; a null value stays (it drops the
    key once resolved by :func:`check_metadata`)."""
    merged: dict[str, str | None] = {}
    for m in maps:
        merged.update(metadata_map(m, what, labels=labels))
    return merged


def _param(default: Any, help_text: str) -> Any:
    if isinstance(default, dict | list):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help_text})
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class KubernetesParams:
    """The Kubernetes backend's settings as a user gives them: the ONE definition of their names, defaults and
    help text. The pipeline's and the launch component's ``kubernetes`` dict parameter holds any of these keys
    (except :data:`SHARED`, which are pipeline parameters of their own), the launch CLI's flags are generated
    from these fields (:mod:`tfk8s.steps.cli`), and :meth:`KubernetesSettings.from_params` takes them as
    keywords. Values are checked there (a dict holding a bad value fails before any replica starts).
    """

    namespace: str = _param("", "namespace of the replicas (empty: the launcher pod's own, else 'default')")
    image: str = _param(DEFAULT_IMAGE, "container image of the replicas")
    gpu_image: str = _param("", "image of types with gpus > 0 (empty: the GPU variant if image is the default, else image)")
    pvc_name: str = _param("", "PersistentVolumeClaim with the data and model, mounted in every replica")
    cpu: str = _param("1", "CPU request = limit of each replica (a quantity: 2, 500m)")
    memory: str = _param("2Gi", "memory request = limit of each replica (a quantity: 4Gi)")
    gpus: int = _param(0, "nvidia.com/gpu per replica")
    node_selector: Any = _param({}, 'node labels every replica must match, e.g. {"pool": "gpu"}')
    tolerations: Any = _param([], "Kubernetes tolerations of every replica (a JSON list)")
    service_account: str = _param("", "ServiceAccount of the replicas (empty: the namespace's default)")
    shm_size: str = _param("", "memory-backed /dev/shm, in the memory limit (empty: 1Gi with gpus, else none; 0: none)")
    annotations: Any = _param({}, (
        "annotations of every replica pod, over the defaults cluster-autoscaler.kubernetes.io/safe-to-evict: "
        '"false" and karpenter.sh/do-not-disrupt: "true" (a value of null drops one), e.g. '
        '{"karpenter.sh/do-not-disrupt": null}'))
    labels: Any = _param({}, 'labels of every replica Job and pod, e.g. {"team.example.com/cost-center": "ml"} '
                             "(not tfk8s' own: tfk8s.dev/*, app.kubernetes.io/{name,instance,component,managed-by}, "
                             "kueue.x-k8s.io/queue-name)")
    priority_class_name: str = _param("", "PriorityClass of the replica pods (empty: the cluster's default)")
    replica_overrides: Any = _param({}, (
        "per replica type (chief, worker, ps, evaluator): image, command, cpu, memory, cpu_limit, memory_limit, "
        "gpus, node_selector, tolerations, service_account, env, shm_size, annotations, labels (merged over the "
        'job\'s), priority_class_name; e.g. {"ps": {"cpu": "500m", "gpus": 0}}'))
    cluster_domain: str = _param("", "cluster DNS domain appended to Service names (e.g. cluster.local); "
                                     "empty: <svc>.<ns>.svc")
    schedule_timeout_s: int = _param(SCHEDULE_TIMEOUT_S, "seconds a replica may stay pending (unscheduled or not started) "
                                          "before the job fails")
    ttl_seconds_after_finished: int = _param(TTL_SECONDS_AFTER_FINISHED, "seconds Kubernetes keeps a finished replica Job (a backstop)")
    kueue_queue: str = _param("", "Kueue LocalQueue name (label kueue.x-k8s.io/queue-name on every Job)")
    scheduler_name: str = _param("", "schedulerName of the replica pods (e.g. volcano)")
    spread: str = _param("preferred", "replicas over nodes: preferred (spread chief/workers, ps apart, when the "
                                      "scheduler can), required (never share a node: pending instead), none")
    gang: str = _param("", "native: all-or-nothing scheduling with a Kubernetes PodGroup (scheduling.k8s.io/"
                           "v1beta1, Kubernetes >= 1.37 with the GenericWorkload gate); empty: none")
    network_policy: bool = _param(True, "a NetworkPolicy per job: only the job's own pods reach the replicas "
                                        "(every port: NCCL's too; enforced where the network plugin supports it)")
    network_policy_from: Any = _param([], "more NetworkPolicyPeers allowed to reach the replicas' gRPC port, e.g. "
                                          '[{"podSelector": {"matchLabels": {"app": "tensorboard"}}}]')
    node_lost_toleration_s: int = _param(NODE_LOST_TOLERATION_S, "tolerationSeconds of the replicas' pods on an "
                                         "unreachable or not-ready node before their eviction (Kubernetes: 300)")

    SHARED: ClassVar[tuple[str, ...]] = ("namespace", "image", "pvc_name")
    """Keys that are pipeline parameters of their own (other steps use them too)."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every field name, in definition order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """``{name: default}`` of every field."""
        return {f.name: getattr(cls(), f.name) for f in fields(cls)}

    @classmethod
    def help(cls, name: str) -> str:
        """The help text of field ``name``."""
        return {f.name: f.metadata["help"] for f in fields(cls)}[name]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None, *, where: str = "kubernetes") -> KubernetesParams:
        """The fields given in ``values`` (a JSON string of an object is parsed); the rest keep their defaults.

        Raises:
            ValueError: not an object, or an unknown key (the message names it, a close match, and every key).
        """
        import difflib

        if isinstance(values, str):
            values = parse_json(values, where, dict, '{"cpu": "2", "memory": "4Gi"}')
        values = dict(values or {})
        require(all(isinstance(k, str) for k in values), f"{where} keys must be strings")
        unknown = sorted(set(values) - set(cls.names()))
        if unknown:
            hints = [m for u in unknown for m in difflib.get_close_matches(u, cls.names(), n=1)]
            hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
            raise ValueError(f"{where} has unknown keys {unknown}{hint}; the known ones are {list(cls.names())}")
        return cls(**values)


@dataclass(frozen=True)
class KubernetesSettings:
    """Where and how the replicas run on Kubernetes (see :meth:`from_params` for the parameters).

    Attributes:
        namespace: namespace of every replica object.
        replicas: the resolved settings of each replica type (defaults + that type's overrides).
        pvc_name: PersistentVolumeClaim with the data and model (empty: none mounted).
        volume_mount_path: where the PVC is mounted in every replica (the same path as in the pipeline).
        cluster_domain: appended to the Services' DNS names (``<svc>.<ns>.svc.<domain>``); empty: none,
            the names ``<svc>.<ns>.svc`` resolve through the pods' DNS search path.
        schedule_timeout_s: seconds a replica may stay pending: unscheduled (Pending without a node, no pod
            created, or its Job suspended by a queue; counted from its Job's creation) or not started (bound to
            a node but its container not running, e.g. a volume that cannot be mounted; counted from when it
            was seen scheduled) before the job fails with the scheduler's or the kubelet's message.
        ttl_seconds_after_finished: seconds Kubernetes keeps a finished Job (a backstop; the launcher deletes
            them itself).
        kueue_queue: Kueue ``LocalQueue`` name put on every Job (``kueue.x-k8s.io/queue-name``); empty: none.
        scheduler_name: the pods' ``schedulerName`` (e.g. ``volcano``); empty: the default scheduler.
        launcher_pod: the launcher's own pod, owner of the replica objects (None: no owner references).
        run_as_user: the non-root UID (and GID, fsGroup) of the replicas.
        force_delete_after_s: seconds past the job's ``stop_grace_s`` (its pods' ``terminationGracePeriodSeconds``
            and the grace of the launcher's deletes, :class:`tfk8s.core.job.TrainingJob`) the launcher waits for a
            deleted pod to go (its node lost: it keeps its deletionTimestamp forever)
            before it force-deletes it (``kubectl delete pod --grace-period=0 --force``), at a restart and at
            cleanup. A pod whose deletion was accepted but is still listed after that is a warning, not a
            failure of the step.
        cleanup_timeout_s: seconds the launcher waits for every object to be gone after deleting them (plus
            what the job's ``stop_grace_s`` exceeds the default by).
        backstop_deadline_s: ``activeDeadlineSeconds`` of the Jobs when the job has no timeout, so that
            replicas (a ps never exits) cannot outlive a launcher that died without cleaning up.
        watch_timeout_s: server-side timeout of each watch request, after which the watch resumes.
        log_tail_lines: log lines of a failed replica shown in the error.
        log_wait_s: seconds to wait for a finished replica's log stream to drain.
        create_retry_s: seconds to retry creating a Job whose deleted predecessor still exists (409).
        group_settle_s: seconds a permanent failure in a group judged together (the MWMS chief/worker set,
            the PSS chief and ps) waits for its peers' statuses before the job fails: a peer's retryable
            failure reported later (an OOMKilled root cause behind its peers' follow-on exit 1s) recreates
            the group instead.
        spread: how the replicas are spread over nodes (``kubernetes.io/hostname``): ``preferred`` (default:
            a topology spread constraint with ``ScheduleAnyway`` keeps the chief and workers on different
            nodes, and likewise the ps, and a preferred anti-affinity keeps the ps apart from the
            chief/workers, whenever the scheduler can), ``required`` (the same with ``DoNotSchedule`` and a
            required anti-affinity: a replica stays pending rather than share a node), ``none``.
        gang: ``native``: all-or-nothing admission by Kubernetes' own gang scheduling: a
            ``scheduling.k8s.io/v1beta1`` PodGroup named after the job with ``gang.minCount`` = every replica,
            and each pod's ``schedulingGroup`` pointing at it, so no replica is bound to a node unless all
            can be (Kubernetes >= 1.37, feature gate ``GenericWorkload`` and API
            ``scheduling.k8s.io/v1beta1`` enabled); empty: none (each replica is scheduled on its own).
        network_policy: create a NetworkPolicy per job admitting ingress to the replicas only from the job's
            own pods, on every port (TensorFlow's gRPC server has no authentication; NCCL connects ranks on
            ports of its own); deleted with the job. Enforced only where the cluster's network plugin implements
            NetworkPolicy.
        network_policy_from: more NetworkPolicyPeer objects (``podSelector``, ``namespaceSelector``,
            ``ipBlock``) allowed to reach the replicas' gRPC port (that port only), e.g. a TensorBoard or
            profiler pod.
        node_lost_toleration_s: ``tolerationSeconds`` of the replicas' ``NoExecute`` tolerations of
            ``node.kubernetes.io/unreachable`` and ``not-ready`` (:func:`~.objects.tolerations`), not the 300 s of
            the ``DefaultTolerationSeconds`` admission: a lost node's pods are evicted (a preemption) soon.
        peer_lost_wait_s: seconds a ``PeerLost`` failure waits for the lost peer's own verdict (``NodeLost``, a
            preemption) instead of ``group_settle_s``; over the cluster's ``--node-monitor-grace-period`` (50 s).

    Raises:
        ValueError: a bad value; the message names the parameter and the fix.
    """

    namespace: str
    replicas: Mapping[ReplicaType, ReplicaSettings]
    pvc_name: str = ""
    volume_mount_path: str = DEFAULT_MOUNT_PATH
    cluster_domain: str = ""
    schedule_timeout_s: float = SCHEDULE_TIMEOUT_S
    ttl_seconds_after_finished: int = TTL_SECONDS_AFTER_FINISHED
    kueue_queue: str = ""
    scheduler_name: str = ""
    launcher_pod: LauncherPod | None = None
    run_as_user: int = 10001  # the project image's user (Dockerfile: USER 10001, owns /home/tfk8s, /mnt/tfk8s)
    cleanup_timeout_s: float = 120
    force_delete_after_s: float = 15.0
    backstop_deadline_s: int = WEEK_S
    watch_timeout_s: int = 300
    log_tail_lines: int = 30
    log_wait_s: float = 5.0
    create_retry_s: float = 60.0
    group_settle_s: float = GROUP_SETTLE_S
    spread: str = "preferred"
    gang: str = ""
    network_policy: bool = True
    network_policy_from: tuple[Mapping[str, Any], ...] = ()
    node_lost_toleration_s: int = NODE_LOST_TOLERATION_S
    peer_lost_wait_s: float = PEER_LOST_WAIT_S

    def __post_init__(self) -> None:
        require(bool(DNS1123_LABEL.match(self.namespace)) and len(self.namespace) <= 63,
                 f"namespace {self.namespace!r} is not a valid namespace name (lower-case letters, digits, '-')")
        missing = [t.value for t in ReplicaType if t not in self.replicas]
        require(not missing, f"replicas lacks settings for {missing}: build settings with from_params()")
        require(self.pvc_name == "" or (bool(DNS1123_SUBDOMAIN.match(self.pvc_name)) and len(self.pvc_name) <= 253),
                 f"pvc_name {self.pvc_name!r} is not a valid PersistentVolumeClaim name: {DNS1123_SUBDOMAIN_RULE}")
        require(self.volume_mount_path.startswith("/") and ":" not in self.volume_mount_path,
                 f"volume_mount_path must be an absolute path, got {self.volume_mount_path!r}")
        require(self.cluster_domain == "" or bool(DNS1123_SUBDOMAIN.match(self.cluster_domain)),
                 f"cluster_domain {self.cluster_domain!r} must be a DNS domain like 'cluster.local', or empty")
        require(isinstance(self.schedule_timeout_s, int | float) and self.schedule_timeout_s > 0,
                 f"schedule_timeout_s must be > 0 seconds, got {self.schedule_timeout_s!r}")
        v = self.ttl_seconds_after_finished
        require(isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                 f"ttl_seconds_after_finished must be an integer >= 0, got {v!r}")
        for name in ("kueue_queue", "scheduler_name"):
            v = getattr(self, name)
            require(len(v) <= 63 and bool(LABEL_VALUE.match(v)),
                     f"{name} {v!r} must be at most 63 letters, digits, '-', '_' or '.'")
        require(isinstance(self.group_settle_s, int | float) and self.group_settle_s >= 0,
                 f"group_settle_s must be >= 0 seconds, got {self.group_settle_s!r}")
        require(self.run_as_user > 0, "run_as_user must be a non-root UID (> 0)")
        require(self.backstop_deadline_s > 0 and self.watch_timeout_s > 0 and self.cleanup_timeout_s > 0,
                 "backstop_deadline_s, watch_timeout_s and cleanup_timeout_s must be > 0")
        require(self.spread in SPREAD_MODES, f"spread must be one of {list(SPREAD_MODES)}, got {self.spread!r}")
        require(self.gang in GANG_MODES, f"gang must be '' (none) or 'native' (a Kubernetes PodGroup, "
                                          f"Kubernetes >= 1.37), got {self.gang!r}")
        require(isinstance(self.network_policy, bool), f"network_policy must be true or false, got "
                                                        f"{self.network_policy!r}")
        require(isinstance(self.network_policy_from, Sequence) and not isinstance(self.network_policy_from, str),
                 f"network_policy_from must be a JSON list of NetworkPolicyPeer objects, got "
                 f"{self.network_policy_from!r}")
        for peer in self.network_policy_from:
            require(isinstance(peer, Mapping) and bool(peer) and set(peer) <= set(PEER_KEYS),
                     f"network_policy_from: each entry must be a NetworkPolicyPeer with keys among {PEER_KEYS}, "
                     f'e.g. {{"podSelector": {{"matchLabels": {{"app": "tensorboard"}}}}}}; got {peer!r}')
        object.__setattr__(self, "network_policy_from", tuple(dict(p) for p in self.network_policy_from))
        v = self.node_lost_toleration_s
        require(type(v) is int and v >= 0, f"node_lost_toleration_s must be an integer >= 0 (seconds), got {v!r}")
        require(self.peer_lost_wait_s >= 0, f"peer_lost_wait_s must be >= 0 seconds, got {self.peer_lost_wait_s!r}")
        object.__setattr__(self, "replicas", {ReplicaType(k): v for k, v in self.replicas.items()})

    def replica(self, replica_type: ReplicaType | str) -> ReplicaSettings:
        """The settings of ``replica_type``."""
        return self.replicas[ReplicaType(replica_type)]

    @property
    def owner(self) -> LauncherPod | None:
        """The launcher pod if it can own the replica objects (same namespace), else None."""
        if self.launcher_pod and self.launcher_pod.namespace == self.namespace:
            return self.launcher_pod
        return None

    def owner_note(self) -> str:
        """Why the replica objects get no ownerReferences (``""`` when they get one): the launcher pod is unknown
        (outside a launcher pod: ``--dry-run``, a test) or in another namespace."""
        if self.launcher_pod is None:
            return (f"{ENV_LAUNCHER_POD_NAME}/{ENV_LAUNCHER_POD_UID} are not set (outside a launcher pod): the replica "
                    f"objects get no ownerReferences, so deleting the pipeline run will not garbage-collect them (the "
                    f"launcher still deletes them itself; in a run, KFP sets both from the launcher pod)")
        if self.owner is None:
            return (f"the launcher pod is in namespace {self.launcher_pod.namespace}, the replicas in "
                    f"{self.namespace}: no ownerReferences (an owner must be in the same namespace)")
        return ""

    @classmethod
    def from_params(cls, *, volume_mount_path: str = DEFAULT_MOUNT_PATH, **params: Any) -> KubernetesSettings:
        """Settings from the user-facing parameters: any field of :class:`KubernetesParams` as a keyword (the
        pipeline's ``kubernetes`` dict, the component's and the CLI's names: one definition).

        Structured values (node_selector, tolerations, replica_overrides) are JSON strings or already parsed
        dicts/lists; an empty string means unset. ``namespace`` empty: the launcher pod's own namespace (read
        from the service account's ``namespace`` file), else ``default``. ``replica_overrides`` is keyed by
        replica type (``chief``, ``worker``, ``ps``, ``evaluator``); its values set any of
        :data:`OVERRIDE_KEYS` for that type, e.g. ``{"ps": {"cpu": "500m", "memory": "1Gi", "gpus": 0}}``;
        ``env`` adds to the job's env, every other key replaces the default.

        The launcher pod (owner of the replica objects) is read from ``TFK8S_LAUNCHER_POD_NAME`` and
        ``TFK8S_LAUNCHER_POD_UID``, its namespace from the service account file.

        Raises:
            ValueError: an unknown parameter (the message lists the known ones), unparseable JSON, an unknown
                replica type or key in ``replica_overrides``, a bad quantity, name or number; the message
                names the parameter and says how to fix it.
        """
        return cls.resolve(KubernetesParams.from_dict(params), volume_mount_path=volume_mount_path)

    @classmethod
    def resolve(cls, p: KubernetesParams, *, volume_mount_path: str = DEFAULT_MOUNT_PATH) -> KubernetesSettings:
        """Settings from the typed parameters (what :meth:`from_params` builds from keywords, and what the launch
        step's :class:`tfk8s.steps.parameters.LaunchSpec` holds): every value checked, the namespace resolved,
        each replica type's overrides applied, the launcher pod read from its environment.

        Raises:
            ValueError: as :meth:`from_params` (a bad value; the message names the parameter and the fix).
        """
        namespace, image, pvc_name, cpu, memory, gpus = p.namespace, p.image, p.pvc_name, p.cpu, p.memory, p.gpus
        node_selector, tolerations, service_account = p.node_selector, p.tolerations, p.service_account
        replica_overrides, cluster_domain, schedule_timeout_s = p.replica_overrides, p.cluster_domain, p.schedule_timeout_s
        ttl_seconds_after_finished = p.ttl_seconds_after_finished
        kueue_queue, scheduler_name = p.kueue_queue, p.scheduler_name
        peers = parse_json(p.network_policy_from, "network_policy_from", list,
                            '[{"podSelector": {"matchLabels": {"app": "tensorboard"}}}]')
        network_policy = p.network_policy
        if isinstance(network_policy, str):
            require(network_policy.lower() in ("true", "false"),
                     f"network_policy must be true or false, got {network_policy!r}")
            network_policy = network_policy.lower() == "true"
        own_namespace = _own_namespace()
        ns = resolve_namespace(namespace)
        selector = parse_json(node_selector, "node_selector", dict, '{"cloud.google.com/gke-nodepool": "gpu"}')
        tols = parse_json(tolerations, "tolerations", list,
                           '[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]')
        overrides = parse_json(replica_overrides, "replica_overrides", dict, '{"ps": {"cpu": "500m"}}')
        unknown = sorted(set(overrides) - {t.value for t in ReplicaType})
        require(not unknown, f"replica_overrides has unknown replica types {unknown}: use "
                              f"{[t.value for t in ReplicaType]}")
        job_annotations = merge_metadata(DEFAULT_ANNOTATIONS, p.annotations, what="annotations", labels=False)
        job_labels = merge_metadata(p.labels, what="labels", labels=True)
        try:
            base = ReplicaSettings(image=image, cpu=str(cpu), memory=str(memory), gpus=integer(gpus, "gpus"),
                                   node_selector=selector, tolerations=tuple(tols),
                                   service_account=service_account, shm_size=str(p.shm_size or ""),
                                   annotations=job_annotations, labels=job_labels,
                                   priority_class_name=p.priority_class_name or "")
        except (TypeError, ValueError) as e:
            raise ValueError(f"{e}") from None
        replicas: dict[ReplicaType, ReplicaSettings] = {}
        for rtype in ReplicaType:
            entry = overrides.get(rtype.value) or {}
            where = f'replica_overrides["{rtype.value}"]'
            require(isinstance(entry, dict), f"{where} must be a JSON object, got {entry!r}")
            bad = sorted(set(entry) - set(OVERRIDE_KEYS))
            require(not bad, f"{where} has unknown keys {bad}: use {list(OVERRIDE_KEYS)}")
            changes = dict(entry)
            if "env" in changes:
                changes["env"] = {**base.env, **str_map(changes["env"], f"{where}.env")}
            try:
                if "annotations" in changes:
                    changes["annotations"] = merge_metadata(job_annotations, changes["annotations"],
                                                            what="annotations", labels=False)
                if "labels" in changes:
                    changes["labels"] = merge_metadata(job_labels, changes["labels"], what="labels", labels=True)
            except ValueError as e:
                raise ValueError(f"{where}.{e}") from None
            if "tolerations" in changes:
                require(isinstance(changes["tolerations"], list), f"{where}.tolerations must be a JSON list")
                changes["tolerations"] = tuple(changes["tolerations"])
            if "command" in changes:
                require(isinstance(changes["command"], list), f"{where}.command must be a JSON list of strings")
            for q in ("cpu", "memory", "cpu_limit", "memory_limit", "shm_size"):
                if q in changes and isinstance(changes[q], int | float) and not isinstance(changes[q], bool):
                    changes[q] = str(changes[q])
            try:
                replicas[rtype] = with_gpu_image(replace(base, **changes), changes, image, p.gpu_image)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{where}: {e}") from None
        try:
            return cls(
                namespace=ns, replicas=replicas, pvc_name=pvc_name, volume_mount_path=volume_mount_path,
                cluster_domain=cluster_domain, schedule_timeout_s=number(schedule_timeout_s, "schedule_timeout_s"),
                ttl_seconds_after_finished=integer(ttl_seconds_after_finished, "ttl_seconds_after_finished"),
                kueue_queue=kueue_queue, scheduler_name=scheduler_name, spread=p.spread, gang=p.gang,
                network_policy=network_policy, network_policy_from=tuple(peers),
                node_lost_toleration_s=integer(p.node_lost_toleration_s, "node_lost_toleration_s"),
                launcher_pod=LauncherPod.from_env(own_namespace or ns),
            )
        except TypeError as e:  # pragma: no cover - the checks above convert the types
            raise ValueError(str(e)) from None


def resolve_namespace(namespace: str = "") -> str:
    """``namespace`` if given, else the namespace of the pod this runs in, else ``default``."""
    return namespace or _own_namespace() or DEFAULT_NAMESPACE


def _own_namespace(path: Path | None = None) -> str:
    """The namespace of the pod this runs in (its service account's ``namespace`` file); "" outside a pod."""
    try:
        return (path or SERVICEACCOUNT_NAMESPACE_FILE).read_text().strip()
    except OSError:
        return ""


def markdown_table() -> str:
    """docs/kubernetes.md's table of :class:`KubernetesParams` (a test keeps the doc equal to it): each key, its
    flag of ``python -m components.launch_training``, its default and its help, in definition order."""
    import json

    rows = ["| key | flag | default | what it does |", "|---|---|---|---|"]
    for name, default in KubernetesParams.defaults().items():
        own = " (pipeline parameter)" if name in KubernetesParams.SHARED else ""
        helptext = KubernetesParams.help(name).replace("|", "\\|").replace("<", "\\<")
        rows.append(f"| `{name}`{own} | `--{name.replace('_', '-')}` | `{json.dumps(default)}` | {helptext} |")
    return "\n".join(rows) + "\n"
