"""The ensure-volume step: before anything mounts it, the shared volume exists (a PersistentVolumeClaim that is
Bound, or will bind for its first pod; created when asked), or the run fails at once with the fix."""

from __future__ import annotations


def ensure_volume_step(*, backend: str, volume_root: str, pvc_name: str, namespace: str = "",
                       create_pvc: bool = False, pvc_size: str = "20Gi", pvc_storage_class: str = "",
                       api_client=None) -> dict:
    """Make sure the shared volume exists before any step mounts it.

    ``local``: create the folder ``volume_root``. ``kubernetes``: check that PersistentVolumeClaim ``pvc_name``
    exists in ``namespace`` (empty: this pod's), or create it when ``create_pvc`` (see
    :func:`tfk8s.launcher.kubernetes.volume.ensure_pvc`).

    Returns:
        ``{"backend", "volume_root"}`` plus, on Kubernetes, the claim's ``name``, ``namespace``, ``created``,
        ``phase`` and ``access_modes``.

    Raises:
        ValueError: unknown backend or empty pvc_name.
        tfk8s.launcher.kubernetes.errors.VolumeError: the claim is missing (and not to be created) or unusable.
    """
    from pathlib import Path

    from tfk8s.steps import params

    params.check({"backend": backend, "volume_root": volume_root, "pvc_name": pvc_name})
    if backend == "local":
        from tfk8s.core.volume import volume_writes

        with volume_writes(volume_root, "the volume root"):
            Path(volume_root).mkdir(parents=True, exist_ok=True)
        return {"backend": backend, "volume_root": volume_root}
    from tfk8s.launcher.kubernetes import load_api_client
    from tfk8s.launcher.kubernetes.api import KubeApi
    from tfk8s.launcher.kubernetes.settings import resolve_namespace
    from tfk8s.launcher.kubernetes.volume import ensure_pvc

    client = api_client or load_api_client()
    try:
        status = ensure_pvc(KubeApi(client, resolve_namespace(namespace)), pvc_name, create=create_pvc,
                            size=pvc_size, storage_class=pvc_storage_class)
    finally:
        if api_client is None:
            client.close()
    return {"backend": backend, "volume_root": volume_root, **status}
