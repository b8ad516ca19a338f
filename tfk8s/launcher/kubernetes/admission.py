"""What a Job controller's ``FailedCreate`` event says: an admission refusal (permanent), or a passing cause.

When the API server refuses a replica's pod, the Job controller records a ``FailedCreate`` Warning event on the
Job with the refusal's words and retries with backoff; the Job never gets a pod. The refusals that a retry cannot
change fail the step at once (:func:`refusal`), each quoting the event and naming the setting of ours that
produced the refused field and the fix:

- ``exceeded quota: ...`` (the ResourceQuota admission): ``QuotaExceeded``;
- ``maximum cpu usage per Container is 1, but limit is 2`` / ``minimum memory usage per Pod ...`` / ``... limit to
  request ratio ...`` (the LimitRanger admission, a ``LimitRange`` in the namespace): ``LimitRangeRefused``,
  naming our ``cpu``/``memory``/``gpus`` (and ``cpu_limit``/``memory_limit``) settings;
- ``violates PodSecurity "restricted:latest": ...`` (Pod Security admission, the namespace's
  ``pod-security.kubernetes.io/enforce`` label): ``PodSecurityRefused``, naming the pods' ``securityContext``
  (:func:`tfk8s.launcher.kubernetes.objects.job_manifest`; ``run_as_user``);
- ``admission webhook "x" denied the request: ...`` (a policy engine: Gatekeeper, Kyverno): ``WebhookDenied``;
- ``Pod "x" is invalid: spec...`` (the API server's validation): ``InvalidPodSpec``.

A webhook that could not be reached or timed out (``failed calling webhook``, ``context deadline exceeded``)
is transient: :func:`refusal` returns None and the launcher keeps waiting, up to ``schedule_timeout_s``.
Messages follow kube-apiserver's ``plugin/pkg/admission/limitranger`` and ``podsecurity`` and
``apiserver/pkg/admission/plugin/webhook/errors``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tfk8s.core.cluster import Replica

TRANSIENT = ("failed calling webhook", "context deadline exceeded", "connection refused", "i/o timeout",
             "the server is currently unable to handle the request")
"""Words of a refusal that a retry may not get: a webhook that is down or slow, an API server overloaded."""

_LIMIT_RANGE = re.compile(
    r"(?P<bound>maximum|minimum) (?P<resource>\S+) usage per (?P<scope>Container|Pod) is (?P<value>\S+?),? "
    r"but (?P<which>limit|request) is (?P<ours>\S+?)(?:\.|,|;|$)")
_RATIO = re.compile(r"(?P<resource>\S+) max limit to request ratio per (?P<scope>Container|Pod) is (?P<value>\S+)")
_WEBHOOK = re.compile(r'admission webhook "(?P<name>[^"]+)" denied the request')

QUOTA_EXCEEDED = "QuotaExceeded"
"""The reason of a ResourceQuota's refusal (failed with :class:`~tfk8s.launcher.kubernetes.errors.QuotaExceededError`;
the other refusals with ``AdmissionRefusedError``)."""

_SETTINGS = {"cpu": "cpu (the request) and cpu_limit (the limit, default: cpu)",
             "memory": "memory (the request) and memory_limit (the limit, default: memory)",
             "nvidia.com/gpu": "gpus", "ephemeral-storage": "none of ours (the namespace's default applies)"}


@dataclass(frozen=True)
class Refusal:
    """A permanent refusal of a replica's pod.

    Attributes:
        reason: ``QuotaExceeded``, ``LimitRangeRefused``, ``PodSecurityRefused``, ``WebhookDenied`` or
            ``InvalidPodSpec``.
        message: the event's message, our setting that produced the refused field, and the fix.
    """

    reason: str
    message: str


def is_transient(message: str) -> bool:
    """Whether a ``FailedCreate`` message is a passing cause (a webhook unreachable or timed out)."""
    low = message.lower()
    return any(t in low for t in TRANSIENT)


def refusal(message: str, replica: Replica, job_name: str, namespace: str) -> Refusal | None:
    """The permanent refusal ``message`` (a Job's ``FailedCreate`` event) says, or None (transient, or not a
    refusal we know: the schedule timeout still bounds the wait).

    Args:
        message: the event's message.
        replica: the replica whose Job got it (named in the message).
        job_name: the Job's name, for the commands of the fix.
        namespace: the namespace, for the commands of the fix.
    """
    if not message or is_transient(message):
        return None
    who = f"the pod of {replica.label} ({job_name})"
    if "exceeded quota" in message:
        return Refusal(QUOTA_EXCEEDED, f"{message}; the Job controller cannot create {who}: the namespace's "
                       f"ResourceQuota is smaller than the job: raise it (kubectl describe resourcequota -n "
                       f"{namespace}), lower the replicas' requests (cpu, memory, gpus) or run fewer replicas")
    m = _LIMIT_RANGE.search(message) or _RATIO.search(message)
    if m:
        resource = m.group("resource")
        ours = _SETTINGS.get(resource, f"the {resource} of the replicas")
        bound = m.groupdict().get("bound") or "max limit to request ratio"
        return Refusal("LimitRangeRefused", f"{message}; the namespace's LimitRange refused {who}: its {resource} "
                       f"comes from the kubernetes settings {ours} (for {replica.replica_type.value}: "
                       f"replica_overrides.{replica.replica_type.value}); set them within the LimitRange's "
                       f"{bound} (kubectl describe limitrange -n {namespace}), or ask the namespace's owner to "
                       f"change the LimitRange")
    if "violates PodSecurity" in message:
        return Refusal("PodSecurityRefused", f"{message}; Pod Security admission refused {who}: the pods' "
                       f"securityContext is tfk8s's own (non-root run_as_user, no privilege escalation, all "
                       f"capabilities dropped, seccomp RuntimeDefault: the 'restricted' level); a field named "
                       f"above comes from another setting (the image's user, a replica_overrides entry) or a "
                       f"mutating webhook: fix that, or run in a namespace whose "
                       f"pod-security.kubernetes.io/enforce level allows it (kubectl get ns {namespace} "
                       f"--show-labels)")
    m = _WEBHOOK.search(message)
    if m:
        return Refusal("WebhookDenied", f"{message}; the admission webhook {m.group('name')} (a cluster policy: "
                       f"Gatekeeper, Kyverno...) refused {who}: change the setting the policy names (kubernetes "
                       f"settings: image, cpu, memory, gpus, node_selector, tolerations, service_account, env), "
                       f"or ask the cluster's administrators for an exception in namespace {namespace}")
    if " is invalid" in message:
        return Refusal("InvalidPodSpec", f"{message}; the API server rejected the pod spec of {who}: the field "
                       f"named above comes from the kubernetes settings (replica_overrides, env, tolerations, "
                       f"node_selector, resources); fix it (the step's --dry-run prints the Jobs that are sent)")
    return None
