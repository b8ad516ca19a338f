"""Create a training job's objects, or re-attach to those of a previous launcher of the same run.

Every replica gets a headless Service and a Job named ``<job>-<type>-<index>``
(:mod:`tfk8s.launcher.kubernetes.objects`), created a few at a time concurrently
(:mod:`tfk8s.launcher.kubernetes.parallel`); the job's NetworkPolicy and PodGroup come first. The job name is
derived from the pipeline run, so a restarted launcher finds the Jobs of its predecessor by label, adopts them
(their attempt numbers, and the restart budget already used from the ``tfk8s.dev/restarts`` annotation), makes
its own pod their owner, and creates only what is missing. Then the two watches start.
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
from tfk8s.launcher.kubernetes.parallel import run_all
from tfk8s.launcher.kubernetes.state import ReplicaState, parse_time
from tfk8s.launcher.kubernetes.watch import Watcher

CREATE_POLL_S = 0.5  # while a deleted predecessor of a Job still exists


class Creation:
    """The creating half of :class:`~tfk8s.launcher.kubernetes.backend.KubernetesBackend` (a mixin: it uses the
    backend's ``job``, ``settings``, ``api``, ``replicas``, ``restarts``, ``selector``, ``log`` and clock)."""

    def _launch(self) -> None:
        s, job = self.settings, self.job
        if s.owner_note():
            self.log(s.owner_note())
        existing = self.api.list_jobs(self.selector).get("items") or []
        adopted: dict[Replica, int] = {}
        for obj in existing:
            parsed = objects.replica_from_labels((obj.get("metadata") or {}).get("labels"))
            if parsed and parsed[0] in self.replicas:
                adopted[parsed[0]] = parsed[1]
                annotations = (obj.get("metadata") or {}).get("annotations") or {}
                try:
                    self.restarts = max(self.restarts, int(annotations.get(objects.ANNOTATION_RESTARTS, "0")))
                except ValueError:
                    pass
        if job.timeout_s:
            started = [t for t in (parse_time((o.get("metadata") or {}).get("creationTimestamp"))
                                   for o in existing) if t]
            elapsed = max(0.0, (datetime.now(UTC) - min(started)).total_seconds()) if started else 0.0
            self._deadline = self._start + job.timeout_s - elapsed
        spec = objects.training_cluster_spec(job, s)
        if adopted:
            self.log(f"re-attaching to {len(adopted)} existing Jobs of {job.name} in namespace {s.namespace} "
                     f"(restarts used so far: {self.restarts} of {job.max_restarts})")
        else:
            self.log(f"launching {job.name} in namespace {s.namespace}: {job.counts.total} replicas, "
                     f"cluster spec {spec}")
        self.log(f"find its objects with: kubectl get {self._kinds()} -n {s.namespace} -l {self.selector}")
        self._create_job_level()

        def create_service(r: Replica) -> bool:
            try:
                self.api.create_service(objects.service_manifest(job, r, s))
                return False
            except AlreadyExistsError:
                return True  # created by a previous launcher of this run

        # Concurrently (tfk8s.launcher.kubernetes.parallel): 2 requests per replica, a few in flight at a time.
        existing_services = any(run_all(create_service, list(self.replicas)))
        ours = [o for o in existing
                if (objects.replica_from_labels((o.get("metadata") or {}).get("labels")) or (None,))[0]
                in self.replicas]
        self._adopt("Job", ours, self.api.set_job_owners)
        if existing_services:
            self._adopt("Service", self.api.list_services(self.selector).get("items") or [],
                        self.api.set_service_owners)
        next_attempt = max(adopted.values(), default=-1) + 1
        now = self._clock()
        missing = []
        for r, rep in self.replicas.items():
            if r in adopted:
                rep.reset(adopted[r], now)
            else:
                rep.reset(next_attempt if adopted else 0, now)
                missing.append(rep)
        run_all(self._create_job, missing)
        for kind, lister, watcher in (("pods", self.api.list_pods, self.api.watch_pods),
                                      ("jobs", self.api.list_jobs, self.api.watch_jobs)):
            w = Watcher(kind, lambda lister=lister: lister(self.selector),
                        lambda rv, t, watcher=watcher: watcher(self.selector, rv, t), self._queue,
                        timeout_s=s.watch_timeout_s)
            self._watchers.append(w)
            w.start()

    def _job_level(self) -> list[tuple[str, Callable[..., Any], Callable[..., Any], Callable[..., Any],
                                       Callable[..., Any]]]:
        """``(kind, create, list, delete, set owners)`` of each job-level object kind the settings ask for."""
        api, s, kinds = self.api, self.settings, []
        if s.network_policy:
            kinds.append(("NetworkPolicy", api.create_network_policy, api.list_network_policies,
                          api.delete_network_policy, api.set_network_policy_owners))
        if s.gang == "native":
            kinds.append(("PodGroup", api.create_pod_group, api.list_pod_groups, api.delete_pod_group,
                          api.set_pod_group_owners))
        return kinds

    def _create_job_level(self) -> None:
        """Create the NetworkPolicy and PodGroup (before any pod exists: a pod is isolated from its first
        packet, and the gang is known before its first member is scheduled); adopt those of a previous
        launcher."""
        manifests = {m["kind"]: m for m in objects.job_level_manifests(self.job, self.settings)}
        for kind, create, lister, _, set_owners in self._job_level():
            try:
                create(manifests[kind])
                if kind == "NetworkPolicy":
                    self.log(f"NetworkPolicy {self.job.name}: ingress to port {self.job.port} of the replicas only "
                             f"from pods of {self.job.name}"
                             f"{' and network_policy_from' if self.settings.network_policy_from else ''}")
                else:
                    self.log(f"PodGroup {self.job.name}: gang scheduling, none of the {self.job.counts.total} "
                             f"replicas is bound to a node unless all can be")
            except AlreadyExistsError:
                self._adopt(kind, lister(self.selector).get("items") or [], set_owners)

    def _adopt(self, kind: str, found: list[dict[str, Any]],
               set_owners: Callable[[str, list[dict[str, Any]]], bool]) -> None:
        """Make this launcher's pod the owner of the ``found`` objects a previous launcher created: the garbage
        collector would delete them with the previous launcher's pod."""
        refs = objects.owner_references(self.settings)
        moved = []
        for obj in found:
            meta = obj.get("metadata") or {}
            owners = [r.get("uid") for r in meta.get("ownerReferences") or []]
            if owners != [r["uid"] for r in refs] and set_owners(meta["name"], refs):
                moved.append(meta["name"])
        if moved:
            owner = f"launcher pod {refs[0]['name']}" if refs else "no owner (see above)"
            self.log(f"re-attached {kind}s now owned by {owner}: {', '.join(sorted(moved))}")

    def _create_job(self, rep: ReplicaState) -> None:
        """Create the Job of ``rep``'s current attempt, retrying while its deleted predecessor still exists."""
        if self._deadline is not None:
            active = max(1, math.ceil(self._deadline - self._clock()))
        else:
            active = objects.default_active_deadline_s(self.job, self.settings)
        body = objects.job_manifest(self.job, rep.replica, self.settings, attempt=rep.attempt,
                                    restarts=self.restarts, active_deadline_s=active)
        give_up = self._clock() + self.settings.create_retry_s
        while True:
            try:
                self.api.create_job(body)
                break
            except AlreadyExistsError:
                if self._clock() >= give_up:
                    raise KubernetesApiError(
                        f"Job {rep.name} still exists {self.settings.create_retry_s:.0f}s after it was deleted; "
                        f"delete it (kubectl delete job -n {self.settings.namespace} {rep.name}) and rerun",
                        409) from None
                time.sleep(CREATE_POLL_S)  # the old Job is terminating; nothing to watch for its name
        rep.created_at = self._clock()
