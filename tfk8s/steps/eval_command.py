"""The user's evaluation program (pipeline parameter ``eval_command``), run under the training-program
contract when the built-in classification evaluation does not fit the model.

It runs once, as one process of the evaluate step (no TF_CONFIG), with the contract's variables of worker 0
(:func:`tfk8s.core.contract.replica_env`) except: ``TFK8S_MODEL_DIR`` is the exported version to evaluate
(read-only), ``TFK8S_METRICS_FILE`` is ``<train dir>/metrics/evaluation.json`` (where it reports its metrics:
``tfk8s.runtime.report`` or any JSON object) and ``TFK8S_PROGRESS_FILE`` is
``<train dir>/progress/evaluation.json``. Placeholders in the command are substituted from those values.
"""

from __future__ import annotations

import collections
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from tfk8s.core import contract
from tfk8s.core.cluster import Replica, ReplicaType
from tfk8s.core.layout import EVALUATION_NAME, TrainLayout

LAST_LINES = 20


def run_eval_command(command: str, *, model_dir: str, data_dir: str, train_dir: str | None = None,
                     metrics_file: str | None = None, job_name: str = "tfk8s-eval",
                     log_sink: Callable[[str], None] | None = None,
                     timeout_s: float = 3600) -> tuple[dict[str, float], str | None]:
    """Run ``eval_command`` on the exported model and read the metrics it reported.

    Args:
        command: a JSON list (argv) or shell-style string (:func:`tfk8s.core.contract.parse_command`); a leading
            ``python``/``python3`` is this interpreter.
        model_dir: the exported version (``TFK8S_MODEL_DIR``). data_dir: ``TFK8S_DATA_DIR``.
        train_dir: the run's train folder (checkpoint/TensorBoard dirs); default: the metrics file's grandparent.
        metrics_file: default ``<train dir>/metrics/evaluation.json``.
        timeout_s: the program is killed after this many seconds.

    Returns:
        ``(metrics, failure)``: the finite numbers it reported and None; or ``({}, "<why>")`` when it could not
        be started, exited non-zero (with its last lines), timed out, or reported nothing.
    """
    sink = log_sink or (lambda line: print(line, flush=True))
    if train_dir is None:
        train_dir = str(Path(metrics_file).parent.parent) if metrics_file else str(Path(model_dir).parent)
    train = Path(train_dir)
    layout = TrainLayout(train)
    metrics = Path(metrics_file) if metrics_file else layout.metrics_file(EVALUATION_NAME)
    worker = Replica(ReplicaType.WORKER, 0)
    env = contract.replica_env(job_name, worker, worker, train, data_dir)
    env.update({contract.ENV_MODEL_DIR: str(model_dir), contract.ENV_METRICS_FILE: str(metrics),
                contract.ENV_PROGRESS_FILE: str(layout.progress_file(EVALUATION_NAME))})
    env.update(contract.platform_aliases(env))  # AIP_MODEL_DIR, SM_MODEL_DIR: the exported version too
    try:
        argv = contract.local_python(contract.substitute(contract.parse_command(command), env))
    except ValueError as e:
        return {}, f"eval_command is not valid: {e}"
    if not argv:
        return {}, "eval_command is empty"
    metrics.parent.mkdir(parents=True, exist_ok=True)
    metrics.unlink(missing_ok=True)  # a stale file from an earlier attempt must not count
    full_env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    full_env.update({"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", **env})
    tail: collections.deque[str] = collections.deque(maxlen=LAST_LINES)
    sink(f"running eval_command: {' '.join(argv)}")
    try:
        proc = subprocess.Popen(list(argv), env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, bufsize=1)
    except OSError as e:
        return {}, (f"eval_command could not start {argv[0]!r} ({e.strerror or e}): give an existing program, "
                    f"e.g. python eval.py, installed in the image")
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            line = line.rstrip("\n")
            tail.append(line)
            sink(f"[{EVALUATION_NAME}] {line}")
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return {}, f"eval_command did not finish within {timeout_s:.0f}s"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if code != 0:
        lines = "\n".join(f"  {t}" for t in tail)
        return {}, f"eval_command exited with code {code}; its last lines:\n{lines}"
    try:
        _, numbers, notes = contract.read_metrics(metrics)
    except ValueError as e:
        return {}, str(e)
    for note in notes:
        sink(f"note: eval_command: {note}")
    if not numbers:
        return {}, (f"eval_command exited 0 but reported no finite metric in TFK8S_METRICS_FILE ({metrics}): "
                    f"write a JSON object such as {{\"accuracy\": 0.97}} there (tfk8s.runtime.report does it)")
    return numbers, None
