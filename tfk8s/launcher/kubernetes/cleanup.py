"""Delete every object of a training job and check that none remain.

At every end (success, failure, timeout, SIGTERM) the launcher deletes the job's Jobs first (no controller then
recreates a pod), its Services, its pods (with the job's ``stop_grace_s``, the SIGTERM -> SIGKILL bound) and
its NetworkPolicy and PodGroup, each kind concurrently, then lists what is left. A pod still there
``force_delete_after_s`` past its grace period (its node is gone: its deletionTimestamp stays forever) is
force-deleted (grace period 0), and one whose node is already known lost (:func:`~tfk8s.launcher.kubernetes.classify.
lost_node`, the ``spread=required`` failure of a lost node) is force-deleted at once; a pod still listed although its deletion was accepted is a warning with the
``kubectl delete pod --grace-period=0 --force`` command, not a failure of a job that succeeded.
:func:`delete_job_objects` is the same deletion for ``tfk8s delete``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from tfk8s.core.job import job_selector
from tfk8s.core.policy import STOP_GRACE_S
from tfk8s.launcher.kubernetes.classify import classify_pod, lost_node
from tfk8s.launcher.kubernetes.errors import CleanupError, KubernetesApiError
from tfk8s.launcher.kubernetes.failures import read_logs
from tfk8s.launcher.kubernetes.logs import LOG_READ_S
from tfk8s.launcher.kubernetes.parallel import run_all
from tfk8s.launcher.kubernetes.state import KubeRun

CLEANUP_POLL_S = 0.5
JOB_LEVEL_KINDS = ("NetworkPolicy", "PodGroup")


def delete_job_objects(api: Any, job_name: str, *, replica_names: Sequence[str] | None = None,
                       pod_grace_s: int | None = None, job_level: Sequence[str] = JOB_LEVEL_KINDS,
                       force_pods: Collection[str] = ()) -> None:
    """Delete every object of job ``job_name``: its Jobs first (no controller then recreates a pod), its
    Services, its pods, then its job-level objects (named after the job); each kind concurrently
    (:func:`~tfk8s.launcher.kubernetes.parallel.run_all`). Deleting what is already gone is fine.

    Args:
        api: a :class:`~tfk8s.launcher.kubernetes.api.KubeApi` of the job's namespace.
        replica_names: the replicas' object names (``<job>-<type>-<index>``) when known; None: found by label.
        pod_grace_s: the pods' grace period in seconds (None: each pod's own ``terminationGracePeriodSeconds``).
        job_level: the job-level kinds to delete, of :data:`JOB_LEVEL_KINDS`.
        force_pods: pods deleted with grace period 0 (after the Jobs, so that no controller recreates them):
            those on a lost node, whose deletion no kubelet would ever confirm.

    Raises:
        tfk8s.launcher.kubernetes.errors.KubernetesApiError: an API call failed (not a 404).
    """
    selector = job_selector(job_name)
    if replica_names is None:
        jobs = [o["metadata"]["name"] for o in api.list_jobs(selector, metadata_only=True).get("items") or []]
        services = [o["metadata"]["name"]
                    for o in api.list_services(selector, metadata_only=True).get("items") or []]
    else:
        jobs = services = list(replica_names)
    run_all(api.delete_job, jobs)
    run_all(api.delete_service, services)
    pods = [pod["metadata"]["name"] for pod in api.list_pods(selector, metadata_only=True).get("items") or []]
    run_all(lambda pod: api.delete_pod(pod, 0 if pod in force_pods else pod_grace_s), pods)
    deleters = {"NetworkPolicy": api.delete_network_policy, "PodGroup": api.delete_pod_group}
    for kind in job_level:
        deleters[kind](job_name)


def remaining(run: KubeRun) -> list[str]:
    """The job's objects still listed, as ``kind/name``."""
    left: list[str] = []
    api = run.api
    listers: list[tuple[str, Any]] = [("job", lambda sel: api.list_jobs(sel, metadata_only=True)),
                                      ("service", lambda sel: api.list_services(sel, metadata_only=True)),
                                      ("pod", lambda sel: api.list_pods(sel, metadata_only=True))]
    listers += [(kind.lower(), lister) for kind, _, lister, _, _ in run.job_level()]
    for kind, lister in listers:  # names only (metadata): this is polled while 1,024 pods terminate
        left += [f"{kind}/{o['metadata']['name']}" for o in lister(run.selector).get("items") or []]
    return left


def cleanup(run: KubeRun, error: BaseException | None) -> None:
    """Delete every Job, Service and pod of the job and check that none remain.

    On success a leftover raises :class:`CleanupError`; after a failure it is logged and added as a note
    to the failure (which stays the error the step reports).
    """
    problem = ""
    try:
        # every line is in before deleting: the logs not followed live read now (by the bounded pool), the
        # followed streams of finished containers drained
        read_logs(run, list(run.replicas.values()), run.settings.log_wait_s + LOG_READ_S)
        terminal = terminal_pods(run)  # once, not once per stream (1,024 replicas: 1,024 x 1,024)
        for stream in run.logs.values():
            if stream.live and stream.pod in terminal:
                stream.drain(run.settings.log_wait_s)
        lost = lost_pods(run)
        if lost:
            run.log(f"node {', '.join(sorted(set(lost.values())))} lost: force-deleting {', '.join(sorted(lost))} "
                    f"(grace period 0: no kubelet will confirm their deletion)")
        # each kind concurrently, as they were created (bench/launcher_scale.py's cleanup figure)
        delete_job_objects(run.api, run.job.name, replica_names=[rep.name for rep in run.replicas.values()],
                           pod_grace_s=run.stop_grace_s,
                           job_level=[kind for kind, *_ in run.job_level()], force_pods=lost)
        left: list[str] = []

        def gone() -> bool:
            left[:] = remaining(run)
            return not left

        s = run.settings
        # a stop_grace_s above the default (a program checkpointing on SIGTERM) lengthens the wait by as much
        timeout = s.cleanup_timeout_s + max(0, run.stop_grace_s - STOP_GRACE_S)
        first = min(timeout, run.stop_grace_s + s.force_delete_after_s)
        done = wait_until(gone, first, run.clock)
        if not done and (stuck := [n.split("/", 1)[1] for n in left if n.startswith("pod/")]):
            force_delete(run, stuck)  # their node is gone: no kubelet will ever confirm the deletion
        if done or wait_until(gone, max(0.0, timeout - first), run.clock):
            run.log(f"deleted the Jobs, Services and pods of {run.job.name}; none remain")
        else:
            accepted = deletion_accepted(run, left)
            if accepted and len(accepted) == len(left):
                run.log(f"WARNING: {len(accepted)} pods of {run.job.name} are still listed although their "
                         f"deletion (forced, grace period 0) was accepted: {sorted(accepted)} (a finalizer or "
                         f"an unreachable node keeps them; they run nothing the job needs). Remove them with "
                         + "; ".join(force_command(run, p) for p in sorted(accepted)))
            else:
                force = "; ".join(force_command(run, p) for p in sorted(accepted))
                problem = (f"{len(left)} objects of {run.job.name} remain {timeout:g}s after "
                           f"deleting them: {left}; delete them with kubectl delete {run.kinds()} -n "
                           f"{s.namespace} -l {run.selector}" + (f"; {force}" if force else ""))
    except KubernetesApiError as e:
        problem = (f"cleanup of {run.job.name} failed: {e}; delete what is left with kubectl delete "
                   f"{run.kinds()} -n {run.settings.namespace} -l {run.selector}")
    finally:
        for w in run.watchers:
            w.stop()
        for stream in run.logs.values():
            if stream.live:
                stream.drain(0.5)
            stream.stop()
        run.readers.close()
    if problem:
        run.log(problem)
        if error is None:
            raise CleanupError(problem)
        error.add_note(problem)


def lost_pods(run: KubeRun) -> dict[str, str]:
    """The run's pods whose node was lost (:func:`~tfk8s.launcher.kubernetes.classify.lost_node`), name -> node."""
    return {name: node for rep in run.replicas.values() for name, pod in rep.pods.items() if (node := lost_node(pod))}


def force_delete(run: KubeRun, pods: list[str]) -> None:
    """Delete ``pods`` with grace period 0: they kept their deletionTimestamp past the grace period (their
    node is gone, so no kubelet will confirm the deletion; ``kubectl delete pod --grace-period=0 --force``)."""
    if not pods:
        return
    run.log(f"pods still terminating {run.stop_grace_s + run.settings.force_delete_after_s:g}s "
             f"after their deletion (their node is gone or unreachable): force-deleting {', '.join(pods)} "
             f"(grace period 0)")
    run_all(lambda pod: run.api.delete_pod(pod, 0), pods)


def deletion_accepted(run: KubeRun, left: list[str]) -> list[str]:
    """The pods among ``left`` (``kind/name``) whose deletion the API server accepted (a deletionTimestamp)."""
    names = {n.split("/", 1)[1] for n in left if n.startswith("pod/")}
    return [p["metadata"]["name"] for p in run.api.list_pods(run.selector, metadata_only=True).get("items") or []
            if p["metadata"]["name"] in names and p["metadata"].get("deletionTimestamp")]


def force_command(run: KubeRun, pod: str) -> str:
    """The kubectl command that removes a pod whose node is gone."""
    return f"kubectl delete pod -n {run.settings.namespace} {pod} --grace-period=0 --force"


def terminal_pods(run: KubeRun) -> set[str]:
    """The names of the run's pods that have finished (their logs are complete)."""
    return {name for rep in run.replicas.values() for name, pod in rep.pods.items()
            if classify_pod(pod).terminal}


def wait_until(predicate: Callable[[], bool], timeout_s: float, clock: Callable[[], float]) -> bool:
    """Re-check ``predicate`` every :data:`CLEANUP_POLL_S` seconds until it holds or ``timeout_s`` passes.

    Used only to confirm that deleted objects are gone (the watches are being torn down by then).
    """
    deadline = clock() + timeout_s
    while not predicate():
        remaining = deadline - clock()
        if remaining <= 0:
            return False
        time.sleep(min(CLEANUP_POLL_S, remaining))
    return True
