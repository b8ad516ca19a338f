"""Kueue: the queue a job names is checked before anything is created, and a held Workload's reason is shown.

With ``kubernetes.kueue_queue`` set every Job carries ``kueue.x-k8s.io/queue-name`` and Kueue keeps it suspended
until its ``Workload`` is admitted. A queue that does not exist, or is inactive (its ``LocalQueue``'s ``Active``
condition False: its ClusterQueue missing or stopped), never admits anything: :func:`check_local_queue` fails the
step at once naming the queue and the namespace, instead of the Jobs waiting the whole ``schedule_timeout_s``
to be blamed on capacity. While a Job waits, its Workload's ``QuotaReserved``/``Admitted`` condition says why
(``couldn't assign flavors to pod set main: insufficient unused quota for cpu...``): :func:`note_pending` prints
it when it changes, and :func:`pending_reason` puts it in the schedule deadline's error.

A Job's Workload is the one owned by that Job's *uid*: a restart deletes a replica's Job and creates one of the same
name, and the old Job's Workload outlives it for a moment (the garbage collector, Kueue's finalizer). Kueue itself
finds a Job's Workloads by the owner's *name* (``FindMatchingWorkloads``, v0.17), so a new Job created while the old
Workload is still there can be matched to it and is then never admitted: seen with Kueue v0.17.0 on the real
control plane (``tests/realcluster/test_kueue.py``), the new Job's pod template carrying the old Workload's name
(``kueue.x-k8s.io/workload``: "invalid admission check PodSetUpdate: conflict for annotations"), or no Workload made
for it at all. :func:`wait_for_old_workloads` holds a restart's new Jobs back until the old Workloads are gone.

API: ``kueue.x-k8s.io`` ``localqueues`` (get) and ``workloads`` (list), in ``v1beta2`` where the API server serves
it (Kueue >= 0.15), else ``v1beta1`` (Kueue < 0.20): the group's discovery document says which
(:data:`~tfk8s.launcher.kubernetes.api.KUEUE_VERSIONS`). No such group: Kueue is not installed; the group served in
neither version: the step fails naming the versions served and those tfk8s reads. A launcher whose Role lacks
the rules (an older ``manifests/rbac.yaml``) says so once and goes on without the check.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from tfk8s.launcher.kubernetes.api import KUEUE_GROUP, KUEUE_VERSIONS, kueue_version_of
from tfk8s.launcher.kubernetes.errors import KubernetesApiError, KueueQueueError
from tfk8s.launcher.kubernetes.state import KubeRun, ReplicaState

PENDING_CHECK_S = 2.0  # how often the held Jobs' Workloads are looked at (one list for all, only while some are held)
OLD_WORKLOADS_POLL_S = 0.5  # how often a restart looks whether the deleted Jobs' Workloads are gone


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


def _job_owners(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in (workload.get("metadata") or {}).get("ownerReferences") or [] if o.get("kind") == "Job"]


def _workload_of(workloads: list[dict[str, Any]], job_name: str, job_uid: str | None) -> dict[str, Any] | None:
    """The Workload of the Job ``job_name`` whose uid is ``job_uid`` (any Job of that name when it is unknown):
    not the Workload of a deleted Job of the same name (a restart's predecessor), whose reason is stale."""
    for w in workloads:
        if any(o.get("name") == job_name and (not job_uid or o.get("uid") == job_uid) for o in _job_owners(w)):
            return w
    return None


def _uid(rep: ReplicaState) -> str | None:
    return ((rep.job or {}).get("metadata") or {}).get("uid")


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
        return workload_reason(_workload_of(run.api.list_workloads(), rep.name, _uid(rep)))
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
        reason = workload_reason(_workload_of(workloads, rep.name, _uid(rep)))
        if reason and said.get(rep.name) != reason:
            said[rep.name] = reason
            run.log(f"{rep.replica.label}: Job {rep.name} is held by Kueue queue {run.settings.kueue_queue}: "
                    f"{reason}")


def wait_for_old_workloads(run: KubeRun, job_names: Collection[str]) -> None:
    """Before a restart creates the Jobs ``job_names`` again under a Kueue queue: wait, at most
    ``create_retry_s``, until no Workload owned by a Job of those names is left (their deleted predecessors').
    Kueue matches a Job to its Workloads by the owner's name, so a new Job created beside an old Workload can be
    taken for that Workload's and never be admitted (the module's docstring). Measured on Kueue v0.17.0 with
    the real control plane: gone about 0.5 s after the Jobs' deletion. No queue: returns at once. Cannot list
    (an older Role): says so and goes on."""
    if not run.settings.kueue_queue or not job_names:
        return
    names = set(job_names)

    def left() -> list[str]:
        return sorted({o.get("name") or "" for w in run.api.list_workloads() for o in _job_owners(w)} & names)

    try:
        old = left()
        deadline = run.clock() + run.settings.create_retry_s
        while old and run.clock() < deadline:
            time.sleep(OLD_WORKLOADS_POLL_S)
            old = left()
    except KubernetesApiError as e:
        run.log(f"cannot list Kueue Workloads ({e}): creating the new Jobs without waiting for the old Workloads "
                f"to go")
        return
    if old:
        run.log(f"the Kueue Workloads of the deleted Jobs {', '.join(old)} still exist "
                f"{run.settings.create_retry_s:g}s after the Jobs were deleted; creating the new Jobs anyway (Kueue "
                f"may take an old Workload for a new Job and never admit it)")
