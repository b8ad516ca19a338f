"""Create a training job's objects, or re-attach to those of a previous launcher of the same run.

Every replica gets a headless Service and a Job named ``<job>-<type>-<index>``
(:mod:`tfk8s.launcher.kubernetes.objects`), created a few at a time concurrently
(:mod:`tfk8s.launcher.kubernetes.parallel`); the job's NetworkPolicy and PodGroup come first. The job name is
derived from the pipeline run, so a restarted launcher finds the Jobs of its predecessor by label, adopts them
(their attempt numbers, and the restart budget already used from the ``tfk8s.dev/restarts`` annotation), makes
its own pod their owner, and creates only what is missing. Then the two watches start. Functions over the run
(:class:`~tfk8s.launcher.kubernetes.state.KubeRun`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tfk8s.core.cluster import Replica
from tfk8s.launcher.kubernetes import objects
from tfk8s.launcher.kubernetes.errors import AlreadyExistsError, KubernetesApiError
from tfk8s.launcher.kubernetes.kueue import check_local_queue
from tfk8s.launcher.kubernetes.parallel import run_all
from tfk8s.launcher.kubernetes.state import KubeRun, ReplicaState, parse_time
from tfk8s.launcher.kubernetes.watch import Watcher

CREATE_POLL_S = 0.5  # while a deleted predecessor of a Job still exists


def launch(run: KubeRun) -> None:
    """Create the job's objects, or adopt those of a previous launcher of the same run (its attempts and restart
    count; its deadline, counted from its oldest Job), then start the two watches."""
    s, job = run.settings, run.job
    if s.owner_note():
        run.log(s.owner_note())
    check_local_queue(run)  # a missing or inactive Kueue queue would hold every Job until the schedule deadline
    existing = run.api.list_jobs(run.selector).get("items") or []
    adopted: dict[Replica, int] = {}
    for obj in existing:
        parsed = objects.replica_from_labels((obj.get("metadata") or {}).get("labels"))
        if parsed and parsed[0] in run.replicas:
            adopted[parsed[0]] = parsed[1]
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            try:
                run.engine.restarts = max(run.engine.restarts, int(annotations.get(objects.ANNOTATION_RESTARTS, "0")))
            except ValueError:
                pass
    if job.timeout_s:
        started = [t for t in (parse_time((o.get("metadata") or {}).get("creationTimestamp"))
                               for o in existing) if t]
        elapsed = max(0.0, (datetime.now(UTC) - min(started)).total_seconds()) if started else 0.0
        run.engine.deadline = run.engine.start + job.timeout_s - elapsed
    spec = objects.training_cluster_spec(job, s)
    if adopted:
        run.log(f"re-attaching to {len(adopted)} existing Jobs of {job.name} in namespace {s.namespace} "
                 f"(restarts used so far: {run.engine.restarts} of {job.max_restarts})")
    else:
        run.log(f"launching {job.name} in namespace {s.namespace}: {job.counts.total} replicas, "
                 f"cluster spec {spec}")
    run.log(f"find its objects with: kubectl get {run.kinds()} -n {s.namespace} -l {run.selector}")
    create_job_level(run)

    def create_service(r: Replica) -> bool:
        try:
            run.api.create_service(objects.service_manifest(job, r, s))
            return False
        except AlreadyExistsError:
            return True  # created by a previous launcher of this run

    # Concurrently (tfk8s.launcher.kubernetes.parallel): 2 requests per replica, a few in flight at a time.
    existing_services = any(run_all(create_service, list(run.replicas)))
    ours = [o for o in existing
            if (objects.replica_from_labels((o.get("metadata") or {}).get("labels")) or (None,))[0]
            in run.replicas]
    adopt(run, "Job", ours, run.api.set_job_owners)
    if existing_services:
        adopt(run, "Service", run.api.list_services(run.selector).get("items") or [],
                    run.api.set_service_owners)
    next_attempt = max(adopted.values(), default=-1) + 1
    now = run.clock()
    missing = []
    for r, rep in run.replicas.items():
        if r in adopted:
            rep.reset(adopted[r], now)
        else:
            rep.reset(next_attempt if adopted else 0, now)
            missing.append(rep)
    run_all(lambda rep: create_job(run, rep), missing)
    for kind, lister, watcher in (("pods", run.api.list_pods, run.api.watch_pods),
                                  ("jobs", run.api.list_jobs, run.api.watch_jobs)):
        w = Watcher(kind, lambda lister=lister: lister(run.selector),
                    lambda rv, t, watcher=watcher: watcher(run.selector, rv, t), run.events,
                    timeout_s=s.watch_timeout_s)
        run.watchers.append(w)
        w.start()

def create_job_level(run: KubeRun) -> None:
    """Create the NetworkPolicy and PodGroup (before any pod exists: a pod is isolated from its first
    packet, and the gang is known before its first member is scheduled); adopt those of a previous
    launcher."""
    manifests = {m["kind"]: m for m in objects.job_level_manifests(run.job, run.settings)}
    for kind, create, lister, _, set_owners in run.job_level():
        try:
            create(manifests[kind])
            if kind == "NetworkPolicy":
                peers = f" and, to port {run.job.port}, from network_policy_from" \
                    if run.settings.network_policy_from else ""
                run.log(f"NetworkPolicy {run.job.name}: ingress to the replicas only from pods of {run.job.name} "
                        f"(every port: NCCL's too){peers}")
            else:
                run.log(f"PodGroup {run.job.name}: gang scheduling, none of the {run.job.counts.total} "
                         f"replicas is bound to a node unless all can be")
        except AlreadyExistsError:
            adopt(run, kind, lister(run.selector).get("items") or [], set_owners)

def adopt(run: KubeRun, kind: str, found: list[dict[str, Any]],
           set_owners: Callable[[str, list[dict[str, Any]]], bool]) -> None:
    """Make this launcher's pod the owner of the ``found`` objects a previous launcher created: the garbage
    collector would delete them with the previous launcher's pod."""
    refs = objects.owner_references(run.settings)
    moved = []
    for obj in found:
        meta = obj.get("metadata") or {}
        owners = [r.get("uid") for r in meta.get("ownerReferences") or []]
        if owners != [r["uid"] for r in refs] and set_owners(meta["name"], refs):
            moved.append(meta["name"])
    if moved:
        owner = f"launcher pod {refs[0]['name']}" if refs else "no owner (see above)"
        run.log(f"re-attached {kind}s now owned by {owner}: {', '.join(sorted(moved))}")

def create_job(run: KubeRun, rep: ReplicaState) -> None:
    """Create the Job of ``rep``'s current attempt, retrying while its deleted predecessor still exists."""
    if run.engine.deadline is not None:
        active = max(1, math.ceil(run.engine.deadline - run.clock()))
    else:
        active = objects.default_active_deadline_s(run.job, run.settings)
    body = objects.job_manifest(run.job, rep.replica, run.settings, attempt=rep.attempt,
                                restarts=run.engine.restarts, active_deadline_s=active)
    give_up = run.clock() + run.settings.create_retry_s
    while True:
        try:
            run.api.create_job(body)
            break
        except AlreadyExistsError:
            if run.clock() >= give_up:
                raise KubernetesApiError(
                    f"Job {rep.name} still exists {run.settings.create_retry_s:.0f}s after it was deleted; "
                    f"delete it (kubectl delete job -n {run.settings.namespace} {rep.name}) and rerun",
                    409) from None
            time.sleep(CREATE_POLL_S)  # the old Job is terminating; nothing to watch for its name
    rep.created_at = run.clock()
