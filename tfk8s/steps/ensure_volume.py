"""The ensure-volume step: before anything mounts it, the shared volume exists (a PersistentVolumeClaim that is
Bound, or will bind for its first pod; created when asked), or the run fails at once with the fix."""

from __future__ import annotations


def ensure_volume_step(*, backend: str, volume_root: str, pvc_name: str, namespace: str = "",
                       create_pvc: bool = False, pvc_size: str = "20Gi", pvc_storage_class: str = "",
                       api_client=None) -> dict:
    """Make sure the shared volume exists before any step mounts it, as the backend provides one
    (:meth:`tfk8s.launcher.backends.Volume.ensure_volume`).

    ``local``: create the folder ``volume_root``. ``kubernetes``: check that PersistentVolumeClaim ``pvc_name``
    exists in ``namespace`` (empty: this pod's), or create it when ``create_pvc`` (see
    :func:`tfk8s.launcher.kubernetes.volume.ensure_pvc`).

    Returns:
        ``{"backend", "volume_root"}`` plus, on Kubernetes, the claim's ``name``, ``namespace``, ``created``,
        ``phase`` and ``access_modes``.

    Raises:
        ValueError: unknown backend or empty pvc_name.
        tfk8s.core.volume.VolumeWriteError: local, the folder cannot be made.
        tfk8s.launcher.kubernetes.errors.VolumeError: the claim is missing (and not to be created) or unusable.
    """
    from tfk8s.launcher.backends import get_backend
    from tfk8s.steps import parameters as params

    params.check({"backend": backend, "volume_root": volume_root, "pvc_name": pvc_name})
    status = get_backend(backend).ensure_volume(volume_root=volume_root, pvc_name=pvc_name, namespace=namespace,
                                                create=create_pvc, size=pvc_size, storage_class=pvc_storage_class,
                                                api_client=api_client)
    return {"backend": backend, "volume_root": volume_root, **status}
