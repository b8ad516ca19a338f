"""Versioned, atomic SavedModel exports in TF Serving's layout: ``<export base>/<version>/``.

TF Serving (and TFX's Pusher) expect each model version in a folder named by an integer under a base path
and serve the highest. Here:

- the version is one more than the highest existing integer folder (1 for an empty base);
- the model is copied into a hidden staging folder (``.staging-*``, which TF Serving ignores since its name
  is not an integer), checked (it loads; its serving signature, if any, is recorded), then renamed into place: a crash
  mid-export never leaves a half-written version a server could load;
- an existing version is never overwritten: if another export took the number first, the next is used.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

SERVING_SIGNATURE = "serving_default"


class ExportError(RuntimeError):
    """The model could not be exported; the message says why and what to do."""


@dataclass(frozen=True)
class ExportResult:
    """Where a model was exported: ``path`` is ``<base>/<version>``."""

    path: str
    version: int
    signature: dict


def existing_versions(export_base: str | os.PathLike) -> list[int]:
    """Integer version folders under ``export_base``, ascending (missing base: ``[]``)."""
    base = Path(export_base)
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit())


def next_version(export_base: str | os.PathLike, *other_bases: str | os.PathLike) -> int:
    """One more than the highest existing version under ``export_base`` and ``other_bases``, or 1."""
    versions = [v for base in (export_base, *other_bases) for v in existing_versions(base)]
    return max(versions) + 1 if versions else 1


def keras_files_instead(folder: str | os.PathLike) -> str:
    """Why ``folder``, which has no ``saved_model.pb``, is not a SavedModel when it holds Keras model files (a
    Keras 3 ``model.save("x.keras")``: ``model.save(dir)`` refuses a folder), with ``model.export(...)`` as the
    fix; ``""`` when it holds none."""
    src = Path(folder)
    keras = sorted(p.name for p in src.glob("*") if p.suffix in (".keras", ".h5")) if src.is_dir() else []
    if not keras:
        return ""
    return (f"no SavedModel at {src} (no saved_model.pb; it holds the Keras model file(s) {keras}, which TF "
            f"Serving cannot load): with Keras 3 export the model with model.export(os.environ['TFK8S_MODEL_DIR']) "
            f"(a SavedModel with a serving_default signature); with tf-keras save it with "
            f"model.save(os.environ['TFK8S_MODEL_DIR'])")


def serving_signature(saved_model_dir: str | os.PathLike, required: bool = True) -> dict:
    """Load a SavedModel and describe its ``serving_default`` signature.

    Args:
        required: without a ``serving_default`` signature, raise (True) or return ``{}`` (False: any
            SavedModel is exported; evaluation then says it cannot run it).

    Returns:
        ``{"inputs": {name: {"dtype": str, "shape": [..]}}, "outputs": {...}}`` (unknown dims are None).

    Raises:
        ExportError: the folder holds no loadable SavedModel, or (``required``) it has no ``serving_default``.
    """
    no_pb = not any((Path(saved_model_dir) / f).is_file() for f in ("saved_model.pb", "saved_model.pbtxt"))
    if no_pb and (keras := keras_files_instead(saved_model_dir)):  # the evaluate step on a Keras-only folder
        raise ExportError(keras)
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(str(saved_model_dir))
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise ExportError(f"{saved_model_dir} does not hold a loadable SavedModel: {e}") from e
    if SERVING_SIGNATURE not in loaded.signatures:
        if not required:
            return {}
        raise ExportError(
            f"{saved_model_dir} has no '{SERVING_SIGNATURE}' signature (it has {list(loaded.signatures)}): "
            "save the model with model.save() or pass signatures= to tf.saved_model.save"
        )
    fn = loaded.signatures[SERVING_SIGNATURE]

    def describe(specs) -> dict:
        return {name: {"dtype": spec.dtype.name, "shape": spec.shape.as_list()} for name, spec in specs.items()}

    return {"inputs": describe(fn.structured_input_signature[1]), "outputs": describe(fn.structured_outputs)}


def export_saved_model(saved_model_dir: str | os.PathLike, export_base: str | os.PathLike,
                       reserved_bases: tuple[str | os.PathLike, ...] = ()) -> ExportResult:
    """Copy a SavedModel to the next version under ``export_base``, atomically, after checking it loads.

    Args:
        saved_model_dir: the trained SavedModel (the chief's ``<train dir>/saved_model``).
        export_base: the model's base path; created if missing.
        reserved_bases: other bases whose versions the new one must also exceed (the serving base, so a
            version pushed there before is never reused, even if ``export_base`` was pruned).

    Returns:
        The new version's path, number and serving signature.

    Raises:
        ExportError: ``saved_model_dir`` is missing or not a loadable SavedModel (any signatures, or none,
            are fine; a Keras 3 ``.keras`` file there is named, with ``model.export(...)`` as the fix); nothing is
            written under ``export_base`` then.
    """
    src = Path(saved_model_dir)
    if not (src / "saved_model.pb").is_file():
        if keras := keras_files_instead(src):
            raise ExportError(keras)
        raise ExportError(f"no SavedModel at {src} (no saved_model.pb): did training finish on the chief?")
    base = Path(export_base)
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=base))
    try:
        model_copy = staging / "model"
        shutil.copytree(src, model_copy)
        signature = serving_signature(model_copy, required=False)  # any SavedModel: it loads
        while True:
            version = next_version(base, *reserved_bases)
            try:
                # rename(2) is atomic, and fails on a non-empty target: an existing version is never replaced.
                os.rename(model_copy, base / str(version))
            except OSError as e:
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    continue  # someone exported this version first: take the next
                raise
            break
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(str(base / str(version)), version, signature)


def push_saved_model(version_dir: str | os.PathLike, serving_base: str | os.PathLike,
                     signature: dict | None = None) -> ExportResult:
    """Promote a blessed export to the serving base, keeping its version number (TFX Pusher's job).

    ``<models>/<name>/<v>`` is copied to ``<serving base>/<v>`` through a staging folder and one atomic rename,
    so a model server watching the serving base only ever sees complete, blessed versions.

    Args:
        signature: the export's serving signature as :func:`export_saved_model` returned it (the pipeline
            passes the export step's): then the version, already loaded by the export and the evaluation, is
            not loaded again (no TensorFlow start-up in the push step); None: loaded and checked here.

    Returns:
        The pushed version's path, number and serving signature.

    Raises:
        ExportError: ``version_dir`` is not named by an integer version, or is not a servable SavedModel; or
            the serving base already holds that version (it is never overwritten).
    """
    src = Path(version_dir)
    if not src.name.isdigit():
        raise ExportError(f"{src} is not a version folder (<base>/<integer>): pass the exported model's path")
    version = int(src.name)
    if signature is None or not (src / "saved_model.pb").is_file():
        signature = serving_signature(src, required=False)
    base = Path(serving_base)
    base.mkdir(parents=True, exist_ok=True)
    target = base / str(version)
    if target.exists():
        raise ExportError(f"{target} exists already: version {version} was pushed before; versions are never "
                          "overwritten (export a new version)")
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=base))
    try:
        shutil.copytree(src, staging / "model")
        try:
            os.rename(staging / "model", target)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise ExportError(f"{target} was pushed concurrently; versions are never overwritten") from e
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(str(target), version, signature)


def latest_version_dir(base: str | os.PathLike) -> str | None:
    """``<base>/<highest version>``, or None when ``base`` holds no version (e.g. nothing pushed yet)."""
    versions = existing_versions(base)
    return str(Path(base) / str(versions[-1])) if versions else None
