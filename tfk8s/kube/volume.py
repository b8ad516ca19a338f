"""The shared volume: check that the PersistentVolumeClaim exists (or create it when asked) before anything
mounts it, so a missing volume fails the run at once with the fix instead of leaving pods Pending."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfk8s.kube.api import KubeApi
from tfk8s.kube.errors import AlreadyExistsError, VolumeError
from tfk8s.kube.objects import pvc_manifest
from tfk8s.kube.settings import parse_quantity

SHARED_ACCESS_MODES = ("ReadWriteMany",)


def ensure_pvc(api: KubeApi, name: str, *, create: bool = False, size: str = "20Gi", storage_class: str = "",
               log: Callable[[str], None] = print) -> dict[str, Any]:
    """Make sure PersistentVolumeClaim ``name`` exists in ``api.namespace``.

    Args:
        create: create it (``ReadWriteMany``, ``size``, ``storage_class``) if it does not exist.
        size: requested storage, a Kubernetes quantity (``20Gi``); used only when creating.
        storage_class: StorageClass when creating; empty: the cluster's default.

    Returns:
        ``{"name", "namespace", "created": bool, "phase", "access_modes"}``.

    Raises:
        VolumeError: it does not exist and ``create`` is False; it is ``Lost``; or ``size`` is not a quantity.
        tfk8s.kube.errors.KubernetesApiError: the API refused (e.g. RBAC: the message says what to apply).
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
    phase = (pvc.get("status") or {}).get("phase", "Pending")
    modes = list((pvc.get("spec") or {}).get("accessModes") or [])
    if phase == "Lost":
        raise VolumeError(f"PersistentVolumeClaim {name!r} is Lost (its PersistentVolume is gone): "
                          "recreate it or use another pvc_name")
    if modes and not set(modes) & set(SHARED_ACCESS_MODES):
        log(f"WARNING: PersistentVolumeClaim {name} is {', '.join(modes)}, not ReadWriteMany: the launcher and "
            "replicas on different nodes cannot all mount it")
    if not created:
        log(f"using PersistentVolumeClaim {name} in namespace {api.namespace} (phase {phase})")
    return {"name": name, "namespace": api.namespace, "created": created, "phase": phase, "access_modes": modes}
