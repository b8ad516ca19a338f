"""The pipeline's parameters, checked together before anything runs.

``python pipelines/train.py --local/--run/--schedule`` checks them before starting (seconds, nothing written);
the launch step checks them again before creating any replica (a run started from the KFP UI).
Every message names the pipeline parameter (as in ``--param key=value``) and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfk8s import DEFAULT_IMAGE
from tfk8s.cluster import ClusterConfigError, ReplicaCounts
from tfk8s.launcher import SUCCESS_POLICIES
from tfk8s.layout import DEFAULT_ROOT, RunLayout

BACKENDS = ("local", "kubernetes")


def problems(params: Mapping[str, Any]) -> list[str]:
    """Everything wrong with ``params`` (pipeline parameter names; a missing key is not checked).

    Returns:
        One sentence per problem, empty when all is well.
    """
    out: list[str] = []
    get = params.get
    counts = None
    if all(k in params for k in ("chief", "workers", "ps", "evaluator")):
        try:
            counts = ReplicaCounts(chief=get("chief"), worker=get("workers"), ps=get("ps"),
                                   evaluator=get("evaluator"))
        except ClusterConfigError as e:
            out.append(str(e).replace("worker >= 1", "workers >= 1").replace("use more workers", "raise workers"))
    for key, minimum in (("epochs", 1), ("batch_size", 1), ("max_examples", 0), ("num_shards", 0),
                         ("timeout_s", 0), ("progress_timeout_s", 0), ("max_restarts", 0), ("schedule_timeout_s", 1), ("gpus", 0)):
        if key in params and get(key) < minimum:
            out.append(f"{key} must be >= {minimum}, got {get(key)}")
    if "learning_rate" in params and not get("learning_rate") > 0:
        out.append(f"learning_rate must be > 0, got {get('learning_rate')}")
    if "min_accuracy" in params and not 0 <= get("min_accuracy") <= 1:
        out.append(f"min_accuracy must be in [0, 1], got {get('min_accuracy')}")
    if counts is not None:
        readers = counts.num_trainers
        if not counts.ps and get("batch_size", 1) >= 1 and get("batch_size", readers) % readers:
            b = get("batch_size")
            out.append(f"batch_size {b} is the global batch, split evenly over the {readers} chief/worker "
                       f"replicas: make it a multiple of {readers}, e.g. {b - b % readers or readers}")
        if get("num_shards", 0) and get("num_shards") < readers:
            out.append(f"num_shards {get('num_shards')} < {readers} chief/worker replicas: each reads its own "
                       f"shard files; use 0 (4 per replica) or at least {readers}")
    if "success_policy" in params and get("success_policy") not in SUCCESS_POLICIES:
        out.append(f"success_policy must be '' (chief, or worker 0) or 'AllWorkers', got {get('success_policy')!r}")
    if "backend" in params and get("backend") not in BACKENDS:
        out.append(f"backend must be one of {BACKENDS}, got {get('backend')!r}")
    if params.get("model_name"):  # empty: derived from the data set
        try:
            RunLayout(DEFAULT_ROOT, "check", get("model_name"))
        except ValueError as e:
            out.append(str(e))
    out += _command_problems(params)
    if "gate_metric" in params and not str(get("gate_metric")).strip():
        out.append("gate_metric is empty: name the metric the quality gate checks, e.g. accuracy")
    if get("backend") == "kubernetes":
        if "volume_root" in params and get("volume_root") != DEFAULT_ROOT:
            out.append(f"volume_root must be {DEFAULT_ROOT} on Kubernetes (where every step and replica mounts the "
                       f"PVC), got {get('volume_root')!r}; it is for --local runs")
        if "pvc_name" in params and not get("pvc_name"):
            out.append("pvc_name is empty: name the PersistentVolumeClaim for data, checkpoints and models "
                       "(without it the model would be written to a pod's ephemeral storage)")
        out += _kubernetes_problems(params)
    elif params.get("kubernetes"):  # not used by this backend, but a typo or a bad quantity is said now, not later
        out += _kubernetes_problems({"kubernetes": params["kubernetes"]})
    return out


def _kubernetes_problems(params: Mapping[str, Any]) -> list[str]:
    """What :meth:`KubernetesSettings.from_params` refuses in the ``kubernetes`` dict and the Kubernetes
    parameters of their own (namespace, image, pvc_name, max_restarts), checked with the given ones only."""
    from tfk8s.kube.settings import KubernetesParams, KubernetesSettings
    from tfk8s.specs import kube_dict

    try:
        given = kube_dict(params.get("kubernetes"))
        taken = sorted(set(given) & set(KubernetesParams.SHARED))
        if taken:
            return [(f"kubernetes must not set {taken}: they are pipeline parameters of their own "
                     f"(--param {taken[0]}=...)")]
        given.update({k: params[k] for k in KubernetesParams.SHARED if k in params})
        if not given:
            return []
        KubernetesSettings.from_params(**{"image": DEFAULT_IMAGE, **given})
    except ValueError as e:
        return [str(e)]
    return []


def _command_problems(params: Mapping[str, Any]) -> list[str]:
    from tfk8s.contract import check_command, parse_command

    out = []
    for key in ("command", "eval_command"):
        if params.get(key):
            try:
                check_command(parse_command(params[key]))
            except ValueError as e:
                out.append(f"{key}: {e}")
    return out


def check(params: Mapping[str, Any]) -> None:
    """Raise if :func:`problems` finds any.

    Raises:
        ValueError: listing every problem, one per line.
    """
    found = problems(params)
    if found:
        raise ValueError("invalid pipeline parameters:\n  - " + "\n  - ".join(found))
