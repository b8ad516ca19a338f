"""The shared volume: check that the PersistentVolumeClaim exists (or create it when asked) and can be bound
before anything mounts it, so a missing or unprovisionable volume fails the run at once with the fix instead of
leaving every later pod Pending.

A claim that is ``Pending``:

- with a ``ProvisioningFailed`` event (the provisioner cannot make it, e.g. ReadWriteMany on a class whose
  provisioner offers only ReadWriteOnce): fails at once with the provisioner's message;
- with a ``WaitForFirstConsumer`` event (the PV controller's, for a class with ``volumeBindingMode:
  WaitForFirstConsumer``): fine, it binds when the first pod mounts it;
- otherwise (a class with ``Immediate`` binding, or no class at all): waited for up to ``bind_timeout_s``
  (default :data:`BIND_TIMEOUT_S`), then fails with the claim's last events.

A claim being deleted (``deletionTimestamp`` set: Terminating, e.g. held by ``kubernetes.io/pvc-protection``
while a pod still mounts it) or ``Lost`` (its PersistentVolume gone) fails at once, naming it and the fix: a pod
that mounts it would never start.

The binding mode is read from the claim's events rather than its StorageClass: StorageClasses are cluster-scoped,
and the launcher's Role (``manifests/rbac.yaml``) is namespaced on purpose.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tfk8s.launcher.kubernetes.api import KubeApi
from tfk8s.launcher.kubernetes.errors import AlreadyExistsError, VolumeError
from tfk8s.launcher.kubernetes.objects import pvc_manifest
from tfk8s.launcher.kubernetes.values import parse_quantity

SHARED_ACCESS_MODES = ("ReadWriteMany",)
BIND_TIMEOUT_S = 180.0
"""Seconds a claim may stay Pending (without a WaitForFirstConsumer event) before ensure-volume fails; a cloud
or NFS provisioner needs seconds to a minute."""
POLL_S = 2.0


def ensure_pvc(api: KubeApi, name: str, *, create: bool = False, size: str = "20Gi", storage_class: str = "",
               log: Callable[[str], None] = print, bind_timeout_s: float = BIND_TIMEOUT_S,
               poll_s: float = POLL_S) -> dict[str, Any]:
    """Make sure PersistentVolumeClaim ``name`` exists in ``api.namespace``.

    Args:
        create: create it (``ReadWriteMany``, ``size``, ``storage_class``) if it does not exist.
        size: requested storage, a Kubernetes quantity (``20Gi``); used only when creating.
        storage_class: StorageClass when creating; empty: the cluster's default.
        bind_timeout_s: seconds a Pending claim (without a WaitForFirstConsumer event) may take to bind.
        poll_s: seconds between looks at a Pending claim and its events.

    Returns:
        ``{"name", "namespace", "created": bool, "phase", "access_modes"}``.

    Raises:
        VolumeError: it does not exist and ``create`` is False; it is being deleted (``deletionTimestamp``:
            Terminating) or ``Lost``; ``size`` is not a quantity; it
            is Pending with a ``ProvisioningFailed`` event (the provisioner's message), or Pending without a
            WaitForFirstConsumer event for ``bind_timeout_s`` (its last events).
        tfk8s.launcher.kubernetes.errors.KubernetesApiError: the API refused (e.g. RBAC: the message says what to apply).
    """
    created = False
    pvc = api.read_pvc(name)
    if pvc is None:
        if not create:
            raise VolumeError(
                f"PersistentVolumeClaim {name!r} not found in namespace {api.namespace!r}: create it "
                f"(ReadWriteMany, e.g. `kubectl create -n {api.namespace} -f pvc.yaml`), pass the name of an "
                f"existing one as pvc_name, or set create_pvc=true to have the pipeline create it"
            )
        try:
            parse_quantity(size)
        except ValueError as e:
            raise VolumeError(f"pvc_size: {e}") from None
        try:
            pvc = api.create_pvc(pvc_manifest(name, api.namespace, size=size, storage_class=storage_class))
            created = True
            log(f"created PersistentVolumeClaim {name} ({size}, ReadWriteMany, storage class "
                f"{storage_class or 'default'}) in namespace {api.namespace}")
        except AlreadyExistsError:  # created concurrently (another run): use it
            pvc = api.read_pvc(name) or {}
    _refuse_terminating(api, name, pvc)
    phase = (pvc.get("status") or {}).get("phase", "Pending")
    modes = list((pvc.get("spec") or {}).get("accessModes") or [])
    if phase == "Pending":
        phase = _wait_bound(api, name, pvc, bind_timeout_s, poll_s, log)
    if phase == "Lost":
        _refuse_lost(api, name, api.read_pvc(name) or pvc)
    if modes and not set(modes) & set(SHARED_ACCESS_MODES):
        log(f"WARNING: PersistentVolumeClaim {name} is {', '.join(modes)}, not ReadWriteMany: the launcher and "
            "replicas on different nodes cannot all mount it")
    if not created:
        log(f"using PersistentVolumeClaim {name} in namespace {api.namespace} (phase {phase})")
    return {"name": name, "namespace": api.namespace, "created": created, "phase": phase, "access_modes": modes}


def _refuse_terminating(api: KubeApi, name: str, pvc: dict[str, Any]) -> None:
    """A claim being deleted (``metadata.deletionTimestamp`` set, ``kubectl get pvc`` says Terminating) cannot be
    mounted by a new pod: the pod stays ContainerCreating/Pending until the claim is gone, then fails. Its
    finalizers keep it meanwhile (``kubernetes.io/pvc-protection``: while a pod still uses it)."""
    meta = pvc.get("metadata") or {}
    since = meta.get("deletionTimestamp")
    if not since:
        return
    finalizers = list(meta.get("finalizers") or [])
    held = (f", held by its finalizers {', '.join(finalizers)}" if finalizers else "")
    protection = (" (kubernetes.io/pvc-protection stays while a pod still mounts it: kubectl get pods -n "
                  f"{api.namespace} -o wide lists them)" if "kubernetes.io/pvc-protection" in finalizers else "")
    raise VolumeError(
        f"PersistentVolumeClaim {name!r} in namespace {api.namespace!r} is being deleted (Terminating since "
        f"{since}{held}){protection}: a pod that mounts it would never start. Let the deletion finish (kubectl get "
        f"pvc -n {api.namespace} {name}), then run again with create_pvc=true to get a new, empty claim, or pass "
        f"the name of another claim as pvc_name")


def _refuse_lost(api: KubeApi, name: str, pvc: dict[str, Any]) -> None:
    """A ``Lost`` claim's PersistentVolume is gone: no pod mounting it will start, and its data is not there."""
    volume = (pvc.get("spec") or {}).get("volumeName") or "?"
    raise VolumeError(
        f"PersistentVolumeClaim {name!r} in namespace {api.namespace!r} is Lost: its PersistentVolume {volume} is "
        f"gone, so a pod that mounts it would never start. Restore that volume (an administrator can recreate "
        f"the PersistentVolume {volume} with the same data), or delete the claim (kubectl delete pvc -n "
        f"{api.namespace} {name}) and run again with create_pvc=true (a new, empty volume), or pass the name of "
        f"another claim as pvc_name")


def _wait_bound(api: KubeApi, name: str, pvc: dict[str, Any], bind_timeout_s: float, poll_s: float,
                log: Callable[[str], None]) -> str:
    """Wait for a Pending claim: its phase once Bound (or Lost), ``"Pending"`` when it waits for its first
    consumer; raises :class:`VolumeError` on ProvisioningFailed or after ``bind_timeout_s``."""
    deadline = time.monotonic() + bind_timeout_s
    storage_class = (pvc.get("spec") or {}).get("storageClassName") or "the default class"
    where = f"(kubectl describe pvc -n {api.namespace} {name})"
    while True:
        events = [e for e in api.list_events(name)
                  if (e.get("involvedObject") or {}).get("kind", "PersistentVolumeClaim") == "PersistentVolumeClaim"]
        failed = [e for e in events if e.get("reason") == "ProvisioningFailed"]
        if failed:
            source = (failed[-1].get("source") or {}).get("component") or "the provisioner"
            raise VolumeError(
                f"PersistentVolumeClaim {name!r} (storage class {storage_class}) cannot be provisioned: "
                f"{failed[-1].get('message', '').strip()} (ProvisioningFailed, from {source}) {where}. Use a storage "
                f"class whose provisioner offers ReadWriteMany (NFS, CephFS, a cloud file store) with "
                f"pvc_storage_class, or create a suitable claim yourself and pass its name as pvc_name")
        if any(e.get("reason") == "WaitForFirstConsumer" for e in events):
            log(f"PersistentVolumeClaim {name} is Pending until the first pod mounts it (storage class "
                f"{storage_class} binds on WaitForFirstConsumer)")
            return "Pending"
        if time.monotonic() >= deadline:
            last = "; ".join(f"{e.get('reason', '')}: {e.get('message', '').strip()}" for e in events[-3:])
            raise VolumeError(
                f"PersistentVolumeClaim {name!r} (storage class {storage_class}) is still Pending after "
                f"{bind_timeout_s:g}s and its class binds immediately: no volume was provisioned or matched "
                f"({f'last events: {last}' if last else 'no events: is there a provisioner for the class?'}) "
                f"{where}. Check the storage class and its provisioner, or pass pvc_storage_class / the name of "
                f"a Bound claim as pvc_name")
        time.sleep(poll_s)
        current = api.read_pvc(name) or pvc
        phase = (current.get("status") or {}).get("phase", "Pending")
        if phase != "Pending":
            return phase
