"""The tfk8s training pipeline: prepare dataset -> launch training -> export model -> evaluate.

    python pipelines/train.py --compile [--output compiled/train.yaml]   # pipeline IR YAML for KFP
    python pipelines/train.py --compile --format argo                     # compiled/train.argo.yaml
    python pipelines/train.py --compile --format argo --schedule '0 2 * * *'   # compiled/train.cron.yaml
    python pipelines/train.py --local [--param key=value ...]             # run every step on this machine
    python pipelines/train.py --run --host URL [--param key=value ...]    # one run on a KFP cluster
    python pipelines/train.py --schedule '0 0 2 * * *' --host URL         # nightly recurring run

In a cluster, every step mounts the same PVC at ``/mnt/tfk8s`` (the ``volume_root``), and the launcher mounts
it into each training replica: data shards, checkpoints, TensorBoard logs and exports live under that one root
(see :mod:`tfk8s.core.layout`). ``--local`` runs the same pipeline through ``kfp.local`` with a local folder
standing for the volume and the replicas as local processes.
"""


import argparse
import os
import re
import sys
from pathlib import Path
from typing import NamedTuple

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfk8s.localrun import step_server  # the standard library only

# `python pipelines/train.py --local`: the steps' pre-warmed interpreter starts importing TensorFlow now, before
# this file imports KFP (main() takes it over, or stops it when it is not needed after all)
_EARLY_SERVER = (step_server.StepServer() if __name__ == "__main__" and step_server.enabled()
                 and "--local" in sys.argv and "--verbose" not in sys.argv else None)

import inspect

from kfp import compiler, dsl
from kfp import kubernetes as kfp_kubernetes
from kfp.dsl import HTML, ClassificationMetrics, Dataset, Markdown, Metrics, Model

import components
from components.ensure_volume import ensure_volume
from components.evaluate_model import evaluate_model
from components.export_model import export_model
from components.launch_training import launch_training
from components.prepare_dataset import prepare_dataset
from components.push_model import push_model, reject_model
from tfk8s.core.layout import DEFAULT_ROOT
from tfk8s.localrun import runner
from tfk8s.localrun.outcome import print_outcome
from tfk8s.steps import step_pods
from tfk8s.steps.parameters import S3_SECRET_KEYS, document
from tfk8s.submit.checks import check_run_params
from tfk8s.submit.cli import add_arguments as add_cluster_arguments
from tfk8s.submit.cli import check_mode as check_cluster_mode
from tfk8s.submit.cli import handle as handle_cluster

PIPELINE_NAME = "tfk8s-train"
VOLUME_MOUNT_PATH = DEFAULT_ROOT  # where every step and every replica mounts the PVC
REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "compiled" / "train.yaml"
STEP_PODS = step_pods.step_pods()
"""Each step's requests, limits, annotations and labels, compiled in (tfk8s.steps.step_pods: compile-time
settings; ``--steps JSON`` changes them for --compile, --run and --schedule)."""


class Outputs(NamedTuple):
    """The pipeline's outputs (shown on the run's page, read back by ``--local``)."""
    dataset: Dataset
    model: Model
    exported_model: Model
    metrics: Metrics
    confusion_matrix: ClassificationMetrics
    summary: Markdown
    report: HTML
    blessed: bool


PIPELINE_DESCRIPTION = "Distributed TensorFlow training on Kubernetes, from data set to a versioned, evaluated SavedModel."


@dsl.pipeline(name=PIPELINE_NAME, description=PIPELINE_DESCRIPTION)
@document  # the docstring's Args, from the parameter table (KFP reads them into each input's description)
def train_pipeline(
    dataset_name: str = "mnist",
    data_dir: str = "",
    tfds_data_dir: str = "",
    tfds_download: bool = True,
    num_shards: int = 0,
    max_examples: int = 0,
    reuse_data: bool = True,
    data_uri: str = "",
    s3_endpoint: str = "",
    s3_secret: str = "tfk8s-s3",
    command: str = "",
    eval_command: str = "",
    image: str = "ghcr.io/tfk8s/tfk8s:0.1.0",
    chief: int = 0,
    workers: int = 2,
    ps: int = 0,
    evaluator: int = 0,
    epochs: int = 2,
    batch_size: int = 512,
    learning_rate: float = 0.006,
    success_policy: str = "",
    timeout_s: int = 86400,
    progress_timeout_s: int = 600,
    max_restarts: int = 3,
    max_preemptions: int = 20,
    stop_grace_s: int = 10,
    restart_exit_code: int = 42,
    startup_timeout_s: int = 300,
    evaluator_grace_s: int = 60,
    job_name_prefix: str = "tfk8s",
    model_name: str = "",
    gate_metric: str = "accuracy",
    min_accuracy: float = 0.98,
    max_accuracy_drop: float = -1.0,
    model_uri: str = "",
    kserve: str = "",
    fail_on_unblessed: bool = False,
    backend: str = "kubernetes",
    volume_root: str = VOLUME_MOUNT_PATH,
    pvc_name: str = "tfk8s-data",
    create_pvc: bool = False,
    pvc_size: str = "20Gi",
    pvc_storage_class: str = "",
    namespace: str = "",
    kubernetes: dict = {},  # noqa: B006 - KFP reads the default; it is never mutated
) -> Outputs:
    """Train with distributed TensorFlow (the built-in CNN or your own program), export, evaluate and push.

    The parameters' list (Args) is generated from tfk8s.steps.parameters.PARAMETERS by @document, the one table
    of their types, defaults, help and checks; tests/steps/test_parameters.py keeps these literal defaults equal to it.
    """
    run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER

    # Before anything mounts the volume: it exists (or is created when asked), else the run fails at once.
    volume = ensure_volume(
        backend=backend, volume_root=volume_root, pvc_name=pvc_name, namespace=namespace, create_pvc=create_pvc,
        pvc_size=pvc_size, pvc_storage_class=pvc_storage_class,
    ).set_display_name("ensure volume")
    volume.set_caching_options(False)

    prepare = prepare_dataset(
        dataset_name=dataset_name, tfds_data_dir=tfds_data_dir, volume_root=volume_root, run_id=run_id,
        num_shards=num_shards, num_workers=workers, chief=chief, max_examples=max_examples,
        download=tfds_download, data_dir=data_dir, reuse_data=reuse_data, data_uri=data_uri,
        s3_endpoint=s3_endpoint,
    ).set_display_name("prepare dataset").after(volume)

    launch = launch_training(
        dataset=prepare.outputs["dataset"], volume_root=volume_root, run_id=run_id, backend=backend, chief=chief,
        workers=workers, ps=ps, evaluator=evaluator, command=command, epochs=epochs, batch_size=batch_size,
        learning_rate=learning_rate, success_policy=success_policy, timeout_s=timeout_s,
        progress_timeout_s=progress_timeout_s, job_name_prefix=job_name_prefix, max_restarts=max_restarts,
        max_preemptions=max_preemptions, stop_grace_s=stop_grace_s, restart_exit_code=restart_exit_code, startup_timeout_s=startup_timeout_s,
        evaluator_grace_s=evaluator_grace_s, namespace=namespace, image=image, pvc_name=pvc_name,
        kubernetes=kubernetes,
    ).set_display_name("launch training")
    # The launcher's own pod, for the replicas' ownerReferences (deleting the run deletes every replica).
    kfp_kubernetes.use_field_path_as_env(launch, env_name="TFK8S_LAUNCHER_POD_NAME", field_path="metadata.name")
    kfp_kubernetes.use_field_path_as_env(launch, env_name="TFK8S_LAUNCHER_POD_UID", field_path="metadata.uid")

    export = export_model(
        model=launch.outputs["model"], volume_root=volume_root, model_name=model_name,
    ).set_display_name("export model")

    evaluate = evaluate_model(
        exported_model=export.outputs["exported_model"], dataset=prepare.outputs["dataset"],
        model=launch.outputs["model"], min_accuracy=min_accuracy, max_accuracy_drop=max_accuracy_drop,
        gate_metric=gate_metric, eval_command=eval_command, volume_root=volume_root,
    ).set_display_name("evaluate")

    # Only a blessed model becomes the served version (TFX Evaluator -> Pusher).
    with dsl.If(evaluate.outputs["blessed"] == True, name="blessed"):
        push = push_model(
            exported_model=export.outputs["exported_model"], volume_root=volume_root, model_uri=model_uri,
            s3_endpoint=s3_endpoint, kserve=kserve, pvc_name=pvc_name, namespace=namespace,
        ).set_display_name("push model")
    with dsl.Else(name="not-blessed"), dsl.If(fail_on_unblessed == True, name="fail-on-unblessed"):
        reject = reject_model(reasons=evaluate.outputs["reasons"]).set_display_name("reject model")

    # The bucket's credentials (data_uri, model_uri): s3_secret's keys as env vars of the steps that use them,
    # optional (no Secret, no key: nothing set; a public bucket or an IAM role still works).
    for task in (prepare, push):
        kfp_kubernetes.use_secret_as_env(task, secret_name=s3_secret,
                                         secret_key_to_env={k: k for k in S3_SECRET_KEYS}, optional=True)

    # Every step runs the `image` parameter, not only the replicas: KFP (2.4+) resolves it when the run starts.
    for task in (volume, prepare, launch, export, evaluate, push, reject):
        task.set_container_image(image)
    # Requests and limits on every step (a quota'd namespace admits no pod without them; without them a step is
    # BestEffort), and its pod's annotations and labels: compile-time settings (tfk8s.steps.step_pods).
    for task, step in ((volume, "ensure_volume"), (prepare, "prepare_dataset"), (launch, "launch_training"),
                       (export, "export_model"), (evaluate, "evaluate_model"), (push, "push_model"),
                       (reject, "reject_model")):
        step_pods.apply(task, step, STEP_PODS, kfp_kubernetes)
    for task in (prepare, launch, export, evaluate, push, reject):
        kfp_kubernetes.mount_pvc(task, pvc_name=pvc_name, mount_path=VOLUME_MOUNT_PATH)
        # Nothing here may come from the cache: the data, checkpoints and models live on the volume, which
        # KFP's cache does not see; a cached launch would train nothing, a cached evaluation check nothing.
        task.set_caching_options(False)

    return Outputs(
        dataset=prepare.outputs["dataset"], model=launch.outputs["model"],
        exported_model=export.outputs["exported_model"], metrics=evaluate.outputs["metrics"],
        confusion_matrix=evaluate.outputs["classification"], summary=evaluate.outputs["summary"],
        report=evaluate.outputs["report"],
        blessed=evaluate.outputs["blessed"],
    )


def compile_pipeline(output: str | os.PathLike = DEFAULT_OUTPUT) -> Path:
    """Compile :func:`train_pipeline` to KFP pipeline IR YAML at ``output``; returns the path."""
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    pipeline = train_pipeline
    if STEP_PODS != step_pods.STEP_PODS:  # --steps: KFP builds a pipeline's graph as it is decorated, so again
        pipeline = dsl.pipeline(name=PIPELINE_NAME, description=PIPELINE_DESCRIPTION)(train_pipeline.pipeline_func)
    compiler.Compiler().compile(pipeline, str(out))
    return out


def run_local(volume: str | os.PathLike, params: dict, verbose: bool = True, step_server=None) -> dict:
    """Run :func:`train_pipeline` on this machine (:func:`tfk8s.localrun.runner.run_local`; ``backend`` is forced
    to ``local``, ``volume`` stands for the PVC); returns its result dict."""
    return runner.run_local(train_pipeline, volume, params, verbose=verbose, step_server=step_server)


def pipeline_defaults() -> dict:
    """The pipeline parameters' defaults, as :func:`train_pipeline` declares them."""
    return {k: v.default for k, v in inspect.signature(train_pipeline.pipeline_func).parameters.items()}


def _check_params(items: list[str], *, local: bool, volume: str | os.PathLike | None = None) -> dict:
    """:func:`tfk8s.submit.checks.check_run_params` against the compiled package; exits with one ``tfk8s:`` line
    (every problem listed) instead of a traceback."""
    try:
        return check_run_params(items, pipeline_defaults(), DEFAULT_OUTPUT, local=local, volume=volume)
    except ValueError as e:
        raise SystemExit(f"tfk8s: {e}") from None


def main(argv: list[str] | None = None) -> None:
    """CLI: ``python pipelines/train.py --help`` (--compile, --local, --run, --schedule)."""
    p = argparse.ArgumentParser(prog="python pipelines/train.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--compile", action="store_true", help="compile the pipeline to IR YAML")
    mode.add_argument("--local", action="store_true", help="run the whole pipeline on this machine")
    p.add_argument("--output", default=str(DEFAULT_OUTPUT),
                   help="--compile: where to write (default: %(default)s; with --format argo: "
                   "compiled/train.argo.yaml; with --format argo --schedule CRON: compiled/train.cron.yaml)")
    p.add_argument("--volume", default=str(REPO / "volume"),
                   help="--local: folder standing for the shared volume (default: %(default)s)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="pipeline parameter, repeatable (e.g. --param epochs=2)")
    p.add_argument("--steps", default="", metavar="JSON",
                   help="--compile/--run/--schedule: the steps' own pods, compiled in (requests, limits, "
                        "annotations, labels) by step name or \"*\" for all, over the defaults of "
                        "tfk8s/steps/step_pods.py, e.g. '{\"prepare_dataset\": {\"memory_limit\": \"8Gi\"}}' "
                        "(docs/kubernetes.md, Production clusters)")
    p.add_argument("--verbose", action="store_true",
                   help="--local: print every step's whole output (default: one line per step, the progress "
                        "and the result; the whole output is in each step's output.log)")
    add_cluster_arguments(p, mode)  # --run, --schedule CRON, --format, --host, --experiment, --upload, ...
    # --local: the steps' pre-warmed interpreter (started as this file was loaded, or now) imports TensorFlow
    # while the checks run
    global _EARLY_SERVER
    early, _EARLY_SERVER = (_EARLY_SERVER if argv is None else None), None
    server = None
    try:
        a = p.parse_args(argv)
        check_cluster_mode(p, a)  # one of --compile/--local/--run/--schedule (--compile --format argo --schedule)
        server = (early or runner.start_step_server()) if a.local and not a.verbose else None
        _main(a, server)
    except KeyboardInterrupt:  # Ctrl-C before or after the steps (during them: tfk8s.localrun.signals)
        print("tfk8s: interrupted (SIGINT) before any step ran; nothing was started", file=sys.stderr, flush=True)
        raise SystemExit(128 + 2) from None
    finally:
        for started in (early, server):
            if started is not None:
                started.close()


def _main(a: argparse.Namespace, server) -> None:
    if a.compile and a.param:
        raise SystemExit("tfk8s: --param applies to --local, --run and --schedule; a compiled pipeline takes its "
                         "parameters when a run starts")
    global STEP_PODS
    if a.steps:
        if a.local:
            raise SystemExit("tfk8s: --steps sets the steps' pods in a cluster (--compile, --run, --schedule); "
                             "--local runs no pods")
        if getattr(a, "package", None):
            raise SystemExit("tfk8s: --steps is compiled in: it cannot change a --package compiled before; drop "
                             "--package (the pipeline is compiled with --steps) or compile that package with it")
        try:
            STEP_PODS = step_pods.step_pods(a.steps)
        except ValueError as e:
            raise SystemExit(f"tfk8s: {e}") from None
    params = {}
    # --schedule '' is a bad cron, not "no schedule"; --compile --schedule is the Argo CronWorkflow export
    if a.run or (a.schedule is not None and not a.compile) or a.local:
        params = _check_params(a.param, local=a.local, volume=a.volume)
    if handle_cluster(a, compile_pipeline, components):  # --run / --schedule / --compile --format argo
        return
    if a.compile:
        print(f"compiled {PIPELINE_NAME} to {compile_pipeline(a.output)}")
        return
    runner.check_volume(a.volume)
    if not a.verbose:
        print(f"tfk8s: running {PIPELINE_NAME} locally on {Path(a.volume).resolve()} (each step's whole output "
              f"goes to its output.log; --verbose prints it)", flush=True)
    try:
        r = run_local(a.volume, params, verbose=a.verbose, step_server=server)
    except RuntimeError as e:  # kfp.local: a step failed; its log (above) says why
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).rstrip(".")  # kfp.local colours its message
        raise SystemExit(f"tfk8s: {plain}. The failing step's output above gives the reason.") from None
    print_outcome(r)


if __name__ == "__main__":
    main()
