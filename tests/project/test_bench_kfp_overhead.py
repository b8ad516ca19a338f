"""bench/kfp_overhead.py's reading of a run's Argo Workflow and pods (no cluster): a recorded-shape KFP run and
plain Argo run, made up from the structure KFP 2.17.0's compiler gives (backend/src/v2/compiler/argocompiler:
``system-dag-driver``/``system-container-driver`` pods before each DAG and task, ``system-container-impl`` pods
with a ``kfp-launcher`` init container) and Argo v3.7.3 records (``status.nodes``, whole-second times)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.kfp_overhead import (
    Measured,
    breakdown,
    extra_parts,
    figures,
    main_seconds,
    parse_time,
    pod_spans,
    step_of,
    table,
    upload_seconds,
)

REPO = Path(__file__).resolve().parents[2]
T0 = "2026-12-04T20:00:"


def _t(s: int) -> str:
    return f"2026-12-04T20:{s // 60:02d}:{s % 60:02d}Z"


def _node(name: str, template: str, start: int, end: int, kind: str = "Pod") -> dict:
    return {"id": name.replace(".", "-"), "name": name, "displayName": name.rsplit(".", 1)[-1], "type": kind,
            "templateName": template, "phase": "Succeeded", "startedAt": _t(start), "finishedAt": _t(end)}


def _container(name: str, start: int, end: int) -> dict:
    return {"name": name, "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": _t(start),
                                                   "finishedAt": _t(end)}}}


def _pod(node: str, main: tuple[int, int], launcher: tuple[int, int] | None = None) -> dict:
    inits = [_container("init", main[0] - 3, main[0] - 2)]
    if launcher:
        inits.append(_container("kfp-launcher", *launcher))
    return {"metadata": {"name": node.replace(".", "-").lower(),
                         "annotations": {"workflows.argoproj.io/node-name": node}},
            "status": {"phase": "Succeeded", "initContainerStatuses": inits,
                       "containerStatuses": [_container("main", *main), _container("wait", main[0], main[1] + 1)]}}


def _workflow(name: str, nodes: list[dict], start: int, end: int) -> dict:
    return {"metadata": {"name": name},
            "status": {"phase": "Succeeded", "startedAt": _t(start), "finishedAt": _t(end),
                       "nodes": {n["id"]: n for n in nodes}}}


W = "tfk8s-train-x7k2p"
KFP_NODES = [
    _node(W, "entrypoint", 0, 60, "DAG"),
    _node(f"{W}.root-driver", "system-dag-driver", 1, 6),
    _node(f"{W}.root.ensure-volume-driver", "system-container-driver", 7, 11),
    _node(f"{W}.root.ensure-volume", "system-container-executor", 12, 24, "DAG"),
    _node(f"{W}.root.ensure-volume.executor", "system-container-impl", 12, 24),
    _node(f"{W}.root.condition-2-driver", "system-dag-driver", 26, 30),
    _node(f"{W}.root.condition-2.push-model-driver", "system-container-driver", 31, 35),
    _node(f"{W}.root.condition-2.push-model.executor", "system-container-impl", 36, 58),
    _node(f"{W}.root.condition-3", "comp-condition-3", 30, 30, "Skipped"),
]
KFP_PODS = [_pod(f"{W}.root-driver", (2, 5)), _pod(f"{W}.root.ensure-volume-driver", (8, 10)),
            _pod(f"{W}.root.ensure-volume.executor", (17, 22), (14, 16)),
            _pod(f"{W}.root.condition-2-driver", (27, 29)),
            _pod(f"{W}.root.condition-2.push-model-driver", (32, 34)),
            _pod(f"{W}.root.condition-2.push-model.executor", (41, 56), (38, 40))]
A = "tfk8s-train-argo-q9"
ARGO_NODES = [_node(A, "train", 0, 30, "DAG"), _node(f"{A}.ensure-volume", "ensure-volume", 1, 9),
              _node(f"{A}.push-model(0)", "push-model", 10, 28)]
ARGO_PODS = [_pod(f"{A}.ensure-volume", (4, 7)), _pod(f"{A}.push-model(0)", (13, 25))]


def _measured() -> Measured:
    m = Measured(e2e={"kfp": 80.0, "argo": 35.0, "local": 20.0}, submit={"kfp": 12.0, "argo": 2.0}, upload=2.5)
    for what, wf, pods in (("kfp", _workflow(W, KFP_NODES, 0, 60), KFP_PODS),
                           ("argo", _workflow(A, ARGO_NODES, 0, 30), ARGO_PODS)):
        spans = pod_spans(wf, pods)
        m.parts[what], m.mains[what] = breakdown(wf, spans), main_seconds(spans)
    return m


def test_timestamps_parse_with_and_without_nanoseconds():
    assert parse_time("1970-01-01T00:01:40Z") == 100.0
    assert parse_time("1970-01-01T00:01:40.250000000Z") == pytest.approx(100.25)
    assert parse_time("1970-01-01T01:01:40+01:00") == 100.0
    assert parse_time("") is None and parse_time(None) is None
    with pytest.raises(ValueError, match="not an RFC 3339 timestamp: '20:00'"):
        parse_time("20:00")


def test_a_nodes_step_is_read_from_its_full_name():
    assert step_of(f"{W}.root.ensure-volume.executor") == "ensure-volume"
    assert step_of(f"{W}.root.condition-2.push-model-driver") == "push-model"
    assert step_of(f"{A}.push-model(0)") == "push-model"
    assert step_of(f"{W}.root-driver") is None and step_of(f"{W}.root.condition-2-driver") is None


def test_pods_are_joined_to_their_nodes_drivers_told_apart_and_non_pod_nodes_left_out():
    spans = pod_spans(_workflow(W, KFP_NODES, 0, 60), KFP_PODS)
    assert [(s.kind, s.step) for s in spans] == [
        ("driver", None), ("driver", "ensure-volume"), ("step", "ensure-volume"), ("driver", None),
        ("driver", "push-model"), ("step", "push-model")]
    ev = spans[2]
    base = parse_time(_t(0))
    assert (ev.main[0] - base, ev.main[1] - base) == (17, 22)
    assert (ev.launcher_copy[0] - base, ev.launcher_copy[1] - base) == (14, 16)
    assert ev.pod == f"{W}-root-ensure-volume-executor"
    assert pod_spans(_workflow(A, ARGO_NODES, 0, 30), ARGO_PODS)[0].launcher_copy is None


def test_every_second_of_the_workflow_goes_to_one_part():
    m = _measured()
    k, a = m.parts["kfp"], m.parts["argo"]
    assert {p: k[p] for p in ("step", "launcher_copy", "driver", "pod_start", "gap")} == {
        "step": 20.0, "launcher_copy": 4.0, "driver": 17.0, "pod_start": 10.0, "gap": 9.0}
    assert (k["workflow"], k["drivers"], k["pods"], k["drivers_summed"], k["launcher_copy_summed"]) == (
        60.0, 4.0, 6.0, 17.0, 4.0)
    # before root-driver 1, ensure-volume-driver 1, condition-2-driver 2, push-model-driver 1; before the two
    # executor pods 1 + 1; after the last pod 2
    assert (k["gap_driver"], k["gap_step"], k["gap_end"]) == (5.0, 2.0, 2.0)
    assert (a["gap_driver"], a["gap_step"], a["gap_end"]) == (0.0, 2.0, 2.0)
    assert {p: a[p] for p in ("step", "launcher_copy", "driver", "pod_start", "gap")} == {
        "step": 15.0, "launcher_copy": 0.0, "driver": 0.0, "pod_start": 11.0, "gap": 4.0}
    assert m.mains == {"kfp": {"ensure-volume": 5.0, "push-model": 15.0},
                       "argo": {"ensure-volume": 3.0, "push-model": 12.0}}


def test_the_parts_of_kfps_extra_time_add_up_to_it():
    m = _measured()
    parts = extra_parts(m)
    assert parts == {"drivers": (17.0, 0.0), "launcher_copy": (4.0, 0.0), "launcher_in_main": (20.0, 15.0),
                     "step_other": (0.0, 0.0), "pod_start": (10.0, 11.0), "gaps_before_drivers": (5.0, 0.0),
                     "gaps_before_steps": (2.0, 2.0), "gaps_end": (2.0, 2.0),
                     "submit": (12.0, 2.0), "report": (8.0, 3.0)}
    assert sum(k - a for k, a in parts.values()) == m.e2e["kfp"] - m.e2e["argo"] == 45.0
    text = table(m)
    assert "| drivers | 17.0 | 0.0 | 17.0 | 0.38 |" in text and "| end to end | 80.0 | 35.0 | 45.0 | 1.00 |" in text
    assert "KFP driver pods: 4, summed 17.0 s" in text
    assert "pods one after the other: KFP 6, Argo 2; gaps per pod KFP 1.5 s, Argo 2.0 s" in text


def test_figures_are_ratios_of_the_medians():
    f = {x.name: x for x in figures([_measured()], 2)}
    assert f["kfp_vs_argo"].ratio == pytest.approx(80 / 35)
    assert f["kfp_vs_local"].ratio == 4.0 and f["argo_vs_local"].ratio == 1.75
    assert (f["kfp_extra_drivers"].a, f["kfp_extra_drivers"].b) == (17.0, 45.0)
    assert f["kfp_extra_pod_start"].a == -1.0 and f["kfp_extra_submit"].a == 10.0
    assert f["kfp_extra_report"].a == 5.0
    assert f["kfp_upload"].a == 2.5 and f["kfp_drivers_summed"].a == 17.0


def test_unfinished_or_empty_workflows_are_refused_naming_them():
    with pytest.raises(ValueError, match="'w' has no status.nodes"):
        pod_spans({"metadata": {"name": "w"}, "status": {}}, [])
    wf = _workflow(W, KFP_NODES, 0, 60)
    wf["status"]["finishedAt"] = None
    with pytest.raises(ValueError, match=f"'{W}' has not finished"):
        breakdown(wf, [])


def test_the_upload_after_the_step_is_read_from_the_launchers_log_stamps():
    log = (f"{T0}41.000000000Z I1204 20:00:41.000 launcher_v2.go:150] Executing ...\n"
           f"{T0}42.100000000Z tfk8s: push-model: pushed\n"
           f"{T0}53.250000000Z I1204 20:00:53.250 launcher_v2.go:867] Executing uploadOutputArtifacts attempt: 1\n"
           f"{T0}55.750000000Z I1204 20:00:55.750 launcher_v2.go:206] publish success.\n")
    assert upload_seconds(log) == pytest.approx(2.5)
    assert upload_seconds(f"{T0}41.000000000Z hello\n") is None


def test_smoke_says_why_and_prints_no_figure():
    p = subprocess.run([sys.executable, "bench/kfp_overhead.py", "--smoke"], cwd=REPO, capture_output=True,
                       text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == ("bench kfp_overhead: skipped, no figures (--smoke: the real node with Argo and KFP "
                                "is not brought up by the smoke run)")
