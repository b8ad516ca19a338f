"""The ``tfk8s`` command: see, follow, wait for and stop training jobs, local or on Kubernetes.

::

    tfk8s get [-o wide|json|yaml]            a table of the jobs: replicas ready/total, state, progress...
    tfk8s describe JOB [-o json|yaml]        replicas and TF_CONFIG, restarts and why, paths, events last
    tfk8s logs JOB [REPLICA] [-f]            a replica's whole log (every replica's, prefixed, without one)
    tfk8s wait JOB [--timeout S]             until it ends; exit 0 Succeeded, 1 Failed, 3 timed out
    tfk8s delete JOB                         stop a running job (its files stay on the volume)
    tfk8s report RUN                         write the run's HTML report (curves, confusion matrix...)
    tfk8s run [ARGS...]                      python pipelines/train.py --local ARGS (source checkout only)

Jobs are read from the job records on the volume (``--volume DIR``, default ``./volume``, the folder
``pipelines/train.py --local`` uses; in a cluster, the PVC's mount path): :mod:`tfk8s.jobs`. With
``-n/--namespace`` (or for a job recorded as a Kubernetes one) the cluster is asked too: live replicas are
found by the label ``tfk8s.dev/job-name``, logs read from their pods while the volume has none. Results go
to stdout, diagnostics to stderr; nothing is coloured. Exit codes: 0 ok, 1 failed (``wait``: the job
failed), 3 ``wait`` timed out, 4 no such job.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfk8s import jobs
from tfk8s.progress import read_job_progress
from tfk8s.progress_view import format_duration

EXIT_OK, EXIT_FAILED, EXIT_TIMEOUT, EXIT_NOT_FOUND = 0, 1, 3, 4
POLL_S = 0.5
LOST_AFTER_S = 30.0  # a Running Kubernetes record without objects in the cluster, not updated for this long


class CtlError(Exception):
    """A user-facing error: printed as ``tfk8s: error: <message>``, exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED):
        super().__init__(message)
        self.code = code


def _age(seconds: float) -> str:
    """kubectl's AGE: ``45s``, ``5m``, ``3h``, ``2d``."""
    s = int(max(0, seconds))
    if s < 120:
        return f"{s}s"
    if s < 3 * 3600:
        return f"{s // 60}m"
    if s < 2 * 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _dump(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    import yaml

    return yaml.safe_dump(data, sort_keys=False).rstrip()


class Ctl:
    """The commands, against one volume and (optionally) one cluster.

    Args:
        volume: the folder standing for the shared volume (its ``runs/*/train/job.json``).
        namespace: ask the cluster too, in this namespace ("" : only for jobs recorded as Kubernetes ones).
        kube_api: ``kube_api(namespace) -> tfk8s.kube.api.KubeApi`` (default: from the kubeconfig or the
            pod's service account).
        out, err: where results and diagnostics go.
    """

    def __init__(self, volume: str | os.PathLike, namespace: str = "",
                 kube_api: Callable[[str], Any] | None = None, out: Any = None, err: Any = None):
        self.volume = Path(volume)
        self.namespace = namespace
        self._kube_api = kube_api
        self._apis: dict[str, Any] = {}
        self.out, self.err = out or sys.stdout, err or sys.stderr

    # -- helpers ------------------------------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def warn(self, text: str) -> None:
        print(f"tfk8s: {text}", file=self.err, flush=True)

    def api(self, namespace: str) -> Any | None:
        """The cluster's API for ``namespace`` (None, with a diagnostic, when it cannot be reached)."""
        if namespace in self._apis:
            return self._apis[namespace]
        api = None
        try:
            if self._kube_api is not None:
                api = self._kube_api(namespace)
            else:
                from tfk8s.kube.api import KubeApi
                from tfk8s.kube.settings import resolve_namespace
                from tfk8s.launcher.kubernetes import load_api_client

                api = KubeApi(load_api_client(), resolve_namespace(namespace))
        except Exception as e:  # noqa: BLE001 - the volume still answers
            self.warn(f"cannot ask the cluster (namespace {namespace or 'default'}): {e}")
        self._apis[namespace] = api
        return api

    def live(self, namespace: str) -> dict[str, dict[str, Any]] | None:
        """The jobs with objects in ``namespace`` now (:func:`tfk8s.jobs.live_kubernetes_jobs`); None, with a
        diagnostic, when the cluster cannot be asked."""
        api = self.api(namespace)
        if api is None:
            return None
        try:
            return jobs.live_kubernetes_jobs(api)
        except Exception as e:  # noqa: BLE001
            self.warn(f"cannot list the jobs in namespace {namespace}: {e}")
            return None

    @staticmethod
    def _overlay(record: dict[str, Any], found: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
        """A running Kubernetes job's record with its live replicas laid over; ``Lost`` when the cluster says it
        has no objects left while the record, not updated for :data:`LOST_AFTER_S`, still says Running (its
        launcher was stopped or its pod deleted before it could record the outcome)."""
        if jobs.effective_state(record) != "Running" or found is None:
            return record
        live = found.get(record["name"])
        if live is None:
            if time.time() - float(record.get("updated") or record.get("created") or 0) > LOST_AFTER_S:
                return {**record, "state": "Lost", "message": "the cluster has no objects of this job and its "
                        "launcher recorded no outcome (it was stopped, or its pod deleted)"}
            return record
        return jobs.merge_live(record, live)

    def _records(self) -> list[dict[str, Any]]:
        return jobs.list_records(self.volume)

    def find(self, name: str) -> dict[str, Any]:
        """The job ``name`` (or run id): its record with live replica states laid over (Kubernetes), or only
        what the cluster knows when the volume has no record.

        Raises:
            CtlError: no such job (exit code 4).
        """
        try:
            record: dict[str, Any] | None = jobs.find_record(self.volume, name)
        except jobs.JobNotFoundError as e:
            record, missing = None, str(e)
        namespace = (record or {}).get("namespace") or self.namespace
        if (record or {}).get("backend") == "kubernetes" or (record is None and self.namespace):
            found = self.live(namespace)
            if record is None:
                if not (found or {}).get(name):
                    raise CtlError(f"{missing}; nor is there a job {name} in namespace {namespace}",
                                   EXIT_NOT_FOUND)
                return dict(found[name])
            record = self._overlay(record, found)
        if record is None:
            raise CtlError(missing, EXIT_NOT_FOUND)
        return record

    # -- get ----------------------------------------------------------------------------------------------------------
    def get(self, output: str = "") -> int:
        """Print the jobs as a table (``-o wide`` adds namespace, run, step, ETA, TensorBoard) or as data."""
        records = self._records()
        namespaces = {r.get("namespace") or "" for r in records
                      if r.get("backend") == "kubernetes" and jobs.effective_state(r) == "Running"}
        if self.namespace:
            namespaces.add(self.namespace)
        live: dict[str, dict[str, Any]] = {}
        answered: dict[str, dict[str, Any] | None] = {}
        for ns in sorted(namespaces):
            answered[ns] = self.live(ns)
            live.update(answered[ns] or {})
        by_name = {r["name"]: r for r in records}
        merged = [self._overlay(r, answered.get(r.get("namespace") or "", answered.get(self.namespace)))
                  if r.get("backend") == "kubernetes" else r for r in records]
        merged += [v for k, v in live.items() if k not in by_name]
        statuses = [(r, jobs.job_status(r)) for r in merged]
        if output in ("json", "yaml"):
            self.say(_dump([{**_status_dict(s), "record": r} for r, s in statuses], output))
            return EXIT_OK
        if not statuses:
            self.warn(f"no jobs recorded under {self.volume / 'runs'}"
                      + (f" or running in namespace {self.namespace}" if self.namespace else ""))
            return EXIT_OK
        head = ["JOB", "BACKEND", "REPLICAS", "STATE", "PROGRESS", "EPOCH", "EX/S", "RESTARTS", "AGE"]
        if output == "wide":
            head += ["NAMESPACE", "RUN", "STEP", "ETA", "TENSORBOARD"]
        rows = [head]
        for r, s in statuses:
            replicas = ",".join(f"{t} {s.ready.get(t, 0)}/{n}" for t, n in s.total.items()) or "-"
            row = [s.name, s.backend, replicas, s.state,
                   f"{s.fraction * 100:.0f}%" if s.fraction is not None else "-",
                   f"{s.epoch}/{s.epochs}" if s.epoch is not None and s.epochs else (str(s.epoch or "-")),
                   f"{s.examples_per_sec:.0f}" if s.examples_per_sec else "-", str(s.restarts), _age(s.age_s)]
            if output == "wide":
                row += [r.get("namespace") or "-", str(r.get("run_id") or "-"),
                        f"{s.step}/{s.steps}" if s.step is not None and s.steps else str(s.step or "-"),
                        format_duration(s.eta_s) if s.eta_s is not None else "-",
                        (r.get("paths") or {}).get("tensorboard") or "-"]
            rows.append(row)
        self.say(_table(rows))
        return EXIT_OK

    # -- describe -----------------------------------------------------------------------------------------------------
    def describe(self, name: str, output: str = "") -> int:
        """Print everything about a job a person needs to debug it, events last (or all of it as data)."""
        r = self.find(name)
        paths = r.get("paths") or {}
        progress = read_job_progress(paths["train_dir"]) if paths.get("train_dir") else {}
        status = jobs.job_status(r, progress)
        events = list(r.get("events") or [])
        api = self.api(r.get("namespace") or self.namespace) if r.get("backend") == "kubernetes" else None
        kube_events: list[dict[str, Any]] = []
        if api is not None:
            for pod in (r.get("pods") or {}).values():
                try:
                    kube_events += api.list_events(pod)
                except Exception as e:  # noqa: BLE001 - events are a bonus
                    self.warn(f"cannot list the events of pod {pod}: {e}")
        if output in ("json", "yaml"):
            data = {**r, "status": _status_dict(status),
                    "progress": {k: vars(v) if hasattr(v, "__dict__") else v.__dict__ for k, v in progress.items()},
                    "kubernetes_events": kube_events}
            self.say(_dump(json.loads(json.dumps(data, default=lambda o: o.__dict__)), output))
            return EXIT_OK
        lines = [f"Name:          {r.get('name')}", f"Backend:       {r.get('backend')}"]
        if r.get("namespace"):
            lines.append(f"Namespace:     {r['namespace']}")
        lines += [f"Run id:        {r.get('run_id', '-')}", f"State:         {status.state}"
                  + (f" ({r['message']})" if r.get("message") else "")]
        if r.get("created"):
            lines.append(f"Created:       {_when(r['created'])} ({_age(time.time() - r['created'])} ago)")
        if r.get("finished"):
            lines.append(f"Finished:      {_when(r['finished'])}"
                         + (f" (trained in {r['wall_time_s']:.1f}s)" if r.get("wall_time_s") else ""))
        if status.fraction is not None or status.epoch is not None:
            from tfk8s.progress_view import progress_fields

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
                                             f"{_age(p.age_s())} ago") if x)
            rows.append([f"  {label}", state, addr, ptext])
        lines.append(_table(rows))
        if spec:
            first = next(iter(spec))
            example = {"cluster": spec, "task": {"type": first, "index": 0}, "environment": "cloud"}
            lines += [f"TF_CONFIG of {first}-0 (each replica gets its own task):", "  " + json.dumps(example)]
        lines.append(f"Restarts:      {r.get('restarts', 0)}")
        for x in r.get("restart_reasons") or []:
            lines.append(f"  {_when(x['time'])}  {x['message']}")
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
            lines.append(f"  {_when(e['time'])}  {e['message']}")
        self.say("\n".join(lines))
        return EXIT_OK

    # -- logs ---------------------------------------------------------------------------------------------------------
    def logs(self, name: str, replica: str = "", follow: bool = False) -> int:
        """Print a replica's log (every replica's, ``[label]``-prefixed, without one): from the volume's
        ``replica-logs/`` (complete, every attempt, there after the pods are gone), else from the live pod;
        ``follow``: keep printing until the job ends."""
        r = self.find(name)
        labels = list((r.get("replica_states") or {}).keys())
        if replica and replica not in labels:
            raise CtlError(f"job {name} has no replica {replica!r}; its replicas: {', '.join(labels)}")
        chosen = [replica] if replica else labels
        log_dir = Path((r.get("paths") or {}).get("replica_logs") or "/nonexistent")
        files = {label: log_dir / f"{label}.log" for label in chosen}
        on_volume = [label for label, f in files.items() if f.is_file()]
        if not on_volume and r.get("backend") == "kubernetes" and r.get("pods"):
            return self._pod_logs(r, chosen, follow)
        if not on_volume and not follow:
            self.warn(f"no log of {', '.join(chosen)} under {log_dir} yet")
            return EXIT_OK
        prefix = len(chosen) > 1
        offsets = dict.fromkeys(chosen, 0)
        quiet_since: float | None = None
        while True:
            wrote = False
            for label in chosen:
                f = files[label]
                if not f.is_file():
                    continue
                with open(f, encoding="utf-8", errors="replace") as fh:
                    fh.seek(offsets[label])
                    data = fh.read()
                    if follow:  # only whole lines while following
                        data = data[: data.rfind("\n") + 1]
                    offsets[label] += len(data.encode("utf-8"))
                for line in data.splitlines():
                    self.say(f"[{label}] {line}" if prefix else line)
                    wrote = True
            if not follow:
                return EXIT_OK
            record = self.find(name)
            if jobs.effective_state(record) in jobs.TERMINAL_STATES and not wrote:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 1.0:
                    return EXIT_OK
            time.sleep(POLL_S)

    def _pod_logs(self, r: dict[str, Any], labels: list[str], follow: bool) -> int:
        from tfk8s.kube.api import close_stream, iter_lines
        from tfk8s.kube.objects import CONTAINER_NAME

        api = self.api(r.get("namespace") or self.namespace)
        if api is None:
            raise CtlError(f"the volume holds no log of {r['name']} and the cluster cannot be asked")
        prefix = len(labels) > 1
        for label in labels:
            pod = (r.get("pods") or {}).get(label)
            if not pod:
                self.warn(f"{label} has no pod")
                continue
            if follow and len(labels) == 1:
                resp = api.open_log(pod, CONTAINER_NAME)
                try:
                    for line in iter_lines(resp):
                        self.say(line)
                finally:
                    close_stream(resp)
            else:
                for line in api.read_log_tail(pod, CONTAINER_NAME, 10**6):
                    self.say(f"[{label}] {line}" if prefix else line)
        return EXIT_OK

    # -- wait ---------------------------------------------------------------------------------------------------------
    def wait(self, name: str, timeout_s: float | None = None) -> int:
        """Wait until the job ends; exit 0 when it succeeded, 1 when it failed (or was lost or deleted), 3 when
        ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s if timeout_s else None
        while True:
            r = self.find(name)
            state = jobs.effective_state(r)
            if state in jobs.TERMINAL_STATES:
                detail = f": {r['message']}" if r.get("message") else ""
                self.say(f"{r['name']} {state}{detail}")
                return EXIT_OK if state == "Succeeded" else EXIT_FAILED
            if deadline is not None and time.monotonic() >= deadline:
                self.warn(f"timed out after {timeout_s:g}s waiting for {r['name']} (still {state})")
                return EXIT_TIMEOUT
            time.sleep(POLL_S)

    # -- delete -------------------------------------------------------------------------------------------------------
    def delete(self, name: str, wait_s: float = 60.0) -> int:
        """Stop a running job: local, SIGTERM to its launcher (which stops every replica); Kubernetes, delete its
        Jobs, Services, pods, NetworkPolicy and PodGroup. Its files stay on the volume. A finished job is left as it is."""
        r = self.find(name)
        state = jobs.effective_state(r)
        if state in jobs.TERMINAL_STATES:
            self.say(f"{r['name']} already ended ({state}); nothing to stop (its files stay under "
                     f"{(r.get('paths') or {}).get('train_dir', self.volume)})")
            return EXIT_OK
        if r.get("backend") == "local":
            launcher = r.get("launcher") or {}
            if launcher.get("host") != socket.gethostname():
                raise CtlError(f"{r['name']} runs on host {launcher.get('host')}: run tfk8s delete there")
            try:
                os.kill(int(launcher["pid"]), signal.SIGTERM)
            except ProcessLookupError:
                pass
        else:
            api = self.api(r.get("namespace") or self.namespace)
            if api is None:
                raise CtlError(f"cannot reach the cluster to delete {r['name']}")
            from tfk8s.kube.errors import KubernetesApiError

            selector = f"{jobs.JOB_NAME_LABEL}={r['name']}"
            for item in api.list_jobs(selector).get("items") or []:
                api.delete_job(item["metadata"]["name"])
            for item in api.list_services(selector).get("items") or []:
                api.delete_service(item["metadata"]["name"])
            for item in api.list_pods(selector).get("items") or []:
                api.delete_pod(item["metadata"]["name"])
            for lister, deleter in ((api.list_network_policies, api.delete_network_policy),
                                    (api.list_pod_groups, api.delete_pod_group)):
                try:
                    for item in lister(selector).get("items") or []:
                        deleter(item["metadata"]["name"])
                except KubernetesApiError as e:  # no PodGroup API on this cluster: no PodGroup either
                    if e.status != 404:
                        raise
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                if jobs.effective_state(self.find(name)) in jobs.TERMINAL_STATES:
                    break
            except CtlError:  # known only to the cluster, and gone from it now
                break
            time.sleep(POLL_S)
        record_file = Path((r.get("paths") or {}).get("train_dir", "")) / jobs.RECORD_FILE
        latest = jobs.read_record(record_file) if record_file.is_file() else None
        if latest is not None and jobs.effective_state(latest) in ("Running", "Lost"):
            latest.update(state="Deleted", message="deleted with tfk8s delete", finished=time.time())
            jobs.write_record(record_file, latest)
        self.say(f"{r['name']} deleted")
        return EXIT_OK

    # -- report -------------------------------------------------------------------------------------------------------
    def report(self, run: str, output: str = "") -> int:
        """Write the run's HTML report (``<run dir>/report.html``, or ``output``) and print its path."""
        from tfk8s.html_report import write_run_report

        run_dir = Path(run)
        if not (run_dir / "train").is_dir():
            candidate = self.volume / "runs" / run
            if (candidate / "train").is_dir():
                run_dir = candidate
            else:
                record = self.find(run)
                run_dir = Path(record["paths"]["train_dir"]).parent
        path = write_run_report(run_dir, output or None)
        self.say(str(path))
        return EXIT_OK


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _status_dict(s: jobs.JobStatus) -> dict[str, Any]:
    return {"name": s.name, "backend": s.backend, "state": s.state, "ready": s.ready, "total": s.total,
            "progress": s.fraction, "epoch": s.epoch, "epochs": s.epochs, "step": s.step, "steps": s.steps,
            "examples_per_sec": s.examples_per_sec, "eta_s": s.eta_s, "restarts": s.restarts,
            "age_s": round(s.age_s, 1)}


def _run_pipeline(args: list[str]) -> int:
    """``python pipelines/train.py --local ARGS`` of the source checkout this package lives in."""
    script = Path(__file__).resolve().parent.parent / "pipelines" / "train.py"
    if not script.is_file():
        raise CtlError(f"tfk8s run needs the source checkout (no {script}); use python pipelines/train.py --local")
    return subprocess.call([sys.executable, str(script), "--local", *args])


def build_parser() -> argparse.ArgumentParser:
    """The ``tfk8s`` argument parser (``tfk8s --help``)."""
    p = argparse.ArgumentParser(prog="tfk8s", description=__doc__.split("\n\n")[0].replace("``", ""),
                                epilog="Exit codes: 0 ok, 1 failed, 3 wait timed out, 4 no such job.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--volume", default="volume",
                        help="folder standing for the shared volume (default: ./volume, as pipelines/train.py "
                             "--local); in a cluster the PVC's mount path")
    common.add_argument("-n", "--namespace", default="", help="also ask the cluster, in this namespace")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    g = sub.add_parser("get", parents=[common], help="list the jobs")
    g.add_argument("-o", "--output", choices=("wide", "json", "yaml"), default="")
    d = sub.add_parser("describe", parents=[common], help="everything about one job, events last")
    d.add_argument("job", help="job name or run id")
    d.add_argument("-o", "--output", choices=("json", "yaml"), default="")
    lg = sub.add_parser("logs", parents=[common], help="a replica's whole log")
    lg.add_argument("job")
    lg.add_argument("replica", nargs="?", default="", help="e.g. worker-1 (default: every replica, prefixed)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    w = sub.add_parser("wait", parents=[common], help="wait until a job ends (exit code: its outcome)")
    w.add_argument("job")
    w.add_argument("--timeout", type=float, default=0.0, help="give up after this many seconds (0: never)")
    dl = sub.add_parser("delete", parents=[common], help="stop a running job")
    dl.add_argument("job")
    rp = sub.add_parser("report", parents=[common], help="write a run's HTML report")
    rp.add_argument("run", help="run id, job name, or run folder (<volume>/runs/<run id>)")
    rp.add_argument("--output", default="", help="where to write it (default: <run dir>/report.html)")
    rn = sub.add_parser("run", help="python pipelines/train.py --local ARGS...", add_help=False)
    rn.add_argument("args", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None, *, kube_api: Callable[[str], Any] | None = None) -> int:
    """Run one ``tfk8s`` command; returns its exit code (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:
        try:
            return _run_pipeline(argv[1:])
        except CtlError as e:
            print(f"tfk8s: error: {e}", file=sys.stderr)
            return e.code
    a = build_parser().parse_args(argv)
    ctl = Ctl(a.volume, a.namespace, kube_api)
    try:
        if a.command == "get":
            return ctl.get(a.output)
        if a.command == "describe":
            return ctl.describe(a.job, a.output)
        if a.command == "logs":
            return ctl.logs(a.job, a.replica, a.follow)
        if a.command == "wait":
            return ctl.wait(a.job, a.timeout or None)
        if a.command == "delete":
            return ctl.delete(a.job)
        if a.command == "report":
            return ctl.report(a.run, a.output)
    except CtlError as e:
        print(f"tfk8s: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    raise AssertionError(a.command)


def entry_point() -> None:
    """The ``tfk8s`` console script."""
    try:
        code = main()
    except BrokenPipeError:  # `tfk8s logs JOB | head`: the reader has gone, which is fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = EXIT_OK
    raise SystemExit(code)
