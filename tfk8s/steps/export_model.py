"""The export step: the coordinator's SavedModel -> the next version under ``<root>/models/<model name>/``
(:mod:`tfk8s.steps.model_versions`: TF Serving's layout, atomic, never overwritten)."""

from __future__ import annotations


def default_model_name(dataset: str, builtin_trainer: bool = True) -> str:
    """The model's name when none is given: ``<data set>-cnn`` for the built-in trainer (``mnist-cnn``),
    ``<data set>-model`` for a user's program; characters a folder name cannot hold become ``-``.

    Raises:
        ValueError: ``dataset`` is empty.
    """
    import re

    if not dataset:
        raise ValueError("cannot derive a model name without a data set name: pass model_name")
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", dataset).strip("-.") or "data"
    return f"{base}-{'cnn' if builtin_trainer else 'model'}"


def model_name_of(saved_model_dir: str) -> str:
    """The model name a run without ``model_name`` gets, as the KFP component derives it from the launch step's
    Model metadata, here from the launch step's ``training_summary.json`` beside the SavedModel (what the Argo
    export and the CLI have): :func:`default_model_name` of its ``dataset`` and ``builtin_trainer``.

    Raises:
        ValueError: no summary there (pass ``--model-name``).
    """
    import json
    from pathlib import Path

    from tfk8s.core.layout import TrainLayout

    summary = TrainLayout(Path(saved_model_dir).parent).summary
    try:
        data = json.loads(summary.read_text())
    except (OSError, ValueError):
        raise ValueError(f"no model name given and no training summary {summary} to derive it from (the launch "
                         f"step writes it): pass --model-name") from None
    return default_model_name(data.get("dataset") or "model", bool(data.get("builtin_trainer", True)))


def export_model_step(*, saved_model_dir: str, volume_root: str, model_name: str):
    """Export ``saved_model_dir`` (any SavedModel) as the next version under ``<volume_root>/models/<model_name>``.

    Returns:
        :class:`tfk8s.steps.model_versions.ExportResult` (path, version, serving signature or ``{}`` without one).

    Raises:
        tfk8s.steps.model_versions.ExportError: not a loadable SavedModel.
    """
    from tfk8s.core.layout import VolumeLayout
    from tfk8s.core.volume import volume_writes
    from tfk8s.steps.model_versions import export_saved_model

    volume = VolumeLayout(volume_root)
    export_base = volume.export_base(model_name)
    try:
        with volume_writes(export_base, "the exported model"):
            return export_saved_model(saved_model_dir, export_base, reserved_bases=(volume.serving_base(model_name),))
    except BaseException:  # the run ends here: its evaluate step will not read the data it holds
        from pathlib import Path

        from tfk8s.core.data_hold import release_hold
        from tfk8s.core.layout import TrainLayout

        release_hold(TrainLayout(Path(saved_model_dir).parent).run_dir,
                     "its export-model step failed (its evaluate step does not run)")
        raise
