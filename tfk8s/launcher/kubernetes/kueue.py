"""Kueue: the queue a job names is checked before anything is created, and a held Workload's reason is shown.

With ``kubernetes.kueue_queue`` set every Job carries ``kueue.x-k8s.io/queue-name`` and Kueue keeps it suspended
until its ``Workload`` is admitted. A queue that does not exist, or is inactive (its ``LocalQueue``'s ``Active``
condition False: its ClusterQueue missing or stopped), never admits anything: :func:`check_local_queue` fails the
step at once naming the queue and the namespace, instead of the Jobs waiting the whole ``schedule_timeout_s``
to be blamed on capacity. While a Job waits, its Workload's ``QuotaReserved``/``Admitted`` condition says why
(``couldn't assign flavors to pod set main: insufficient unused quota for cpu...``): :func:`note_pending` prints
it when it changes, and :func:`pending_reason` puts it in the schedule deadline's error.

API: ``kueue.x-k8s.io`` ``localqueues`` (get) and ``workloads`` (list), in ``v1beta2`` where the API server serves
it (Kueue >= 0.15), else ``v1beta1`` (Kueue < 0.20): the group's discovery document says which
(:data:`~tfk8s.launcher.kubernetes.api.KUEUE_VERSIONS`). No such group: Kueue is not installed; the group served in
neither version: the step fails naming the versions served and those tfk8s reads. A launcher whose Role lacks
the rules (an older ``manifests/rbac.yaml``) says so once and goes on without the check.
"""

from __future__ import annotations

from typing import Any

from tfk8s.launcher.kubernetes.api import KUEUE_GROUP, KUEUE_VERSIONS, kueue_version_of
from tfk8s.launcher.kubernetes.errors import KubernetesApiError, KueueQueueError
from tfk8s.launcher.kubernetes.state import KubeRun, ReplicaState

PENDING_CHECK_S = 2.0  # how often the held Jobs' Workloads are looked at (one list for all, only while some are held)


def _condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def check_local_queue(run: KubeRun) -> None:
    """Fail at once if ``settings.kueue_queue`` names no LocalQueue of the namespace, or an inactive one.

    Raises:
        KueueQueueError: Kueue's API not served (Kueue not installed), served in no version tfk8s reads
            (:data:`~tfk8s.launcher.kubernetes.api.KUEUE_VERSIONS`), the queue missing (404) or inactive (``Active``
            False: its reason and message quoted).
        KubernetesApiError: another API error (a 403 is logged instead: the Role predates the check).
    """
    name, ns = run.settings.kueue_queue, run.settings.namespace
    if not name:
        return
    try:
        served = run.api.kueue_versions()
    except KubernetesApiError as e:
        if e.status == 403:  # a cluster that took system:discovery away from service accounts
            run.log(f"cannot check Kueue LocalQueue {name} ({e})")
            return
        raise
    version = kueue_version_of(served)
    if served is None:
        raise KueueQueueError(f"kueue_queue={name!r}: the API server does not serve Kueue's API ({KUEUE_GROUP}): "
                              f"Kueue is not installed; install it, or leave kueue_queue empty")
    if version is None:
        raise KueueQueueError(
            f"kueue_queue={name!r}: the API server serves Kueue's API ({KUEUE_GROUP}) in version(s) "
            f"{', '.join(served) or 'none'} only, and tfk8s reads {' or '.join(KUEUE_VERSIONS)} (v1beta2: Kueue "
            f">= 0.15; v1beta1: Kueue < 0.20): run a Kueue that serves one of them (or a tfk8s that reads this "
            f"Kueue's version), or leave kueue_queue empty")
    if version != KUEUE_VERSIONS[0]:
        run.log(f"Kueue serves {KUEUE_GROUP}/{version}, not {KUEUE_VERSIONS[0]} (Kueue < 0.15): reading {version}, "
                f"which Kueue 0.20 stops serving; upgrade Kueue before then")
    try:
        queue = run.api.read_local_queue(name)
    except KubernetesApiError as e:
        if e.status == 403:
            run.log(f"cannot check Kueue LocalQueue {name} ({e}); apply the current manifests/rbac.yaml")
            return
        if e.status == 404:  # the group is served, its LocalQueues are not: Kueue's CRDs half installed
            raise KueueQueueError(f"kueue_queue={name!r}: the API server serves {KUEUE_GROUP}/{version} but not "
                                  f"its LocalQueues ({e}): is Kueue's CRD localqueues.{KUEUE_GROUP} installed? "
                                  f"Install Kueue whole, or leave kueue_queue empty") from None
        raise
    if queue is None:
        raise KueueQueueError(f"kueue_queue={name!r}: there is no LocalQueue {name} in namespace {ns}, so Kueue "
                              f"would never admit the Jobs: create it (kubectl get localqueues -n {ns} lists "
                              f"the queues there) or name an existing one")
    active = _condition(queue, "Active")
    if active is not None and active.get("status") == "False":
        raise KueueQueueError(f"kueue_queue={name!r}: LocalQueue {name} in namespace {ns} is inactive "
                              f"({active.get('reason') or 'Inactive'}: {active.get('message') or ''}), so Kueue "
                              f"would never admit the Jobs: fix its ClusterQueue "
                              f"({(queue.get('spec') or {}).get('clusterQueue') or '?'}) or name another queue")


def _workload_of(workloads: list[dict[str, Any]], job_name: str) -> dict[str, Any] | None:
    for w in workloads:
        owners = (w.get("metadata") or {}).get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job_name for o in owners):
            return w
    return None


def workload_reason(workload: dict[str, Any] | None) -> str:
    """Why a Workload is not admitted: its ``QuotaReserved`` (else ``Admitted``) condition when False, as
    ``Inadmissible: couldn't assign flavors...``; ``""`` when admitted or unknown."""
    if not workload:
        return ""
    for ctype in ("QuotaReserved", "Admitted"):
        c = _condition(workload, ctype)
        if c is not None and c.get("status") == "False" and (c.get("message") or c.get("reason")):
            return f"{c.get('reason') or 'Pending'}: {c.get('message') or ''}".rstrip(": ")
    return ""


def pending_reason(run: KubeRun, rep: ReplicaState) -> str:
    """The reason Kueue gives for not admitting ``rep``'s Job (``""``: none known, or no queue)."""
    if not run.settings.kueue_queue:
        return ""
    try:
        return workload_reason(_workload_of(run.api.list_workloads(), rep.name))
    except KubernetesApiError:
        return ""


def note_pending(run: KubeRun, now: float, said: dict[str, str]) -> None:
    """Every :data:`PENDING_CHECK_S`, print the reason of each held (suspended, pod-less) Job's Workload when it
    changed: ``Job x is held by Kueue queue q: Inadmissible: ...``. ``said`` keeps the last reason printed per Job
    and ``said["@"]`` the last check's time (the caller's dict)."""
    if not run.settings.kueue_queue or now - float(said.get("@", "-1e9")) < PENDING_CHECK_S:
        return
    held = [rep for rep in run.replicas.values() if rep.job is not None and not rep.pods
            and (rep.job.get("spec") or {}).get("suspend")]
    if not held:
        return
    said["@"] = str(now)
    try:
        workloads = run.api.list_workloads()
    except KubernetesApiError as e:
        run.log(f"cannot list Kueue Workloads ({e})")
        return
    for rep in held:
        reason = workload_reason(_workload_of(workloads, rep.name))
        if reason and said.get(rep.name) != reason:
            said[rep.name] = reason
            run.log(f"{rep.replica.label}: Job {rep.name} is held by Kueue queue {run.settings.kueue_queue}: "
                    f"{reason}")
