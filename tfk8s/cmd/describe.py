"""``tfk8s describe JOB``: everything about one job a person needs to debug it (replicas and their TF_CONFIG
layout, restarts and why, the files), events last; or all of it as data (``-o json|yaml``)."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfk8s.cmd.context import EXIT_OK, Context, age, dump, status_dict, table, when
from tfk8s.core.progress import read_job_progress
from tfk8s.tracking import records
from tfk8s.tracking.progress_view import progress_fields


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``describe`` and its flags to the command's subparsers."""
    p = sub.add_parser("describe", parents=[common], help="everything about one job, events last")
    p.add_argument("job", help="job name or run id")
    p.add_argument("-o", "--output", choices=("json", "yaml"), default="")

@dataclass
class Options:
    """``tfk8s describe``'s options: the job (name or run id) and ``output`` (``""``, ``json``, ``yaml``)."""

    job: str
    output: str = ""

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Options:
        """The options from the parsed flags."""
        return cls(args.job, args.output)

    def validate(self) -> None:
        """Nothing to check beyond the flags' choices."""

    def run(self, ctx: Context) -> int:
        """Print everything about a job a person needs to debug it, events last (or all of it as data)."""
        r = ctx.find(self.job)
        paths = r.get("paths") or {}
        progress = read_job_progress(paths["train_dir"]) if paths.get("train_dir") else {}
        status = records.job_status(r, progress)
        events = list(r.get("events") or [])
        api = ctx.api_for(r)
        kube_events: list[dict[str, Any]] = []
        if api is not None:
            kube_events = ctx.events(r, api)
        if self.output in ("json", "yaml"):
            data = {**r, "status": status_dict(status),
                    "progress": {k: vars(v) if hasattr(v, "__dict__") else v.__dict__ for k, v in progress.items()},
                    "kubernetes_events": kube_events}
            ctx.say(dump(json.loads(json.dumps(data, default=lambda o: o.__dict__)), self.output))
            return EXIT_OK
        lines = [f"Name:          {r.get('name')}", f"Backend:       {r.get('backend')}"]
        if r.get("namespace"):
            lines.append(f"Namespace:     {r['namespace']}")
        lines += [f"Run id:        {r.get('run_id', '-')}", f"State:         {status.state}"
                  + (f" ({r['message']})" if r.get("message") else "")]
        if r.get("created"):
            lines.append(f"Created:       {when(r['created'])} ({age(time.time() - r['created'])} ago)")
        if r.get("finished"):
            lines.append(f"Finished:      {when(r['finished'])}"
                         + (f" (trained in {r['wall_time_s']:.1f}s)" if r.get("wall_time_s") else ""))
        if status.fraction is not None or status.epoch is not None:
            lines.append(f"Progress:      {'  '.join(progress_fields(status))}")
        if r.get("selector"):
            lines.append(f"Selector:      {r['selector']}")
        spec = r.get("cluster_spec") or {}
        lines += ["Replicas:"]
        rows = [["  REPLICA", "STATE", "ADDRESS", "PROGRESS"]]
        for label, state in (r.get("replica_states") or {}).items():
            rtype, index = label.rsplit("-", 1)
            addrs = spec.get(rtype) or []
            addr = addrs[int(index)] if int(index) < len(addrs) else ("(not in the cluster spec)"
                                                                       if rtype == "evaluator" else "-")
            p = progress.get(label)
            ptext = "-"
            if p is not None:
                ptext = " ".join(x for x in (p.state, f"epoch {p.epoch}/{p.epochs}" if p.epoch else "",
                                             f"step {p.step}" if p.step is not None else "",
                                             f"{age(p.age_s())} ago") if x)
            rows.append([f"  {label}", state, addr, ptext])
        lines.append(table(rows))
        if spec:
            first = next(iter(spec))
            example = {"cluster": spec, "task": {"type": first, "index": 0}, "environment": "cloud"}
            lines += [f"TF_CONFIG of {first}-0 (each replica gets its own task):", "  " + json.dumps(example)]
        preempted = int(r.get("preemptions") or 0)
        lines.append(f"Restarts:      {r.get('restarts', 0)}"
                     + (f"  (and {preempted} after preemptions, not counted against max_restarts)" if preempted else ""))
        for x in r.get("restart_reasons") or []:
            lines.append(f"  {when(x['time'])}  {x['message']}")
        lines += ["Files:"]
        for key, what in (("replica_logs", "replica logs"), ("checkpoints", "checkpoints"),
                          ("tensorboard", "TensorBoard logs"), ("saved_model", "model"),
                          ("summary", "training summary"), ("report", "HTML report")):
            if paths.get(key):  # a failed or running job has not written them all: say so instead of a dead path
                missing = "" if Path(paths[key]).exists() else "  (not there)"
                lines.append(f"  {what + ':':<18} {paths[key]}{missing}")
        if r.get("tensorboard_command"):
            lines.append(f"  {'TensorBoard:':<18} {r['tensorboard_command']}  (pip install 'tfk8s[tensorboard]')")
        lines.append("Events:")
        if not events and not kube_events:
            lines.append("  <none>")
        for e in kube_events[-10:]:
            obj = e.get("involvedObject") or {}
            lines.append(f"  {e.get('lastTimestamp') or ''}  {e.get('type', '')} {e.get('reason', '')} "
                         f"{obj.get('kind', '')}/{obj.get('name', '')}: {e.get('message', '')}")
        for e in events[-20:]:
            lines.append(f"  {when(e['time'])}  {e['message']}")
        ctx.say("\n".join(lines))
        return EXIT_OK

