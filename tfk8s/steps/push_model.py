"""The push step (TFX Pusher): a blessed export -> ``<root>/serving/<model name>/<version>/``, atomically and never
overwriting (:func:`tfk8s.steps.model_versions.push_saved_model`); point TF Serving's model base path there."""

from __future__ import annotations


def push_model_step(*, model_dir: str, volume_root: str, model_name: str, signature: dict | None = None):
    """Promote a blessed export to ``<volume_root>/serving/<model_name>/<version>`` (TFX Pusher).

    ``signature``: the export step's serving signature; given, the model is not loaded again.

    Returns:
        :class:`tfk8s.steps.model_versions.ExportResult` of the pushed version.

    Raises:
        tfk8s.steps.model_versions.ExportError: not a servable version folder, or that version was pushed already.
    """
    from tfk8s.core.layout import VolumeLayout
    from tfk8s.core.volume import volume_writes
    from tfk8s.steps.model_versions import push_saved_model

    serving_base = VolumeLayout(volume_root).serving_base(model_name)
    with volume_writes(serving_base, "the pushed model"):
        return push_saved_model(model_dir, serving_base, signature)
