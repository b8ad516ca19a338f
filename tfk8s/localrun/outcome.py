"""The block a local run ends with: what a person needs next (the accuracy, the export, the gate's verdict and
why, the report, the job and how to follow it, TensorBoard, where everything is)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def why_not_blessed(metrics: dict[str, Any]) -> str:
    """Why the gate did not bless, as a person reads it, from the Metrics artifact's metadata: its ``not_blessed``
    ("not blessed: <the failed checks>") without the prefix, else its ``reasons``: one string (what KFP's UI
    shows, :func:`tfk8s.steps.evaluate_model.ui_metadata`) or a list of sentences ("; "-joined)."""
    why = metrics.get("not_blessed") or ""
    if isinstance(why, str) and why.strip():
        return why.removeprefix("not blessed: ").strip()
    reasons = metrics.get("reasons") or ""
    return reasons if isinstance(reasons, str) else "; ".join(str(x) for x in reasons)


def print_outcome(r: dict[str, Any]) -> None:
    """Print the block for ``r``, the result of :func:`tfk8s.localrun.runner.run_local`."""
    job = r["job"]
    print(f"\ntfk8s: pipeline finished in {r['wall_time_s']:.0f}s")
    m = r["metrics"]
    if m.get("not_evaluated"):
        print(f"  evaluation    : {m['not_evaluated']}")
    shown = {k: v for k, v in m.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    if r["accuracy"] is not None and m.get("evaluated"):
        loss = f"   (loss {r['loss']:.4f})" if r["loss"] is not None else ""
        print(f"  test accuracy : {r['accuracy']:.4f}{loss}")
    elif shown:
        print("  metrics       : " + ", ".join(f"{k} {v:.4g}" for k, v in shown.items()))
    print(f"  exported model: {r['export_path']}  (version {r['version']})")
    verdict = "blessed, pushed to the serving base" if r["blessed"] else "NOT blessed, not pushed"
    print(f"  quality gate  : {verdict}  (summary: {r['summary']})")
    if not r["blessed"] and (why := why_not_blessed(m)):
        print(f"  why           : {why}")
    print(f"  report        : {r['report']}  (training curves, confusion matrix, throughput)")
    print(f"  run folder    : {r['run_dir']}  (data, checkpoints, TensorBoard logs, replica logs)")
    if job:
        print(f"  job           : {job['name']}  (tfk8s describe {job['name']} --volume {r['volume']})")
        logs = (job.get("paths") or {}).get("tensorboard")
        if logs and not any(Path(logs).rglob("events.out.tfevents.*")):
            print(f"  TensorBoard   : no event files under {logs} (the program wrote none to TFK8S_TENSORBOARD_DIR)")
        else:
            print(f"  TensorBoard   : {job.get('tensorboard_command')}  (pip install 'tfk8s[tensorboard]')")
    print(f"  volume        : {r['volume']}  (models/ every export, serving/ blessed versions)")
    print(f"  artifacts     : {r['pipeline_root']}  (each step's output.log under <run>/<step>/)")
