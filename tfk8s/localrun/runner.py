"""``pipelines/train.py --local``: the whole pipeline on this machine through ``kfp.local``, each step a local
process (the launch step's replicas too, on 127.0.0.1), a local folder standing for the shared volume.

Unless ``--verbose``, the steps run in children of a pre-warmed interpreter (:mod:`tfk8s.localrun.step_server`)
and each step's output goes to its ``output.log`` with one line per step on the terminal
(:mod:`tfk8s.localrun.step_output`): ``kfp.local``'s own subprocess runner is swapped for it while the run lasts
(:func:`quiet_steps`; kfp.local offers no hook, so its ``run_local_subprocess`` is replaced and restored). SIGTERM
and SIGINT (Ctrl-C) reach every step (:mod:`tfk8s.localrun.signals`): the launch step stops its replicas and
records the job, the run ends with one line and exit status 143 or 130.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from tfk8s.core.layout import TRAIN_DIR, TrainLayout, VolumeLayout
from tfk8s.core.policy import STOP_GRACE_S
from tfk8s.core.volume import VolumeWriteError, volume_writes
from tfk8s.localrun import step_server
from tfk8s.localrun.signals import stops_reach_children

STOP_MARGIN_S = 30.0  # a stopped run waits for its steps the job's stop_grace_s and this long

# the --local steps whose components import no TensorFlow (kfp.local's task names): they do not wait for the
# step server's imports (tfk8s.localrun.step_output.QuietSteps)
STEPS_WITHOUT_TENSORFLOW = frozenset({"ensure-volume", "launch-training", "push-model", "reject-model"})
# tried first without TensorFlow (a data set already in the volume's store needs none), again with it on a miss
STEPS_REUSE_FIRST = frozenset({"prepare-dataset"})


def _print(line: str) -> None:
    print(line, flush=True)


def start_step_server():
    """A :class:`tfk8s.localrun.step_server.StepServer` for the ``--local`` steps, started now (its imports overlap
    what comes before the first step; its own output, those imports' messages, is discarded). None when
    ``TFK8S_STEP_SERVER=0``."""
    return step_server.StepServer() if step_server.enabled() else None


@contextlib.contextmanager
def quiet_steps(volume: str | os.PathLike, server=None):
    """While inside, ``kfp.local`` runs each step through :class:`tfk8s.localrun.step_output.QuietSteps`: the step's
    output goes to ``<pipeline root>/<run>/<step>/output.log`` and the terminal gets one line per step, the
    training's progress and a failing step's last lines; kfp.local's own messages (each step's executor
    input, its outputs, separators) are dropped. The steps run in children of ``server``, a pre-warmed
    interpreter that has imported KFP and TensorFlow (:func:`start_step_server`; None: one is started here
    and stopped at the end)."""
    import logging

    from kfp.local import logging_utils, subprocess_task_handler

    from tfk8s.localrun.step_output import QuietSteps

    class _DropKfpLocal(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "kfp/local/" not in record.pathname.replace(os.sep, "/")

    own = server is None
    if own:
        server = start_step_server()
    steps = QuietSteps(volume, server=server, without_tensorflow=STEPS_WITHOUT_TENSORFLOW,
                       reuse_first=STEPS_REUSE_FIRST)
    drop, root = _DropKfpLocal(), logging.getLogger()
    saved = subprocess_task_handler.run_local_subprocess, logging_utils.print_horizontal_line
    root.addFilter(drop)
    subprocess_task_handler.run_local_subprocess = steps.run_step
    logging_utils.print_horizontal_line = lambda: None
    try:
        yield steps
    finally:
        subprocess_task_handler.run_local_subprocess, logging_utils.print_horizontal_line = saved
        root.removeFilter(drop)
        if own and server is not None:
            server.close()


def run_local(pipeline_func: Any, volume: str | os.PathLike, params: dict, verbose: bool = True,
              step_server=None) -> dict:
    """Run the whole pipeline on this machine with ``kfp.local`` (SubprocessRunner, this interpreter).

    Args:
        pipeline_func: the pipeline (``pipelines.train.train_pipeline``), called with ``params`` under kfp.local.
        volume: the local folder standing for the PVC (the pipeline root lives under it too).
        params: pipeline parameters overriding the defaults (``backend`` is forced to ``local``).
        verbose: print every step's whole output (kfp.local's way); False: :func:`quiet_steps`.
        step_server: for the quiet way, a started :func:`start_step_server` (None: started here).

    Returns:
        ``{"accuracy", "loss", "export_path", "run_dir", "metrics", "model_name", "version", "blessed",
        "summary", "report", "job", "volume", "pipeline_root", "wall_time_s"}`` (``job``: the training job's
        record, ``{}`` if none; accuracy and loss None when the model was not evaluated and its program reported
        none; ``metrics`` holds what the gate saw, ``not_evaluated`` why).
    """
    import warnings

    from kfp import local

    from tfk8s.steps.prepare_dataset import default_tfds_data_dir
    from tfk8s.tracking.records import read_record

    # kfp.local warns on every step that display names and the container image mean nothing locally.
    warnings.filterwarnings("ignore", module=r"kfp\.local\..*", category=UserWarning)
    warnings.filterwarnings("ignore", module=r"kfp\.local\..*", category=RuntimeWarning)
    volume = Path(volume).resolve()
    pipeline_root = VolumeLayout(volume).pipeline_root
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(pipeline_root),
               raise_on_error=True)
    args = {"tfds_data_dir": default_tfds_data_dir() or "", **params, "backend": "local",
            "volume_root": str(volume)}
    t0 = time.monotonic()
    grace = float(args.get("stop_grace_s", STOP_GRACE_S)) + STOP_MARGIN_S
    with contextlib.ExitStack() as stack:
        steps = None if verbose else stack.enter_context(quiet_steps(volume, step_server))
        # SIGTERM or Ctrl-C: every step told, the launch step stops its replicas and records the job; exit 143/130
        stack.enter_context(stops_reach_children(grace, steps.say if steps is not None else _print,
                                                 (lambda: steps.current) if steps is not None else None))
        task = pipeline_func(**args)
    out = task.outputs
    metrics, exported = out["metrics"].metadata, out["exported_model"].metadata
    # the run's folder: the launch step's train dir's parent (the data folder may be a user's or the store's,
    # elsewhere), else beside the run's data record
    summary_file = out["model"].metadata.get("training_summary")
    data = out["dataset"].metadata
    train = TrainLayout(Path(summary_file).parent if summary_file
                        else Path(data.get("data_record") or data["path"]).parent / TRAIN_DIR)
    run_dir = train.run_dir
    return {"accuracy": metrics.get("accuracy"), "loss": metrics.get("loss"), "export_path": exported["path"],
            "run_dir": str(run_dir), "metrics": dict(metrics), "model_name": exported.get("model_name"),
            "version": int(exported["version"]), "blessed": out["blessed"], "summary": out["summary"].path,
            "report": str(train.report), "job": read_record(train.record) or {},
            "volume": str(volume), "pipeline_root": str(pipeline_root), "wall_time_s": time.monotonic() - t0}


def check_volume(volume: str | os.PathLike) -> None:
    """The ``--local`` volume folder can be created and written (a file is created and removed in its pipeline
    root); exits with one line naming the path and the fix otherwise (:func:`tfk8s.core.volume.volume_writes`)."""
    root = VolumeLayout(Path(volume).resolve()).pipeline_root
    try:
        with volume_writes(root, "the local volume (--volume)"):
            root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=root):
                pass
    except VolumeWriteError as e:
        raise SystemExit(f"tfk8s: {e}") from None
