"""The pipeline's parameters checked before a run starts (``pipelines/train.py --local``, ``--run``,
``--schedule``): against the inputs the compiled package declares, together (:func:`tfk8s.steps.parameters.check`),
and the data (the user's ``data_dir``, else ``dataset_name`` in TFDS), in seconds and writing nothing."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfk8s.steps import parameters as pipeline_params
from tfk8s.submit.errors import ParameterError
from tfk8s.submit.pipeline_inputs import parse_param_items, resolve_params


def moved_to_kubernetes(given: Mapping[str, Any]) -> str | None:
    """The fix for a flat ``--param`` that became a key of the ``kubernetes`` parameter (``cpu=2`` ->
    ``kubernetes.cpu=2``), or None."""
    keys = set(pipeline_params.KubernetesParams.names()) - set(pipeline_params.OWN_PARAMETERS)
    moved = sorted(set(given) & keys)
    if not moved:
        return None
    k = moved[0]
    return (f"{', '.join(moved)} {'is a key' if len(moved) == 1 else 'are keys'} of the kubernetes parameter now: "
            f"--param kubernetes.{k}={given[k]} (or --param kubernetes='{{\"{k}\": ...}}')")


def missing_program(key: str, value: str, cwd: str | os.PathLike | None = None) -> str | None:
    """The problem with the ``command``-like parameter ``key`` of a ``--local`` run whose program is not on this
    machine: ``python <script>`` whose script does not exist (relative to ``cwd``, default the working
    directory, where the local replicas run), or a first word that is neither on the PATH nor a file; None when
    it is there, when a placeholder stands for it, or for ``python -m``/``-c``.
    """
    from tfk8s.core.contract import parse_command

    try:
        argv = parse_command(value)
    except ValueError:
        return None  # pipeline_params.check says what is wrong with it
    if not argv or "{" in argv[0]:
        return None
    base = Path(cwd or os.getcwd())
    if Path(argv[0]).name.startswith("python"):
        script = next((a for a in argv[1:] if not a.startswith("-")), None)
        if script is None or any(a in ("-m", "-c") for a in argv[1:argv.index(script)]) or "{" in script:
            return None
        if not (base / script).is_file():
            return (f"{key}: {script} does not exist (in {base}, where the local replicas run): give the path of "
                    f"your program, e.g. --param {key}='python path/to/train.py'")
        return None
    if shutil.which(argv[0], path=os.environ.get("PATH")) is None and not (base / argv[0]).is_file():
        return (f"{key}: {argv[0]} is neither on the PATH nor a file in {base}: name an existing program, e.g. "
                f"--param {key}='python train.py'")
    return None


def check_run_params(items: list[str], defaults: Mapping[str, Any], package: str | os.PathLike, *, local: bool,
                     volume: str | os.PathLike | None = None) -> dict[str, Any]:
    """Check ``--param`` items before anything starts; returns them parsed to their declared types.

    Args:
        items: the ``key=value`` items (:func:`tfk8s.submit.pipeline_inputs.parse_param_items`).
        defaults: the pipeline function's defaults (the values a run takes for what is not given).
        package: the compiled pipeline package whose inputs are the known parameters.
        local: a ``--local`` run: the data set and a user's ``data_dir`` are on this machine (a relative
            ``data_dir`` is under ``volume``) and ``backend``/``volume_root`` are set by ``--local`` itself.

    Raises:
        ValueError: every problem, the message naming the parameter and the fix (a
            :class:`~tfk8s.submit.errors.ParameterError` for an unknown name or a bad type).
    """
    from tfk8s.core.data_format import inspect_data_dir, resolve_data_dir
    from tfk8s.steps.prepare_dataset import check_dataset, default_tfds_data_dir

    items_given = parse_param_items(items)
    hint = moved_to_kubernetes(items_given)
    if hint:  # a flat parameter before the Kubernetes settings were grouped
        raise ParameterError(hint)
    given = resolve_params(package, items_given)
    if local and {"backend", "volume_root"} & set(given):
        raise ValueError("--local always runs the replicas as local processes on the folder given by --volume: "
                         "drop --param backend / volume_root")
    merged = {**defaults, **given, **({"backend": "local", "volume_root": "."} if local else {})}
    pipeline_params.check(merged)
    if local:  # the replicas (and eval_command) run here: a program that is not there fails now, not in a step
        found = [p for key in ("command", "eval_command") if (p := missing_program(key, merged.get(key) or ""))]
        if found:
            raise ValueError("invalid pipeline parameters:\n  - " + "\n  - ".join(found))
    if merged.get("data_uri"):  # a bucket: its URI was checked above; the prepare step lists it (dataset_name unused)
        return given
    if merged.get("data_dir"):  # the user's own data: checked where it is, nothing is prepared
        if local:
            inspect_data_dir(resolve_data_dir(merged["data_dir"], str(Path(volume or ".").resolve())))
        return given
    data_dir = merged.get("tfds_data_dir") or (default_tfds_data_dir() if local else "")
    # a bad dataset_name fails here, not in the prepare step of a started run
    check_dataset(merged["dataset_name"], data_dir or None, bool(merged.get("tfds_download")), local=local)
    return given
