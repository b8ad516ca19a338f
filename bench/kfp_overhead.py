"""Benchmark 10, what Kubeflow Pipelines costs: the same small training locally, as the plain Argo Workflow and as
a KFP run, on the real one-node cluster of ``make test-kfp`` (issue 24, item 4).

    python bench/kfp_overhead.py [--reps 1]      # as root, after `make test-kfp` built everything

Brings up the real node (:mod:`tests.realnode.realnode`), Argo's controller on it
(:func:`tests.realnode.argo_fixtures.running_argo`) and a real KFP 2.17.0 backend
(:func:`tests.realnode.kfp_fixtures.running_kfp_backend`): the same code as the ``argo`` and ``kfp_backend``
fixtures. Then, per repetition and in alternating order, one small training (``SMALL`` of
tests/realnode/test_kfp.py: 1 worker, 1 epoch, 512 examples, batch 64, ``min_accuracy=0``, so every step runs):

- **local**: ``python pipelines/train.py --local`` on this machine (one volume folder for every repetition, as
  the clusters keep theirs: a later repetition reuses the prepared data on all three alike);
- **argo**: ``compiled/train.argo.yaml`` submitted with ``argo submit`` to the node's controller, in a namespace
  of its own (:func:`tests.realnode.argo_fixtures.prepare_namespace`);
- **kfp**: ``python pipelines/train.py --run --host URL --param ...`` (docs/kfp.md), waited for through
  ``GET /apis/v2beta1/runs/ID``.

Each is timed end to end, from the command's start to the final state seen (polled every 0.5 s). Then the
KFP run's own Argo Workflow (the API server's, label ``pipeline/runid``) and its pods' statuses, and the same of
the plain Argo run, are cut into what ran when (:func:`breakdown`: Argo's and Kubernetes' timestamps, whole
seconds): every second of the Workflow goes to the first of

1. ``step``: a step pod's ``main`` container running (on KFP: KFP's launcher around our step, in the same
   container);
2. ``launcher_copy``: a step pod's ``kfp-launcher`` init container (KFP copies its launcher into the pod);
3. ``driver``: a KFP driver pod (``system-container-driver``, ``system-dag-driver``) running;
4. ``pod_start``: any other second of a pod's life (scheduling, the sandbox, Argo's ``init``/``wait``);
5. ``gap``: no pod at all (the controller's turnaround between one pod's end and the next pod's creation: Argo's
   workflow queue is rate-limited, ``DEFAULT_REQUEUE_TIME`` 10 s by default), told apart by what starts next: a
   driver (``gaps_before_drivers``), a step's pod (``gaps_before_steps``) or nothing (``gaps_end``),

and, outside the Workflow, ``submit``: the command's start to the Workflow's ``startedAt`` (on KFP: ``train.py
--run`` compiling and sending the pipeline, the API server creating the Workflow) and ``report``: the rest of
end to end (the Workflow's end to the final state seen; on KFP the persistence agent reporting it to the API). Per step, the ``main`` container on KFP minus the same
step's on Argo is KFP's launcher (and KFP's Python executor) around our step; of it, the artifact upload and
ML Metadata publish after the step (``upload``) are read from the launcher's own log lines (kubelet timestamps).

Figures: ``kfp_vs_argo``, ``kfp_vs_local``, ``argo_vs_local`` (end to end, median of the repetitions), and
``kfp_extra_<part>`` = KFP's seconds of that part minus Argo's / (KFP end to end - Argo end to end): the share
of KFP's extra time each part explains (``drivers``, ``launcher_copy``, ``launcher_in_main``, ``step_other``,
``pod_start``, ``gaps_before_drivers``, ``gaps_before_steps``, ``gaps_end``, ``submit``, ``report``); ``kfp_drivers_summed`` (the driver pods' seconds summed, overlapping ones too, / the
extra) and ``kfp_upload`` (the upload and publish after each step, summed). A table of the parts is printed
on stderr.

Where the node, Argo or KFP cannot run here (not root, binaries, image or KFP source tree missing) and with
``--smoke`` it prints why and no figure.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, Figure, common_args, median, python_env, report, reps_of, usable_cores

NOTE = ("real one-node cluster (tests/realnode), Argo v3.7.3, KFP 2.17.0 backend; 1 worker, 1 epoch, 512 MNIST "
        "examples, batch 64")
STEPS = ("ensure-volume", "prepare-dataset", "launch-training", "export-model", "evaluate-model", "push-model",
         "reject-model")
PARTS = ("step", "launcher_copy", "driver", "pod_start", "gap")  # priority order of :func:`breakdown`
POLL_S = 0.5


def parse_time(stamp: str | None) -> float | None:
    """Seconds since the epoch of a Kubernetes/Argo RFC 3339 timestamp (``2026-12-04T20:00:01Z``, fractions
    allowed), or None for an empty one."""
    if not stamp:
        return None
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", stamp)
    if not m:
        raise ValueError(f"not an RFC 3339 timestamp: {stamp!r}")
    whole = datetime.datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(3) == "Z" else m.group(3)))
    return whole.timestamp() + float(m.group(2) or 0)  # kubelet log stamps have nanoseconds


def step_of(node_name: str) -> str | None:
    """The pipeline step a Workflow node belongs to, from its full name (``wf.launch-training``,
    ``wf.launch-training(0)``, KFP's ``wf.root.launch-training.executor`` or ``...launch-training-driver``);
    None for a node of no step (KFP's root and condition drivers)."""
    for part in reversed(node_name.split(".")):
        base = re.sub(r"\(\d+\)$", "", part).removesuffix("-driver")
        if base in STEPS:
            return base
    return next((s for s in STEPS if s in node_name), None)  # as tests/realnode/test_kfp.py's step_pods


@dataclass
class PodSpan:
    """One pod of a Workflow, its times in seconds since the epoch (None where its status has none).

    ``kind``: ``driver`` (KFP's driver pods) or ``step`` (a pipeline step's pod: ours on Argo, KFP's executor
    pod with its launcher); ``node``: the pod's interval as Argo's node records it (created -> done);
    ``main``: its ``main`` container running; ``launcher_copy``: its ``kfp-launcher`` init container running."""

    name: str
    kind: str
    step: str | None
    node: tuple[float, float]
    main: tuple[float, float] | None = None
    launcher_copy: tuple[float, float] | None = None
    pod: str = ""


def _ran(status: dict[str, Any] | None) -> tuple[float, float] | None:
    term = ((status or {}).get("state") or {}).get("terminated") or {}
    a, b = parse_time(term.get("startedAt")), parse_time(term.get("finishedAt"))
    return (a, b) if a is not None and b is not None else None


def pod_spans(workflow: dict[str, Any], pods: Iterable[dict[str, Any]]) -> list[PodSpan]:
    """The Workflow's pod nodes (``status.nodes`` of type ``Pod`` that started and finished) joined with their
    pods (the API's JSON, matched by the annotation ``workflows.argoproj.io/node-name``).

    Raises:
        ValueError: the Workflow has no status nodes (not started, or not a Workflow's JSON).
    """
    nodes = (workflow.get("status") or {}).get("nodes") or {}
    if not nodes:
        raise ValueError(f"workflow {workflow.get('metadata', {}).get('name')!r} has no status.nodes: not run yet?")
    by_node = {p["metadata"].get("annotations", {}).get("workflows.argoproj.io/node-name"): p for p in pods}
    spans = []
    for node in nodes.values():
        a, b = parse_time(node.get("startedAt")), parse_time(node.get("finishedAt"))
        if node.get("type") != "Pod" or a is None or b is None:
            continue
        kind = "driver" if "driver" in (node.get("templateName") or "") else "step"
        span = PodSpan(node.get("name", ""), kind, step_of(node.get("name", "")), (a, b))
        pod = by_node.get(node.get("name"))
        if pod is not None:
            st = pod.get("status") or {}
            span.pod = pod["metadata"]["name"]
            span.main = next((_ran(c) for c in st.get("containerStatuses") or [] if c.get("name") == "main"), None)
            span.launcher_copy = next((_ran(c) for c in st.get("initContainerStatuses") or []
                                       if c.get("name") == "kfp-launcher"), None)
        spans.append(span)
    return sorted(spans, key=lambda s: s.node)


def breakdown(workflow: dict[str, Any], spans: list[PodSpan]) -> dict[str, float]:
    """Every second of the Workflow (``status.startedAt`` -> ``finishedAt``) given to the first part of
    :data:`PARTS` active then (see the module docstring); returns the seconds per part (they sum to
    ``workflow``), the gaps by what starts after them (``gap_driver``, ``gap_step``, ``gap_end``: the next pod a
    driver, a step's pod, none) and ``drivers_summed``, ``drivers`` (count), ``pods`` (count),
    ``launcher_copy_summed``.

    Raises:
        ValueError: the Workflow has not finished (no ``finishedAt``).
    """
    st = workflow.get("status") or {}
    w0, w1 = parse_time(st.get("startedAt")), parse_time(st.get("finishedAt"))
    if w0 is None or w1 is None:
        raise ValueError(f"workflow {workflow.get('metadata', {}).get('name')!r} has not finished: "
                         f"startedAt {st.get('startedAt')!r}, finishedAt {st.get('finishedAt')!r}")
    active: dict[str, list[tuple[float, float]]] = {p: [] for p in PARTS}
    for s in spans:
        if s.kind == "driver":
            active["driver"].append(s.node)
            continue
        active["pod_start"].append(s.node)
        if s.main:
            active["step"].append(s.main)
        if s.launcher_copy:
            active["launcher_copy"].append(s.launcher_copy)
    cuts = sorted({w0, w1, *(t for ivs in active.values() for iv in ivs for t in iv if w0 < t < w1)})
    out = dict.fromkeys((*PARTS, "gap_driver", "gap_step", "gap_end"), 0.0)
    for a, b in itertools.pairwise(cuts):
        mid = (a + b) / 2
        part = next((p for p in PARTS[:-1] if any(x <= mid <= y for x, y in active[p])), "gap")
        out[part] += b - a
        if part == "gap":
            after = min((s for s in spans if s.node[0] >= b), key=lambda s: s.node[0], default=None)
            out[f"gap_{after.kind if after else 'end'}"] += b - a
    drivers = [s for s in spans if s.kind == "driver"]
    out["workflow"] = w1 - w0
    out["drivers"] = float(len(drivers))
    out["pods"] = float(len(spans))
    out["drivers_summed"] = sum(s.node[1] - s.node[0] for s in drivers)
    out["launcher_copy_summed"] = sum(s.launcher_copy[1] - s.launcher_copy[0] for s in spans if s.launcher_copy)
    return out


def main_seconds(spans: list[PodSpan]) -> dict[str, float]:
    """Per step, its ``main`` container's running seconds (the last attempt's where a step was retried)."""
    out: dict[str, float] = {}
    for s in spans:
        if s.kind == "step" and s.step and s.main:
            out[s.step] = s.main[1] - s.main[0]
    return out


_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) (.*)$")


def upload_seconds(log: str) -> float | None:
    """Seconds KFP's launcher spent after our step in a ``main`` container's log read with kubelet timestamps
    (``timestamps=True``): from its ``Executing uploadOutputArtifacts attempt: 1`` line to the log's last line
    (the upload to the object store and the ML Metadata publish); None when the log has no such line."""
    start = last = None
    for line in log.splitlines():
        m = _TS.match(line)
        if not m:
            continue
        t = parse_time(m.group(1))
        if start is None and "Executing uploadOutputArtifacts attempt: 1" in m.group(2):
            start = t
        last = t
    return None if start is None or last is None else last - start


@dataclass
class Measured:
    """One repetition: the three end-to-end seconds and, for the two cluster runs, :func:`breakdown` and
    :func:`main_seconds`; ``submit``: the command's start to the Workflow's ``startedAt``; ``upload``: the KFP
    steps' :func:`upload_seconds` summed."""

    e2e: dict[str, float] = field(default_factory=dict)
    submit: dict[str, float] = field(default_factory=dict)
    parts: dict[str, dict[str, float]] = field(default_factory=dict)
    mains: dict[str, dict[str, float]] = field(default_factory=dict)
    upload: float = 0.0


def extra_parts(m: Measured) -> dict[str, tuple[float, float]]:
    """KFP's and Argo's seconds of each part of KFP's extra time (the rows of the table and the
    ``kfp_extra_*`` figures): ``drivers``, ``launcher_copy``, ``launcher_in_main`` (the steps' ``main``
    containers, KFP's minus Argo's, over the steps both ran), ``step_other``, ``pod_start``, ``gaps_before_drivers``,
    ``gaps_before_steps``, ``gaps_end``, ``submit``, ``report`` (end to end minus the Workflow minus ``submit``):
    they add up to the end-to-end seconds."""
    k, a = m.parts["kfp"], m.parts["argo"]
    both = set(m.mains["kfp"]) & set(m.mains["argo"])
    return {"drivers": (k["driver"], a["driver"]),
            "launcher_copy": (k["launcher_copy"], a["launcher_copy"]),
            "launcher_in_main": (sum(m.mains["kfp"][s] for s in both), sum(m.mains["argo"][s] for s in both)),
            "step_other": (k["step"] - sum(m.mains["kfp"][s] for s in both),
                           a["step"] - sum(m.mains["argo"][s] for s in both)),
            "pod_start": (k["pod_start"], a["pod_start"]),
            "gaps_before_drivers": (k["gap_driver"], a["gap_driver"]),
            "gaps_before_steps": (k["gap_step"], a["gap_step"]), "gaps_end": (k["gap_end"], a["gap_end"]),
            "submit": (m.submit["kfp"], m.submit["argo"]),
            "report": (m.e2e["kfp"] - k["workflow"] - m.submit["kfp"], m.e2e["argo"] - a["workflow"] - m.submit["argo"])}


def table(m: Measured) -> str:
    """The parts of KFP's extra time as a Markdown table (seconds, share of KFP - Argo end to end)."""
    extra = m.e2e["kfp"] - m.e2e["argo"]
    rows = ["| part | KFP s | Argo s | KFP - Argo s | share of the extra |", "|---|---|---|---|---|",
            f"| end to end | {m.e2e['kfp']:.1f} | {m.e2e['argo']:.1f} | {extra:.1f} | 1.00 |"]
    for name, (k, a) in extra_parts(m).items():
        rows.append(f"| {name} | {k:.1f} | {a:.1f} | {k - a:.1f} | {(k - a) / extra if extra else float('nan'):.2f} |")
    k, a = m.parts["kfp"], m.parts["argo"]
    rows.append(f"| (pods one after the other: KFP {k['pods']:.0f}, Argo {a['pods']:.0f}; gaps per pod KFP "
                f"{k['gap'] / max(k['pods'], 1):.1f} s, Argo {a['gap'] / max(a['pods'], 1):.1f} s) | | | | |")
    rows.append(f"| (KFP driver pods: {k['drivers']:.0f}, summed {k['drivers_summed']:.1f} s; launcher copies summed "
                f"{k['launcher_copy_summed']:.1f} s; upload + publish after the steps {m.upload:.1f} s; local "
                f"{m.e2e['local']:.1f} s) | | | | |")
    return "\n".join(rows)


# --- the runs (real node) ------------------------------------------------------------------------------------

def _small() -> dict[str, Any]:
    from tests.realnode.test_kfp import SMALL

    return {**SMALL, "min_accuracy": 0.0}


def run_local(volume: Path) -> float:
    """``pipelines/train.py --local`` with the small training on ``volume``; seconds end to end."""
    params = {k: v for k, v in _small().items() if k not in ("tfds_data_dir", "kubernetes")}
    cmd = [sys.executable, "pipelines/train.py", "--local", "--volume", str(volume)]
    for k, v in params.items():
        cmd += ["--param", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, check=False, cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"train.py --local failed ({p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    return wall


def _pods(argo, ns: str, workflow: str) -> list[dict[str, Any]]:
    from kubernetes import client

    with argo.cluster.cp.admin_client() as api:
        return [api.sanitize_for_serialization(p) for p in client.CoreV1Api(api).list_namespaced_pod(
            ns, label_selector=f"workflows.argoproj.io/workflow={workflow}").items]


def run_argo(argo, ns: str) -> tuple[float, float, dict[str, Any], list[dict[str, Any]]]:
    """The plain Argo export submitted with the small training; (seconds end to end, the start's wall clock, the
    Workflow, its pods)."""
    from tests.realnode.argo_fixtures import FINISHED

    started, t0 = time.time(), time.monotonic()
    name = argo.submit(ns, REPO / "compiled" / "train.argo.yaml", _small())
    deadline = t0 + 1200
    while True:
        with contextlib.suppress(Exception):
            wf = argo.workflow(ns, name)
            if (wf.get("status") or {}).get("phase") in FINISHED:
                break
        if time.monotonic() > deadline:
            raise RuntimeError(f"argo workflow {name} not finished after 1200 s")
        time.sleep(POLL_S)
    wall = time.monotonic() - t0
    if wf["status"]["phase"] != "Succeeded":
        raise RuntimeError(f"argo workflow {name} {wf['status']['phase']}: {wf['status'].get('message')}")
    return wall, started, wf, _pods(argo, ns, name)


def run_kfp(kfp) -> tuple[float, float, dict[str, Any], list[dict[str, Any]], float]:
    """The small training as a KFP run (``train.py --run``); (seconds end to end, the start's wall clock, the
    run's Argo Workflow, its pods, the steps' upload seconds summed)."""
    from kubernetes import client

    from tests.realnode.kfp_fixtures import NAMESPACE
    from tests.realnode.test_kfp import FINISHED, start_run

    started, t0 = time.time(), time.monotonic()
    run_id = start_run(kfp, _small())
    print(f"  KFP run {run_id}: train.py --run took {time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)
    deadline = t0 + 1200
    state = ""
    while state not in FINISHED:
        with contextlib.suppress(Exception):  # a poll the API server did not answer: the next one
            state = kfp.api(f"runs/{run_id}", timeout=10).get("state")
        if time.monotonic() > deadline:
            raise RuntimeError(f"KFP run {run_id} not finished after 1200 s")
        if state not in FINISHED:
            time.sleep(POLL_S)
    wall = time.monotonic() - t0
    if state != "SUCCEEDED":
        raise RuntimeError(f"KFP run {run_id} {state}:\n{kfp.diagnostics()}")
    with kfp.argo.cluster.cp.admin_client() as api:
        wfs = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "argoproj.io", "v1alpha1", NAMESPACE, "workflows", label_selector=f"pipeline/runid={run_id}")["items"]
        # gone already (a TTL): the API server keeps the last Workflow it saw with the run (API v1beta1)
        wf = wfs[0] if len(wfs) == 1 else workflow_of_run(kfp.url, run_id)
        pods = _pods(kfp.argo, NAMESPACE, wf["metadata"]["name"])
        core = client.CoreV1Api(api)
        upload = 0.0
        for s in pod_spans(wf, pods):
            if s.kind == "step" and s.pod:
                with contextlib.suppress(Exception):
                    upload += upload_seconds(core.read_namespaced_pod_log(
                        s.pod, NAMESPACE, container="main", timestamps=True)) or 0.0
    return wall, started, wf, pods, upload


def workflow_of_run(url: str, run_id: str) -> dict[str, Any]:
    """The Argo Workflow KFP's API server keeps with a run: ``GET URL/apis/v1beta1/runs/ID`` ->
    ``pipeline_runtime.workflow_manifest`` (a JSON string; the v2beta1 API does not return it).

    Raises:
        RuntimeError: the run has no workflow manifest (not started yet).
    """
    import urllib.request

    with urllib.request.urlopen(f"{url}/apis/v1beta1/runs/{run_id}", timeout=30) as r:
        manifest = (json.loads(r.read()).get("pipeline_runtime") or {}).get("workflow_manifest")
    if not manifest:
        raise RuntimeError(f"KFP run {run_id} has no pipeline_runtime.workflow_manifest: not started yet?")
    return json.loads(manifest)


def measure(reps: int, cache_dir: str) -> list[Measured]:
    """Bring the node, Argo and KFP up; ``reps`` repetitions of the three runs, alternating their order."""
    from tests.realnode.argo_fixtures import prepare_namespace, remove_namespace, running_argo
    from tests.realnode.kfp_fixtures import running_kfp_backend
    from tests.realnode.realnode import running_real_cluster

    work = Path(tempfile.mkdtemp(prefix="tfk8s-bench-kfp-overhead-"))
    (work / "kfp").mkdir()
    local_volume = work / "local-volume"
    out: list[Measured] = []

    def on_sigterm(signum: int, frame: Any) -> None:  # tear the node down as a Ctrl-C would (as the e2e fixture)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with contextlib.ExitStack() as stack:
            t0 = time.monotonic()
            cluster = stack.enter_context(running_real_cluster(work / "node"))
            argo = stack.enter_context(running_argo(cluster))
            kfp = stack.enter_context(running_kfp_backend(argo, work / "kfp"))
            ns = prepare_namespace(cluster, f"bench-argo-{uuid.uuid4().hex[:8]}")
            stack.callback(remove_namespace, cluster, ns)
            print(f"bench kfp_overhead: node, Argo and KFP up in {time.monotonic() - t0:.0f}s", file=sys.stderr,
                  flush=True)
            for r in range(reps):
                m = Measured()
                order = ("local", "argo", "kfp") if r % 2 == 0 else ("kfp", "argo", "local")
                for what in order:
                    if what == "local":
                        m.e2e["local"] = run_local(local_volume)
                    elif what == "argo":
                        m.e2e["argo"], started, wf, pods = run_argo(argo, ns.name)
                        m.submit["argo"] = parse_time(wf["status"]["startedAt"]) - started
                        spans = pod_spans(wf, pods)
                        m.parts["argo"], m.mains["argo"] = breakdown(wf, spans), main_seconds(spans)
                    else:
                        m.e2e["kfp"], started, wf, pods, m.upload = run_kfp(kfp)
                        m.submit["kfp"] = parse_time(wf["status"]["startedAt"]) - started
                        spans = pod_spans(wf, pods)
                        m.parts["kfp"], m.mains["kfp"] = breakdown(wf, spans), main_seconds(spans)
                        for s in spans:
                            print(f"    kfp pod {s.name}: {s.kind} {s.step or ''} node {s.node[1] - s.node[0]:.0f}s"
                                  + (f", main {s.main[1] - s.main[0]:.0f}s" if s.main else "")
                                  + (f", launcher copy {s.launcher_copy[1] - s.launcher_copy[0]:.0f}s"
                                     if s.launcher_copy else ""), file=sys.stderr, flush=True)
                    print(f"  rep {r + 1}/{reps} {what}: {m.e2e[what]:.1f}s end to end (load average "
                          f"{os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
                print(f"  rep {r + 1}: per step main s, kfp {m.mains['kfp']}, argo {m.mains['argo']}",
                      file=sys.stderr, flush=True)
                print(table(m), file=sys.stderr, flush=True)
                out.append(m)
    finally:
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(work, ignore_errors=True)
    return out


def figures(ms: list[Measured], cores: int) -> list[Figure]:
    """The figures of the repetitions (medians; see the module docstring)."""
    note = f"{NOTE}; median of {len(ms)}"
    e2e = {k: median([m.e2e[k] for m in ms]) for k in ("local", "argo", "kfp")}
    out = [Figure("kfp_vs_argo", e2e["kfp"], "kfp", e2e["argo"], "argo", "s", "", cores, note + "; end to end"),
           Figure("kfp_vs_local", e2e["kfp"], "kfp", e2e["local"], "local", "s", "", cores, note + "; end to end"),
           Figure("argo_vs_local", e2e["argo"], "argo", e2e["local"], "local", "s", "", cores,
                  note + "; end to end")]
    extra = median([m.e2e["kfp"] - m.e2e["argo"] for m in ms])
    for part in extra_parts(ms[0]):
        diff = median([k - a for k, a in (extra_parts(m)[part] for m in ms)])
        out.append(Figure(f"kfp_extra_{part}", diff, f"{part}_kfp_minus_argo", extra, "kfp_minus_argo", "s", "",
                          cores, note + "; the share of KFP's extra end-to-end time this part explains"))
    k = ms[0].parts["kfp"]
    out.append(Figure("kfp_drivers_summed", median([m.parts["kfp"]["drivers_summed"] for m in ms]), "drivers_summed",
                      extra, "kfp_minus_argo", "s", "", cores,
                      note + f"; {k['drivers']:.0f} driver pods, their seconds summed (overlapping ones too)"))
    out.append(Figure("kfp_upload", median([m.upload for m in ms]), "upload_publish", extra, "kfp_minus_argo", "s",
                      "", cores, note + "; KFP's launcher after each step: artifact upload and MLMD publish, summed"))
    return out


def unavailable() -> str:
    """Why the node with Argo and KFP cannot be brought up here ("" when it can)."""
    from bench.real_cluster import unavailable as node_unavailable
    from tests.realnode.argo_fixtures import argo_unavailable
    from tests.realnode.kfp_fixtures import kfp_unavailable

    return node_unavailable() or argo_unavailable() or kfp_unavailable()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p, reps=1)
    a = p.parse_args(argv)
    why = "--smoke: the real node with Argo and KFP is not brought up by the smoke run" if a.smoke else unavailable()
    if why:
        print(f"bench kfp_overhead: skipped, no figures ({why})", flush=True)
        report([], a.out)
        return 0
    report(figures(measure(reps_of(a), a.cache_dir), usable_cores()), a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
