"""A training program's outputs: its model (:func:`save`, every MWMS worker), its metrics (:func:`report`, the
coordinator's metrics file) and its end (:func:`finish`, without the interpreter's teardown)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from typing import Any, NoReturn

from tfk8s.core import contract
from tfk8s.runtime.replica import context, diverged


def finish(code: int = 0) -> NoReturn:
    """End this process at once with exit status ``code``, after flushing stdout and stderr (``os._exit``).

    Call it last, after :func:`save` and :func:`report`: it skips the interpreter's and TensorFlow's teardown
    (about 1 s on 2 cores, plus the iterator wait :func:`distribute` avoids), so nothing runs after it, not even
    ``atexit`` handlers; files the program wrote and closed are complete.
    """
    import logging
    import sys

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or a broken pipe: nothing more can be said there
            pass
    os._exit(code)


def save(model, model_dir: str | None = None, **kwargs) -> str:
    """Save ``model`` as a SavedModel in this replica's ``TFK8S_MODEL_DIR`` (or ``model_dir``); returns the path.

    Call it on every replica that trains: under MultiWorkerMirroredStrategy saving runs collective ops, so a
    coordinator saving alone would block (tensorflow#38635). A non-coordinator's copy goes to its own scratch
    folder and is removed at once. A tf-keras model is saved with ``model.save(path, save_format="tf")``,
    anything else with ``tf.saved_model.save(model, path, **kwargs)`` (e.g. ``signatures=``).
    """
    import tensorflow as tf

    ctx = context()
    path = model_dir or ctx.model_dir
    if hasattr(model, "save") and hasattr(model, "fit"):
        model.save(path, save_format="tf", **kwargs)
    else:
        tf.saved_model.save(model, path, **kwargs)
    if ctx.is_coordinator:
        print(f"saved the model to {path}", flush=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
    return path


def _json_value(key: str, value):
    """``value`` as JSON data: numpy/tensor values as Python numbers and lists (non-finite floats are kept:
    :func:`tfk8s.core.contract.write_metrics` writes them as the strings ``"NaN"``/``"Infinity"``)."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        value = value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _json_value(f"{key}.{k}", v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(key, v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"metric {key!r} is a {type(value).__name__}: report numbers, strings, booleans or lists")


def report(metrics: Mapping[str, Any]) -> dict | None:
    """Write ``metrics`` to ``TFK8S_METRICS_FILE`` on the coordinator and print them on one line; returns
    the metrics written (None on any other replica, which writes nothing).

    The file is one JSON object, written atomically by :func:`tfk8s.core.contract.write_metrics`, always valid
    JSON: NaN/inf become the strings ``"NaN"``/``"Infinity"``/``"-Infinity"`` (the launch step leaves them out
    of the training Metrics and says so in words); numpy and tensor values become numbers. ``diverged``
    (:func:`diverged`) is added unless given. The launch step turns the finite numbers into the run's
    training Metrics and puts everything in ``training_summary.json``.

    Raises:
        TypeError: a value that is not a number, string, boolean, None, list or dict (names the key).
    """
    ctx = context()
    data = {str(k): _json_value(str(k), v) for k, v in metrics.items()}
    data.setdefault("diverged", diverged())
    if not ctx.is_coordinator:
        return None
    print(f"metrics: {json.dumps(data, sort_keys=True)}", flush=True)
    if ctx.metrics_file:
        contract.write_metrics(ctx.metrics_file, data)
    return data
